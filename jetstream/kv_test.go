package jetstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/slotlease/slotlease/manager"
)

// testConn starts an embedded server with JetStream and connects to it;
// both end with the test.
func testConn(t *testing.T) *nats.Conn {
	t.Helper()
	srv, err := StartServer(ServerConfig{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// openTestStore opens the lease bucket on a server of its own.
func openTestStore(t *testing.T) *LeaseStore {
	t.Helper()
	nc := testConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := OpenLeaseStore(ctx, nc, BucketConfig{Name: "test_leases"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLeaseStoreWrites checks the store's conditional writes against a real
// server: each refuses what it must with the error the manager relies on,
// and a renewal keeps a TTL.
func TestLeaseStoreWrites(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rev, err := s.Create(ctx, "n.p.a", []byte("one"), time.Minute)
	if err != nil || rev == 0 {
		t.Fatalf("Create: rev %d, %v", rev, err)
	}
	if _, err := s.Create(ctx, "n.p.a", []byte("two"), time.Minute); !errors.Is(err, manager.ErrStoreExists) {
		t.Fatalf("Create over a live key: %v, want ErrStoreExists", err)
	}
	if _, err := s.Renew(ctx, "n.p.a", []byte("two"), time.Minute, rev+100); !errors.Is(err, manager.ErrStoreRevision) {
		t.Fatalf("Renew at a wrong revision: %v, want ErrStoreRevision", err)
	}
	rev2, err := s.Renew(ctx, "n.p.a", []byte("two"), time.Minute, rev)
	if err != nil || rev2 <= rev {
		t.Fatalf("Renew: rev %d after %d, %v", rev2, rev, err)
	}
	if v, r, err := s.Get(ctx, "n.p.a"); err != nil || string(v) != "two" || r != rev2 {
		t.Fatalf("Get after Renew: %q rev %d, %v; want \"two\" rev %d", v, r, err, rev2)
	}
	if err := s.Delete(ctx, "n.p.a", rev); !errors.Is(err, manager.ErrStoreRevision) {
		t.Fatalf("Delete at a stale revision: %v, want ErrStoreRevision", err)
	}
	if err := s.Delete(ctx, "n.p.a", rev2); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, _, err := s.Get(ctx, "n.p.a"); !errors.Is(err, manager.ErrStoreNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrStoreNotFound", err)
	}
	// The purge left a marker with a TTL; the key is created again over it.
	stream, err := s.js.Stream(ctx, "KV_test_leases")
	if err != nil {
		t.Fatal(err)
	}
	marker, err := stream.GetLastMsgForSubject(ctx, "$KV.test_leases.n.p.a")
	if err != nil || marker.Header.Get(kvOperation) != "PURGE" || marker.Header.Get(jetstream.MsgTTLHeader) != MarkerTTL.String() {
		t.Fatalf("the purge marker: %+v, %v; want a PURGE with a %v TTL", marker, err, MarkerTTL)
	}
	rev3, err := s.Create(ctx, "n.p.a", []byte("three"), time.Minute)
	if err != nil || rev3 <= rev2 {
		t.Fatalf("Create over the purge marker: rev %d, %v", rev3, err)
	}
	if err := s.Delete(ctx, "n.p.gone", 1); !errors.Is(err, manager.ErrStoreRevision) {
		t.Fatalf("Delete of a key never written: %v, want ErrStoreRevision", err)
	}

	// A queue entry: no TTL. A renewal then gives the key one, and the
	// record expires with it.
	qrev, err := s.Create(ctx, "n.p.q", []byte("queued"), 0)
	if err != nil {
		t.Fatalf("Create without TTL: %v", err)
	}
	if _, err := s.Renew(ctx, "n.p.q", []byte("granted"), time.Second, qrev); err != nil {
		t.Fatalf("Renew with a TTL: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := s.Get(ctx, "n.p.q")
		if errors.Is(err, manager.ErrStoreNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a record renewed with a 1s TTL is still there after 10s (%v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, _, err := s.Get(ctx, "n.p.a"); err != nil || string(v) != "three" {
		t.Fatalf("the record with a minute's TTL: %q, %v", v, err)
	}
}

func TestParseAck(t *testing.T) {
	for _, c := range []struct {
		ack     string
		seq     uint64
		errWant string // substring; "" for none
	}{
		{`{"stream":"KV_x","seq":42}`, 42, ""},
		{`{"stream":"KV_x","seq":7,"duplicate":true}`, 7, ""},
		{`{"stream":"KV_x","domain":"hub","seq":9}`, 9, ""},             // another field order: slow path
		{`{"stream":"KV_x","seq":18446744073709551615}`, 1<<64 - 1, ""}, // 20 digits: slow path
		{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_x","seq":0}`, 0, "wrong last sequence"},
		{`{"stream":"KV_x","seq":12,"error":{"code":503,"err_code":10077,"description":"resource limits exceeded"}}`, 0, "resource limits"},
		{`{"stream":"","seq":3}`, 0, "invalid jetstream publish response"},
		{`{"stream":"KV_x","seq":`, 0, "invalid jetstream publish response"},
		{`{"stream":"KV_x","seq":-1}`, 0, "invalid jetstream publish response"},
		{``, 0, "invalid jetstream publish response"},
		{`not json`, 0, "invalid jetstream publish response"},
	} {
		seq, err := parseAck([]byte(c.ack))
		if c.errWant == "" {
			if err != nil || seq != c.seq {
				t.Errorf("parseAck(%s) = %d, %v; want %d", c.ack, seq, err, c.seq)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.errWant) {
			t.Errorf("parseAck(%s) = %d, %v; want an error with %q", c.ack, seq, err, c.errWant)
		}
	}
	// The error keeps its API code, which the store's callers test.
	_, err := parseAck([]byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}`))
	if !wrongLastSeq(err) {
		t.Errorf("a wrong-last-sequence ack is not recognised as one: %v", err)
	}
}

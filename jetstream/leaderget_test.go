package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/slotlease/slotlease/manager"
)

// Get must see every acknowledged write. A direct get (nats.go's kv.Get) is
// answered by any replica that takes direct gets, and one that lags
// answers "not found" for a record the leader has. Here the lagging
// replica is a mirror taking direct gets for the lease bucket's stream
// that never receives the record (its filter leaves it out): a direct get
// of the record meets it about every other time; Get never does.
func TestGetReadsTheLeaderNotAStaleReplica(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "other.p.x", []byte("seen by the mirror")); err != nil {
		t.Fatal(err)
	}
	mirror, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:         "stale_replica",
		Mirror:       &jetstream.StreamSource{Name: "KV_" + s.kv.Bucket(), FilterSubject: s.subject + "other.>"},
		MirrorDirect: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The mirror takes direct gets once it has caught up.
	for {
		_, err := mirror.GetLastMsgForSubject(ctx, s.subject+"other.p.x")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the mirror never caught up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rev, err := s.Create(ctx, "n.p.a", []byte("stored"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	staleDirect := 0
	for range 40 {
		if _, err := s.kv.Get(ctx, "n.p.a"); errors.Is(err, jetstream.ErrKeyNotFound) {
			staleDirect++
		}
		data, got, err := s.Get(ctx, "n.p.a")
		if err != nil || string(data) != "stored" || got != rev {
			t.Fatalf("Get: %q rev %d, %v; want %q rev %d", data, got, err, "stored", rev)
		}
	}
	if staleDirect == 0 {
		t.Fatal("no direct get met the stale mirror: the test proves nothing")
	}
	t.Logf("direct gets answered by the stale mirror: %d of 40", staleDirect)

	// A deleted record reads as not found, from the leader too.
	if err := s.Delete(ctx, "n.p.a", rev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "n.p.a"); !errors.Is(err, manager.ErrStoreNotFound) {
		t.Fatalf("Get of a deleted record: %v, want ErrStoreNotFound", err)
	}
	if _, _, err := s.Get(ctx, "n.p.never"); !errors.Is(err, manager.ErrStoreNotFound) {
		t.Fatalf("Get of a key never written: %v, want ErrStoreNotFound", err)
	}
}

package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
)

// forgeAdvisory makes the server publish each body on the disconnect advisory
// subject with nothing but the executor role's rights: it writes body
// into the job results bucket (an executor may) and asks JetStream for it
// by a direct get (last by subject) without headers whose reply subject is the advisory
// subject. The server answers there, in the slotlease account, where the
// manager listens. Publish permissions do not cover reply subjects.
func forgeAdvisory(t *testing.T, srv interface {
	Connect(testing.TB, config.Role, ...nats.Option) *nats.Conn
}, bodies ...[]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bucket := jobs.NamesFor(lease.DefaultPrefix).Results
	// The bucket leasemgr would have made at start.
	mjs, err := natsjs.New(srv.Connect(t, config.RoleManager))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mjs.CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: bucket}); err != nil {
		t.Fatal(err)
	}
	attacker := srv.Connect(t, config.RoleExecutor)
	js, err := natsjs.New(attacker)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range bodies {
		if _, err := kv.Put(ctx, fmt.Sprintf("forged%d", i), body); err != nil {
			t.Fatal(err)
		}
	}
	for i := range bodies { // in one burst
		get := fmt.Sprintf("$JS.API.DIRECT.GET.KV_%s.$KV.%s.forged%d", bucket, bucket, i)
		if err := attacker.PublishRequest(get, jetstream.EmbeddedDisconnectSubject, []byte(`{"no_hdr":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}
}

func advisoryFor(server string, cid uint64) []byte {
	return fmt.Appendf(nil, `{"type":"io.nats.server.advisory.v1.client_disconnect","server":{"id":%q},"client":{"id":%d}}`, server, cid)
}

// An advisory the server was made to publish by a client, naming a live
// holder's connection, frees nothing: the manager asks the connection's
// server before it believes a close. Without that check the waiter would
// be granted the live holder's slot: two holders of a one-slot pool.
func TestForgedDisconnectAdvisoryFreesNothing(t *testing.T) {
	srv, n := fastRelease(t)
	l, _, got, errc := heldAndQueued(t, srv)

	// The forged advisory does reach the manager's subject: the check
	// below is what stops it, not the server.
	spy, err := srv.Connect(t, config.RoleManager).SubscribeSync(jetstream.EmbeddedDisconnectSubject)
	if err != nil {
		t.Fatal(err)
	}
	rec := l.Record()
	forgeAdvisory(t, srv, advisoryFor(rec.ConnServer, rec.ConnID))
	if _, err := spy.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the forged advisory did not reach the advisory subject (%v): this test no longer tries the attack", err)
	}

	select {
	case w := <-got:
		t.Fatalf("a forged advisory freed a live holder's slot: the waiter was granted it too (%+v)", w.Record())
	case err := <-errc:
		t.Fatal(err)
	case <-l.Done():
		t.Fatalf("the live holder lost its lease to a forged advisory: %v", l.Err())
	case <-time.After(4 * lease.DefaultDisconnectGrace):
	}
	if q := poolStats(t, n.Manager, "p"); q.InUse != 1 || q.QueuedRequests != 1 {
		t.Fatalf("pool after the forged advisory: %+v, want 1 in use and 1 queued", q)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	awaitGrant(t, got, errc, 5*time.Second, "the released slot")
}

// A flood of forged advisories costs the manager one check per live
// holder at most, frees nothing, and does not stop a real close from
// freeing its holder's slot at once.
func TestForgedDisconnectFloodIsBounded(t *testing.T) {
	srv, n := fastRelease(t)
	l, holderNC, got, errc := heldAndQueued(t, srv)
	spy := srv.Connect(t, config.RoleManager)
	asks, err := spy.SubscribeSync("$SYS.REQ.ACCOUNT.PING.CONNZ")
	if err != nil {
		t.Fatal(err)
	}
	advisories, err := spy.SubscribeSync(jetstream.EmbeddedDisconnectSubject)
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}

	rec := l.Record()
	var bodies [][]byte
	for i := range 1000 {
		bodies = append(bodies, advisoryFor(rec.ConnServer, uint64(100000+i))) // nobody's
		if i%10 == 0 {
			bodies = append(bodies, advisoryFor(rec.ConnServer, rec.ConnID)) // the live holder's
		}
	}
	forgeAdvisory(t, srv, bodies...)
	for range bodies {
		if _, err := advisories.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("not every forged advisory reached the advisory subject: %v", err)
		}
	}
	time.Sleep(2 * lease.DefaultDisconnectGrace)
	select {
	case w := <-got:
		t.Fatalf("forged advisories freed a live holder's slot: the waiter was granted it too (%+v)", w.Record())
	case <-l.Done():
		t.Fatalf("the live holder lost its lease to forged advisories: %v", l.Err())
	default:
	}
	if q := poolStats(t, n.Manager, "p"); q.InUse != 1 || q.QueuedRequests != 1 {
		t.Fatalf("pool after the flood: %+v, want 1 in use and 1 queued", q)
	}
	// The holder's connection was asked about a few times (one check,
	// asked again while the server lists it open), nobody's never.
	if k, _, _ := asks.Pending(); k == 0 || k > 2*4 {
		t.Fatalf("%d connection checks for %d forged advisories naming 1 bound connection, want 1 to 8", k, len(bodies))
	}

	// A real close, right after the flood, still frees the slot at once.
	holderNC.Close()
	d := awaitGrant(t, got, errc, 5*time.Second, "a real close after a flood of forged advisories")
	t.Logf("the waiter was granted the closed holder's slot %v after the close", d.Round(time.Millisecond))
}

package manager_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// forgeAdvisory makes the server publish each body on subject, in role's
// account, with nothing but role's rights: it writes body into a KV bucket
// of that account (the executor may write the job results bucket) and
// asks JetStream for it by a direct get (last by subject) without headers
// whose reply subject is subject. Publish permissions do not cover reply
// subjects. It returns once the server has answered every direct get: a
// last one, on the forger's own inbox, comes after them; and when it began
// to send them, before the first advisory. Its budgets only stop a stuck
// run: a loaded machine took longer than 10 s for the thousand writes.
func forgeAdvisory(t *testing.T, srv *harness.SecureServer, role config.Role, subject string, bodies ...[]byte) (burst time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bucket := jobs.NamesFor(lease.DefaultPrefix).Results
	// The bucket leasemgr would have made at start, in the forger's account.
	admin := srv.ConnectJobsAdmin(t)
	if role == config.RoleManager {
		admin = srv.Connect(t, config.RoleManager)
	}
	ajs, err := natsjs.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: bucket}); err != nil {
		t.Fatal(err)
	}
	attacker := srv.Connect(t, role)
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
	get := func(i int) string { return fmt.Sprintf("$JS.API.DIRECT.GET.KV_%s.$KV.%s.forged%d", bucket, bucket, i) }
	burst = time.Now()
	for i := range bodies { // in one burst
		if err := attacker.PublishRequest(get(i), subject, []byte(`{"no_hdr":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := attacker.RequestWithContext(ctx, get(0), []byte(`{"no_hdr":true}`)); err != nil {
		t.Fatalf("the direct gets were not answered: %v", err)
	}
	return burst
}

// forgeAndSettle forges bodies as a manager could, then one more advisory
// naming a connection nobody holds, and waits until the manager has heard
// that last one (its advisories are handled one at a time, in order, so
// every one before it has been handled) and every close check they
// started has settled. Nothing is then left to free a slot: no free may
// be armed. It returns a span that holds every advisory's handling: from
// before the first was sent until the manager had heard the last.
func forgeAndSettle(t *testing.T, srv *harness.SecureServer, n *harness.Node, server string, bodies ...[]byte) (span time.Duration) {
	t.Helper()
	const marker = 999_999_999 // no connection's id
	burst := forgeAdvisory(t, srv, config.RoleManager, jetstream.ExecutorDisconnectSubject, append(bodies, advisoryFor(server, marker))...)
	harness.Eventually(t, 2*time.Minute, "the manager to hear the last forged advisory", func() bool { return manager.HeardClose(n.Manager, server, marker) })
	span = time.Since(burst)
	harness.Eventually(t, 2*time.Minute, "every close check to settle", func() bool {
		checking, _ := manager.CloseChecks(n.Manager)
		return checking == 0
	})
	if _, armed := manager.CloseChecks(n.Manager); armed != 0 {
		t.Fatalf("%d frees armed after forged advisories", armed)
	}
	return span
}

func advisoryFor(server string, cid uint64) []byte {
	return fmt.Appendf(nil, `{"type":"io.nats.server.advisory.v1.client_disconnect","server":{"id":%q},"client":{"id":%d}}`, server, cid)
}

// An advisory the server was made to publish by a client, naming a live
// holder's connection, frees nothing: the manager asks the connection's
// server before it believes a close. Without that check the waiter would
// be granted the live holder's slot: two holders of a one-slot pool.
func TestForgedDisconnectAdvisoryFreesNothing(t *testing.T) {
	t.Parallel()
	srv, n := fastRelease(t)
	l, _, got, errc := heldAndQueued(t, srv)
	spyNC := srv.Connect(t, config.RoleManager)
	spy, err := spyNC.SubscribeSync(jetstream.ExecutorDisconnectSubject)
	if err != nil {
		t.Fatal(err)
	}
	if err := spyNC.Flush(); err != nil {
		t.Fatal(err)
	}
	rec := l.Record()

	// An executor's forgery stays in the executors' account: the server
	// publishes it there, on a subject nobody imports.
	forgeAdvisory(t, srv, config.RoleExecutor, jetstream.ExecutorDisconnectSubject, advisoryFor(rec.ConnServer, rec.ConnID))
	if err := spyNC.Flush(); err != nil { // after anything the server sent the spy before
		t.Fatal(err)
	}
	if k, _, _ := spy.Pending(); k != 0 {
		t.Fatalf("an executor's forged advisory reached the managers' account (%d messages)", k)
	}

	// Defence in depth: an advisory published in the managers' account
	// (by a manager here; by any client of a single-account NATS) reaches
	// the manager, and the close check is what stops it.
	forgeAndSettle(t, srv, n, rec.ConnServer, advisoryFor(rec.ConnServer, rec.ConnID))
	if _, err := spy.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the forged advisory did not reach the advisory subject (%v): this test no longer tries the check", err)
	}

	select {
	case w := <-got:
		t.Fatalf("a forged advisory freed a live holder's slot: the waiter was granted it too (%+v)", w.Record())
	case err := <-errc:
		t.Fatal(err)
	case <-l.Done():
		t.Fatalf("the live holder lost its lease to a forged advisory: %v", l.Err())
	default: // the checks have settled and no free is armed: nothing more can come of it
	}
	if q := harness.PoolStats(t, n.Manager, "p"); q.InUse != 1 || q.QueuedRequests != 1 {
		t.Fatalf("pool after the forged advisory: %+v, want 1 in use and 1 queued", q)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	awaitGrant(t, got, errc, 5*time.Second, "the released slot")
}

// A flood of forged advisories (published in the managers' account, as any
// client of a single-account NATS could) costs the manager one check per
// live holder at a time at most, frees nothing, and does not stop a real
// close from freeing its holder's slot at once.
func TestForgedDisconnectFloodIsBounded(t *testing.T) {
	t.Parallel()
	srv, n := fastRelease(t)
	l, holderNC, got, errc := heldAndQueued(t, srv)
	spy := srv.Connect(t, config.RoleManager)
	asks, err := spy.SubscribeSync("$SYS.REQ.ACCOUNT.PING.CONNZ")
	if err != nil {
		t.Fatal(err)
	}
	advisories, err := spy.SubscribeSync(jetstream.ExecutorDisconnectSubject)
	if err != nil {
		t.Fatal(err)
	}
	released, err := spy.SubscribeSync(lease.EventSubject(lease.DefaultPrefix, node, "p", lease.EventReleased))
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
	span := forgeAndSettle(t, srv, n, rec.ConnServer, bodies...)
	for range len(bodies) + 1 { // and forgeAndSettle's last one
		if _, err := advisories.NextMsg(time.Minute); err != nil {
			t.Fatalf("not every forged advisory reached the advisory subject: %v", err)
		}
	}
	select {
	case w := <-got:
		t.Fatalf("forged advisories freed a live holder's slot: the waiter was granted it too (%+v)", w.Record())
	case <-l.Done():
		t.Fatalf("the live holder lost its lease to forged advisories: %v", l.Err())
	default:
	}
	if q := harness.PoolStats(t, n.Manager, "p"); q.InUse != 1 || q.QueuedRequests != 1 {
		t.Fatalf("pool after the flood: %+v, want 1 in use and 1 queued", q)
	}
	// Only the holder's connection was asked about, nobody's. Its checks
	// never overlap: one starts only once the one before has settled, and
	// a check that finds the connection open asks len(waits) times over
	// at least the sum of the waits (an unanswered one gives up later
	// still). So the checks that started while the flood was handled
	// number at most span/sum + 1. Counted over the span measured, not a
	// fixed count: a loaded machine handles the flood more slowly, and
	// more checks of the holder come one after the other.
	if err := spy.Flush(); err != nil { // the server has passed the spy every ask of the settled checks
		t.Fatal(err)
	}
	waits := manager.CloseCheckWaits()
	var least time.Duration
	for _, w := range waits {
		least += w
	}
	k, _, _ := asks.Pending()
	for range k {
		m, err := asks.NextMsg(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var ask struct {
			CID uint64 `json:"cid"`
		}
		if err := json.Unmarshal(m.Data, &ask); err != nil || ask.CID != rec.ConnID {
			t.Fatalf("a connection check %s (%v), want only the live holder's connection %d asked about", m.Data, err, rec.ConnID)
		}
	}
	most := len(waits) * (int(span/least) + 1)
	t.Logf("%d connection checks of the holder's connection for %d forged advisories handled within %v (at most %d)", k, len(bodies), span.Round(time.Millisecond), most)
	if k == 0 || k > most {
		t.Fatalf("%d connection checks for %d forged advisories naming 1 bound connection within %v, want 1 to %d", k, len(bodies), span.Round(time.Millisecond), most)
	}

	// A real close, right after the flood, still frees the slot at once:
	// by the close (released, holder_disconnected), not by the TTL, which
	// would have it expire. The wait is only a budget.
	holderNC.Close()
	d := awaitGrant(t, got, errc, time.Minute, "a real close after a flood of forged advisories")
	ev, _, err := harness.ReadEvents(released).Next(time.Minute)
	if err != nil {
		t.Fatalf("no released event for the closed holder's lease: %v", err)
	}
	if ev.LeaseID != l.ID() || ev.Code != lease.CodeHolderDisconnected {
		t.Fatalf("released event %+v, want lease %s released with %s", ev, l.ID(), lease.CodeHolderDisconnected)
	}
	t.Logf("the waiter was granted the closed holder's slot %v after the close", d.Round(time.Millisecond))
}

package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// A grant nobody heartbeats (its holder crashed, or never heard of it)
// expires with its TTL, and the next waiter gets the slots.
func TestLapsedLeaseFreesSlotsForNextWaiter(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	// The record is written after the request is sent, so it cannot expire
	// earlier than TTL after this.
	grantedAt := time.Now()
	r := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "crashed", Holder: "h", Slots: 1})
	if r.Status != lease.StatusGranted {
		t.Fatalf("acquire %+v", r)
	}
	c := harness.Client(t, srv.URL, node)
	got, errc, _ := harness.QueuedAcquire(t, c, context.Background(), "p", 1)
	l := mustGrant(t, got, errc)
	waited := time.Since(grantedAt)
	if waited < time.Second || waited > 3*time.Second {
		t.Fatalf("next waiter granted %v after the unrenewed grant, want within TTL..TTL+2s", waited)
	}
	if l.Token() <= r.Lease.Token {
		t.Fatalf("token %d not above the lapsed lease's %d", l.Token(), r.Lease.Token)
	}
	// The lapsed lease cannot be renewed back to life.
	rr := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbRenew), lease.RenewRequest{LeaseID: "crashed", Token: r.Lease.Token})
	if rr.Error == nil || rr.Error.Code != lease.CodeLeaseNotFound {
		t.Fatalf("renew of a lapsed lease: %+v", rr)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 1 {
		t.Fatalf("stats %+v", s)
	}
	_ = l.Release(context.Background())
}

// Heartbeats keep a lease alive well past its TTL.
func TestHeartbeatsKeepLeaseAlive(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node)
	l, err := c.Acquire(context.Background(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		t.Fatalf("lease lost while heartbeating: %v", l.Err())
	case <-time.After(3500 * time.Millisecond):
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 1 {
		t.Fatalf("stats %+v", s)
	}
	if _, _, err := n.Store.Get(context.Background(), lease.RecordKey(node, "p", l.ID())); err != nil {
		t.Fatalf("record after 3.5 TTLs of heartbeats: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// With its manager gone, a holder gives up at its own deadline, which comes
// before the record's expiry in the store.
func TestLeaseLostWhenManagerUnreachable(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 2*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node)
	l, err := c.Acquire(context.Background(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(4 * time.Second):
		t.Fatal("Done not closed after the deadline")
	}
	if !errors.Is(l.Err(), lease.ErrLeaseLost) {
		t.Fatalf("Err = %v", l.Err())
	}
	// The holder gave up before the store let go of the record.
	if _, _, err := n.Store.Get(context.Background(), lease.RecordKey(node, "p", l.ID())); err != nil {
		t.Fatalf("record gone before the holder's deadline: %v", err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("release of a lost lease: %v", err)
	}
}

// A manager restart keeps granted leases: they are counted, keep renewing,
// and fencing tokens keep growing.
func TestRestartKeepsLeasesAndTokensGrow(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 2 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 3}}}
	first := harness.StartManager(t, srv.URL, cfg)
	c := harness.Client(t, srv.URL, node, lease.WithRequestTimeout(500*time.Millisecond))
	ctx := context.Background()
	a, err := c.Acquire(ctx, "p", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	second := harness.StartManager(t, srv.URL, cfg)
	if s := harness.PoolStats(t, second.Manager, "p"); s.InUse != 2 {
		t.Fatalf("after restart in_use %d, want the 2 held slots", s.InUse)
	}
	// New grants respect the restored lease: 1 slot is left.
	b, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token after restart %d not above %d", b.Token(), a.Token())
	}
	_, err = c.Acquire(ctx, "p", 1, lease.WithWait(200*time.Millisecond))
	if !errors.Is(err, lease.ErrWaitExpired) {
		t.Fatalf("acquire beyond capacity after restart: %v", err)
	}
	// The old lease keeps renewing with the new manager, past its TTL.
	select {
	case <-a.Done():
		t.Fatalf("lease lost across the restart: %v", a.Err())
	case <-time.After(3 * time.Second):
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, "pool empty", func() bool { return harness.PoolStats(t, second.Manager, "p").InUse == 0 })
}

// A restart of the manager and its NATS server (same store directory): the
// fencing token still grows and the lease record is still counted.
func TestServerRestartKeepsTokensGrowing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := harness.StartServerAt(t, "127.0.0.1:-1", dir)
	cfg := manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}}
	n := harness.StartManager(t, srv.URL, cfg)
	nc := harness.Connect(t, srv.URL)
	r1 := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "a", Holder: "h", Slots: 1})
	_ = n.Manager.Close()
	srv.Shutdown()
	srv.WaitForShutdown()

	srv2 := harness.StartServerAt(t, "127.0.0.1:-1", dir)
	n2 := harness.StartManager(t, srv2.URL, cfg)
	if s := harness.PoolStats(t, n2.Manager, "p"); s.InUse != 1 {
		t.Fatalf("in_use %d after a full restart, want 1", s.InUse)
	}
	nc2 := harness.Connect(t, srv2.URL)
	r2 := harness.Request(t, nc2, lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "b", Holder: "h", Slots: 1})
	if r1.Lease == nil || r2.Lease == nil || r2.Lease.Token <= r1.Lease.Token {
		t.Fatalf("tokens across a full restart: %+v then %+v", r1.Lease, r2.Lease)
	}
	// A retry of the first acquire after the restart finds the stored grant.
	r3 := harness.Request(t, nc2, lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "a", Holder: "h", Slots: 1})
	if r3.Lease == nil || r3.Lease.Token != r1.Lease.Token {
		t.Fatalf("retry after restart: %+v, want token %d", r3, r1.Lease.Token)
	}
}

func TestEventsForEveryTransition(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, time.Second, manager.PoolConfig{Name: "p", Capacity: 2})
	nc := harness.Connect(t, srv.URL)
	sub, err := nc.SubscribeSync("lease.events.*.p.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := harness.Client(t, srv.URL, node, lease.WithHolder("watcher-test"))
	ctx := context.Background()
	a, err := c.Acquire(ctx, "p", 2) // requested, granted
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, "p", 1, lease.WithWait(100*time.Millisecond)) // requested, queued, rejected(wait_expired)
	if !errors.Is(err, lease.ErrWaitExpired) {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	_, errc, _ := harness.QueuedAcquire(t, c, cctx, "p", 1) // requested, queued
	cancel()                                                // cancelled
	<-errc
	_, _ = c.Acquire(ctx, "p", 3)          // rejected(exceeds_capacity)
	if err := a.Release(ctx); err != nil { // released
		t.Fatal(err)
	}
	// The release's delete is stored after the holder's reply.
	harness.Eventually(t, 5*time.Second, "slots back", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 0 })
	// expired: a grant nobody renews.
	raw := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "lapse", Holder: "h", Slots: 1})
	if raw.Status != lease.StatusGranted {
		t.Fatalf("%+v", raw)
	}

	type want struct {
		kind  lease.EventKind
		inUse int64
		queue int
		code  lease.Code
	}
	wants := []want{
		{lease.EventRequested, 0, 0, ""},
		{lease.EventGranted, 2, 0, ""},
		{lease.EventRequested, 2, 0, ""},
		{lease.EventQueued, 2, 1, ""},
		{lease.EventRejected, 2, 0, lease.CodeWaitExpired},
		{lease.EventRequested, 2, 0, ""},
		{lease.EventQueued, 2, 1, ""},
		{lease.EventCancelled, 2, 0, lease.CodeCancelled},
		{lease.EventRejected, 2, 0, lease.CodeExceedsCapacity},
		{lease.EventReleased, 0, 0, ""},
		{lease.EventRequested, 0, 0, ""},
		{lease.EventGranted, 1, 0, ""},
		{lease.EventExpired, 0, 0, ""},
	}
	events := harness.ReadEvents(sub)
	var got []lease.Event
	for i := range wants {
		ev, subject, err := events.Next(5 * time.Second)
		if err != nil {
			t.Fatalf("event %d of %d: %v (read: %v)", i+1, len(wants), err, got)
		}
		if want := lease.EventSubject("lease", node, "p", ev.Kind); subject != want {
			t.Fatalf("%s event on %s, want %s", ev.Kind, subject, want)
		}
		if ev.Node != node || ev.Pool != "p" || ev.Time.IsZero() || ev.Stats.Capacity != 2 {
			t.Fatalf("event %d: %+v", i, ev)
		}
		if ev.Kind == lease.EventGranted && ev.Token == 0 {
			t.Fatalf("granted event without a token: %+v", ev)
		}
		got = append(got, ev)
	}
	// In order within each kind (subject): events of several kinds sent
	// close together may come in another order across kinds.
	gotBy := harness.PerKind(got, func(ev lease.Event) lease.EventKind { return ev.Kind })
	for kind, ws := range harness.PerKind(wants, func(w want) lease.EventKind { return w.kind }) {
		gs := gotBy[kind]
		if len(gs) != len(ws) {
			t.Fatalf("%d %s events, want %d (read: %v)", len(gs), kind, len(ws), got)
		}
		for i, w := range ws {
			if ev := gs[i]; ev.Stats.InUse != w.inUse || ev.Stats.QueuedRequests != w.queue || ev.Code != w.code {
				t.Fatalf("%s event %d: in_use=%d queued=%d code=%q, want %+v", kind, i+1, ev.Stats.InUse, ev.Stats.QueuedRequests, ev.Code, w)
			}
		}
	}
}

// A queued grant for a request id the client made itself is younger than the
// acquire's first send, so the holder trusts a deadline measured from that
// send without a confirming renewal; a caller's own request id may carry an
// older grant, so that holder confirms first. Either way the holder's
// deadline comes before the record's expiry.
func TestQueuedGrantConfirmsOnlyCallersRequestIDs(t *testing.T) {
	t.Parallel()
	// Long enough that neither a heartbeat (every TTL/3) nor the client's
	// own "late grant" rule (TTL/3 after the first send) can renew within
	// the test, even on a loaded machine.
	const ttl = 30 * time.Second
	srv, _ := startNode(t, ttl, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node)
	nc := harness.Connect(t, srv.URL)
	// The client's renewals and releases, in the order it sent them.
	sent := make(chan string, 16)
	sub, err := nc.Subscribe(lease.Subject("lease", node, "p", "*"), func(msg *nats.Msg) {
		var r lease.RenewRequest // a release names its lease the same way
		if strings.HasSuffix(msg.Subject, "."+lease.VerbRenew) || strings.HasSuffix(msg.Subject, "."+lease.VerbRelease) {
			if json.Unmarshal(msg.Data, &r) == nil {
				sent <- msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:] + " " + r.LeaseID
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// renewsBeforeRelease counts the renewals of id the client sent
	// before its release of id.
	renewsBeforeRelease := func(t *testing.T, id string) int {
		n := 0
		for {
			select {
			case got := <-sent:
				switch got {
				case lease.VerbRenew + " " + id:
					n++
				case lease.VerbRelease + " " + id:
					return n
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no release of %s seen", id)
			}
		}
	}
	for _, tc := range []struct {
		name     string
		opts     []lease.AcquireOption
		confirms int
	}{
		{"generated id", nil, 0},
		{"caller's id", []lease.AcquireOption{lease.WithRequestID("callers-own")}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holder, err := c.Acquire(context.Background(), "p", 1)
			if err != nil {
				t.Fatal(err)
			}
			got, errc, _ := harness.QueuedAcquire(t, c, context.Background(), "p", 1, tc.opts...)
			queuedBy := time.Now() // after the first send, before the grant
			if err := holder.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			l := mustGrant(t, got, errc)
			record, deadline := l.Record(), l.Deadline()
			// The release, sent right after the grant, comes after any
			// renewal the client sent for it.
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := renewsBeforeRelease(t, l.ID()); n != tc.confirms {
				t.Fatalf("%d renewals right after the grant, want %d", n, tc.confirms)
			}
			if !deadline.Before(record.ExpiresAt) {
				t.Fatalf("holder deadline %v not before the record's expiry %v", deadline, record.ExpiresAt)
			}
			if tc.confirms == 0 && deadline.After(queuedBy.Add(ttl-ttl/10)) {
				t.Fatalf("deadline %v not measured from the first send (before %v)", deadline, queuedBy.Add(ttl-ttl/10))
			}
		})
	}
}

// renewFault fails one Renew after armed is set, the first after skip
// others, as a store failing over does: the manager answers that renewal
// "unavailable". With slow set it delays every Renew after the first skip
// by slow instead, as a store under load does.
type renewFault struct {
	manager.Store
	skip       int64
	slow       time.Duration
	armed, hit atomic.Bool
	renews     atomic.Int64 // Renew calls once armed, those hit too
}

func (f *renewFault) Renew(ctx context.Context, key string, value []byte, ttl time.Duration, rev uint64) (uint64, error) {
	if f.armed.Load() && f.renews.Add(1) > f.skip {
		switch {
		case f.slow > 0:
			f.hit.Store(true)
			time.Sleep(f.slow)
		case f.hit.CompareAndSwap(false, true):
			return 0, errors.New("the store is failing over")
		}
	}
	return f.Store.Renew(ctx, key, value, ttl, rev)
}

// acquireMine acquires again, with c, the one slot of pool p granted
// earlier to request "mine" with secret "s3cret", within 10 s.
func acquireMine(t *testing.T, c *lease.Client) *lease.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "p", 1, lease.WithRequestID("mine"), lease.WithSecret("s3cret"))
	if err != nil {
		t.Fatalf("acquire with the granted request's id: %v", err)
	}
	return l
}

// A caller's request id answered from an earlier grant is confirmed by a
// renewal before the holder relies on it. That renewal answered
// "unavailable" (a store failing over; a manager stopping for a restart
// answers the same) is asked again, as the heartbeat would ask: Acquire
// returns the stored lease instead of failing. It used to fail with
// "confirming the grant: unavailable" (TestRateAcrossARestart, under
// load, met a manager's clean stop there).
func TestGrantConfirmationOutlivesAnUnavailableAnswer(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	store := &renewFault{}
	harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}},
		func(s manager.Store) manager.Store { store.Store = s; return store })
	nc := harness.Connect(t, srv.URL)
	req := lease.AcquireRequest{RequestID: "mine", Holder: "h", Slots: 1, Secret: "s3cret"}
	first := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbAcquire), req)
	if first.Status != lease.StatusGranted || first.Lease == nil {
		t.Fatalf("first acquire: %+v", first)
	}
	store.armed.Store(true)
	l := acquireMine(t, harness.Client(t, srv.URL, node, lease.WithHolder("h")))
	defer l.Release(context.Background())
	if l.Token() != first.Lease.Token {
		t.Fatalf("token %d, want the earlier grant's %d", l.Token(), first.Lease.Token)
	}
	if n := store.renews.Load(); n < 2 {
		t.Fatalf("%d renewals reached the store: the refused confirmation was not asked again", n)
	}
}

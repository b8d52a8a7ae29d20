package manager_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// stopEvents subscribes to pool p's stop_requested and superseded events.
func stopEvents(t *testing.T, nc *nats.Conn, pool string) (stops, superseded *harness.EventReader) {
	t.Helper()
	sub := func(kind lease.EventKind) *harness.EventReader {
		s, err := nc.SubscribeSync(lease.EventFilter(lease.DefaultPrefix, node, pool, kind))
		if err != nil {
			t.Fatal(err)
		}
		return harness.ReadEvents(s)
	}
	stops, superseded = sub(lease.EventStopRequested), sub(lease.EventSuperseded)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return stops, superseded
}

// nextEvent returns the next event of r, failing the test after a minute.
func nextEvent(t *testing.T, r *harness.EventReader) lease.Event {
	t.Helper()
	ev, _, err := r.Next(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// mustErr waits for an acquire's error.
func mustErr(t *testing.T, got <-chan *lease.Lease, errc <-chan error) error {
	t.Helper()
	select {
	case l := <-got:
		t.Fatalf("granted %s, want an error", l.ID())
	case err := <-errc:
		return err
	case <-time.After(time.Minute):
		t.Fatal("no answer")
	}
	return nil
}

// A cancel_pending request replaces its group's queued requests, which
// end superseded naming the group and the newer request; the group's
// holder runs on, and other groups and tenants are untouched.
func TestGroupCancelPendingReplacesQueued(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 3*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	c := harness.Client(t, srv.URL, node)
	stops, superseded := stopEvents(t, harness.Connect(t, srv.URL), "p")
	ctx := context.Background()
	h, err := c.Acquire(ctx, "p", 1, lease.WithGroup("g"))
	if err != nil {
		t.Fatal(err)
	}
	if h.Record().Group != "g" {
		t.Fatalf("record %+v, want group g", h.Record())
	}
	oldGot, oldErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithGroup("g"), lease.WithRequestID("old"))
	otherGot, otherErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithGroup("g"), lease.WithTenant("b"))
	newGot, newErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithGroup("g"), lease.CancelPending(), lease.WithRequestID("new"))

	err = mustErr(t, oldGot, oldErr)
	if !errors.Is(err, lease.ErrSuperseded) || !strings.Contains(err.Error(), `group "g"`) || !strings.Contains(err.Error(), `request "new"`) {
		t.Fatalf("replaced request: %v, want superseded naming group g and request new", err)
	}
	if ev := nextEvent(t, superseded); ev.RequestID != "old" || ev.Group != "g" || ev.Code != lease.CodeSuperseded {
		t.Fatalf("superseded event %+v", ev)
	}
	if q := harness.PoolStats(t, n.Manager, "p").QueuedRequests; q != 2 {
		t.Fatalf("%d queued, want 2 (tenant b's and the new one)", q)
	}
	// The holder runs on: it is asked nothing, and keeps its slot.
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h.StopErr() != nil {
		t.Fatalf("holder asked to stop by cancel_pending: %v", h.StopErr())
	}
	other := mustGrant(t, otherGot, otherErr) // FIFO: tenant b's was first
	_ = other.Release(ctx)
	l := mustGrant(t, newGot, newErr)
	_ = l.Release(ctx)
	if ev, _, err := stops.Next(100 * time.Millisecond); err == nil {
		t.Fatalf("stop_requested event with cancel_pending: %+v", ev)
	}
}

// A cancel_in_progress request replaces its group's queued requests and
// asks the group's holders to stop, told at once (the event makes the
// holder renew, long before its TTL/3); a holder of another tenant's group
// of the same name is not asked; the new request is granted once the
// holder released.
func TestGroupCancelInProgressAsksHoldersToStop(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 60*time.Second, manager.PoolConfig{Name: "p", Capacity: 2})
	c := harness.Client(t, srv.URL, node)
	stops, _ := stopEvents(t, harness.Connect(t, srv.URL), "p")
	ctx := context.Background()
	h, err := c.Acquire(ctx, "p", 1, lease.WithGroup("g"), lease.WithTenant("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "p", 1, lease.WithGroup("g"), lease.WithTenant("b"))
	if err != nil {
		t.Fatal(err)
	}
	oldGot, oldErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithGroup("g"), lease.WithTenant("a"))
	asked := time.Now()
	newGot, newErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithGroup("g"), lease.WithTenant("a"), lease.CancelInProgress(), lease.WithRequestID("newest"))
	if err := mustErr(t, oldGot, oldErr); !errors.Is(err, lease.ErrSuperseded) {
		t.Fatalf("queued request of the group: %v, want superseded", err)
	}
	select {
	case <-h.StopRequested():
	case <-time.After(15 * time.Second): // its next renewal is 20s away
		t.Fatal("the holder was not told to stop")
	}
	t.Logf("holder told to stop %v after the request", time.Since(asked).Round(time.Millisecond))
	if err := h.StopErr(); !errors.Is(err, lease.ErrStopRequested) || !strings.Contains(err.Error(), `"newest"`) || !strings.Contains(err.Error(), `"g"`) {
		t.Fatalf("StopErr %v", err)
	}
	if ev := nextEvent(t, stops); ev.LeaseID != h.ID() || ev.Group != "g" || ev.RequestID != "newest" || ev.Tenant != "a" {
		t.Fatalf("stop_requested event %+v", ev)
	}
	// Asked, the holder still holds: its record is never deleted to make
	// room, and the new request waits for the slot.
	if s := harness.PoolStats(t, n.Manager, "p"); s.InUse != 2 || s.QueuedRequests != 1 {
		t.Fatalf("stats after the stop request: %+v", s)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := mustGrant(t, newGot, newErr)
	defer l.Release(ctx)
	// The events of one request go out together: tenant b's holder got none.
	if ev, _, err := stops.Next(500 * time.Millisecond); err == nil {
		t.Fatalf("another stop_requested event: %+v", ev)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if b.StopErr() != nil {
		t.Fatalf("tenant b's holder was asked to stop: %v", b.StopErr())
	}
}

// A holder that ignores the stop request is refused renewals once
// GroupStopBound has passed: it loses the lease at its own deadline, and
// its slot goes to the new request only after that (the record expired):
// never two holders at once.
func TestGroupStopBoundRefusesRenewals(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 3 * time.Second, GroupStopBound: time.Second,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	h, err := c.Acquire(ctx, "p", 1, lease.WithGroup("g"))
	if err != nil {
		t.Fatal(err)
	}
	newGot, newErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithGroup("g"), lease.CancelInProgress())
	<-h.StopRequested()
	select {
	case <-h.Done():
	case l := <-newGot:
		t.Fatalf("new request granted %s while the old holder still held", l.ID())
	case <-time.After(time.Minute):
		t.Fatal("the holder that ignored the stop request kept its lease")
	}
	if !errors.Is(h.Err(), lease.ErrLeaseLost) || !errors.Is(h.Err(), lease.ErrSuperseded) {
		t.Fatalf("holder's loss: %v, want lost, superseded", h.Err())
	}
	l := mustGrant(t, newGot, newErr)
	_ = l.Release(ctx)
}

// A group belongs to the credential that acquired: a request of another
// credential naming the same pool, tenant and group stops and replaces
// nothing.
func TestGroupIsScopedToTheCredential(t *testing.T) {
	t.Parallel()
	srv := harness.StartSecureServer(t)
	harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), manager.Config{Node: node, TTL: 60 * time.Second,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	stops, superseded := stopEvents(t, srv.Connect(t, config.RoleManager), "p")
	client := func(nc *nats.Conn) *lease.Client {
		c, err := lease.NewClient(nc, node)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	victim, attacker := client(srv.Connect(t, config.RoleExecutor)), client(srv.ConnectJobsAdmin(t))
	ctx := context.Background()
	h, err := victim.Acquire(ctx, "p", 1, lease.WithGroup("g"), lease.WithTenant("a"))
	if err != nil {
		t.Fatal(err)
	}
	if h.Record().GroupOwner == "" {
		t.Fatalf("record %+v: no group owner from a vouched credential", h.Record())
	}
	qGot, qErr, _ := harness.QueuedAcquire(t, victim, ctx, "p", 1, lease.WithGroup("g"), lease.WithTenant("a"))
	aGot, aErr, _ := harness.QueuedAcquire(t, attacker, ctx, "p", 1, lease.WithGroup("g"), lease.WithTenant("a"), lease.CancelInProgress())
	// The same request from the victim's own credential: its events come
	// after any the attacker's caused.
	vGot, vErr, _ := harness.QueuedAcquire(t, victim, ctx, "p", 1, lease.WithGroup("g"), lease.WithTenant("a"), lease.CancelInProgress())
	if ev := nextEvent(t, superseded); ev.RequestID == "" || ev.Group != "g" {
		t.Fatalf("superseded event %+v", ev)
	}
	if err := mustErr(t, qGot, qErr); !errors.Is(err, lease.ErrSuperseded) {
		t.Fatalf("victim's queued request: %v", err)
	}
	if ev := nextEvent(t, stops); ev.LeaseID != h.ID() {
		t.Fatalf("stop event %+v", ev)
	}
	<-h.StopRequested()
	if err := h.StopErr(); err == nil || strings.Contains(err.Error(), "attacker") {
		t.Fatalf("StopErr %v", err)
	}
	if ev, _, err := superseded.Next(100 * time.Millisecond); err == nil {
		t.Fatalf("another superseded event: %+v", ev)
	}
	_ = h.Release(ctx)
	// The attacker's request queued first and is still waiting: it was
	// replaced by nobody and replaced nobody.
	a := mustGrant(t, aGot, aErr)
	_ = a.Release(ctx)
	v := mustGrant(t, vGot, vErr)
	_ = v.Release(ctx)
	// A lease without a group names no owner (records stay as they were).
	plain, err := victim.Acquire(ctx, "p", 1)
	if err != nil || plain.Record().GroupOwner != "" || plain.Record().Group != "" {
		t.Fatalf("a lease without a group: %v, %+v", err, plain.Record())
	}
	_ = plain.Release(ctx)
}

// Bad group fields are refused, each naming what is wrong.
func TestGroupFieldsAreValidated(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 3*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	subject := lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbAcquire)
	for _, tc := range []struct{ body, want string }{
		{`{"request_id":"a","holder":"h","slots":1,"on_group":"cancel_pending"}`, `on_group "cancel_pending" needs a group`},
		{`{"request_id":"a","holder":"h","slots":1,"group":"g","on_group":"newest"}`, `on_group must be "cancel_in_progress" or "cancel_pending", got "newest"`},
		{`{"request_id":"a","holder":"h","slots":1,"group":"` + strings.Repeat("x", lease.MaxGroupLen+1) + `"}`, "group"},
		{`{"request_id":"a","holder":"h","slots":1,"group":7}`, "group"},
	} {
		r := harness.Request(t, nc, subject, tc.body)
		if r.Status != lease.StatusError || r.Error.Code != lease.CodeBadRequest || !strings.Contains(r.Error.Message, tc.want) {
			t.Errorf("%s: %+v, want bad_request naming %q", tc.body, r.Error, tc.want)
		}
	}
	c := harness.Client(t, srv.URL, node)
	if _, err := c.Acquire(context.Background(), "p", 1, lease.CancelInProgress()); !errors.Is(err, lease.ErrBadRequest) {
		t.Fatalf("CancelInProgress without a group: %v", err)
	}
}

// A stop request lives in the manager's memory: a restarted manager asks
// again for the restored queued request with cancel_in_progress, and its
// renewals answer with the stop notice.
func TestGroupStopIsAskedAgainAfterARestart(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 60 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}}
	first := harness.StartManager(t, srv.URL, cfg)
	stops, _ := stopEvents(t, harness.Connect(t, srv.URL), "p")
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	h, err := c.Acquire(ctx, "p", 1, lease.WithGroup("g"))
	if err != nil {
		t.Fatal(err)
	}
	newGot, newErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithGroup("g"), lease.CancelInProgress(), lease.WithRequestID("newest"))
	if ev := nextEvent(t, stops); ev.LeaseID != h.ID() {
		t.Fatalf("stop event %+v", ev)
	}
	harness.Eventually(t, 10*time.Second, "the queue entry stored", func() bool { return storedQueueEntries(t, first) == 1 })
	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	harness.StartManager(t, srv.URL, cfg)
	if ev := nextEvent(t, stops); ev.LeaseID != h.ID() || ev.RequestID != "newest" {
		t.Fatalf("stop event after the restart %+v", ev)
	}
	rec := h.Record()
	r := harness.Request(t, harness.Connect(t, srv.URL), lease.Subject(lease.DefaultPrefix, node, "p", lease.VerbRenew),
		lease.RenewRequest{LeaseID: rec.ID, Token: rec.Token, Secret: rec.Secret})
	if r.Status != lease.StatusRenewed || r.Stop == nil || r.Stop.By != "newest" || r.Stop.Group != "g" {
		t.Fatalf("renewal after the restart: %+v (stop %+v)", r, r.Stop)
	}
	_ = h.Release(ctx)
	l := mustGrant(t, newGot, newErr)
	_ = l.Release(ctx)
}

package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/harness"
)

// fastRelease is a secure server with a manager that has fast release on,
// a 15s TTL (the default) and one pool of one slot.
func fastRelease(t *testing.T) (*harness.SecureServer, *harness.Node) {
	t.Helper()
	return fastReleaseTTL(t, 15*time.Second)
}

// fastReleaseTTL is fastRelease with another TTL.
func fastReleaseTTL(t *testing.T, ttl time.Duration) (*harness.SecureServer, *harness.Node) {
	t.Helper()
	srv := harness.StartSecureServer(t)
	cfg := manager.Config{Node: node, TTL: ttl, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}},
		DisconnectEvents: jetstream.ExecutorDisconnectSubject}
	return srv, harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), cfg)
}

// proxiedClient is executorClient through p: its connection can be reset,
// refused or stalled as a network can.
func proxiedClient(t *testing.T, srv *harness.SecureServer, p *harness.Proxy, opts ...nats.Option) (*lease.Client, *nats.Conn) {
	t.Helper()
	nc := harness.ConnectAuth(t, p.URL(), natsconn.Auth{NKeySeed: config.AuthFile(srv.AuthDir, config.RoleExecutor),
		InboxPrefix: config.RoleExecutor.InboxPrefix()}, opts...)
	c, err := lease.NewClient(nc, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, nc
}

func executorClient(t *testing.T, srv *harness.SecureServer, opts ...nats.Option) (*lease.Client, *nats.Conn) {
	t.Helper()
	nc := srv.Connect(t, config.RoleExecutor, opts...)
	c, err := lease.NewClient(nc, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, nc
}

// heldAndQueued is pool p's slot held by one executor client and a second
// one queued for it.
func heldAndQueued(t *testing.T, srv *harness.SecureServer) (l *lease.Lease, holderNC *nats.Conn, got <-chan *lease.Lease, errc <-chan error) {
	t.Helper()
	holder, holderNC := executorClient(t, srv)
	l, err := holder.Acquire(t.Context(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := executorClient(t, srv)
	got, errc, _ = harness.QueuedAcquire(t, waiter, t.Context(), "p", 1)
	return l, holderNC, got, errc
}

// awaitGrant waits up to within for the queued acquire's lease, releases
// it, and returns how long it took.
func awaitGrant(t *testing.T, got <-chan *lease.Lease, errc <-chan error, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case w := <-got:
		_ = w.Release(t.Context())
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(within):
		t.Fatalf("%s: not granted within %v", what, within)
	}
	return time.Since(start)
}

// A holder whose connection closes (its process died: the kernel closes
// the socket) gives its slot to the next waiter a grace after, not a TTL.
// Closed by its own client while it lives, the holder has given the lease
// up by then.
func TestFastReleaseFreesAClosedHoldersSlots(t *testing.T) {
	t.Parallel()
	srv, _ := fastRelease(t)
	l, holderNC, got, errc := heldAndQueued(t, srv)
	if l.FastRelease() != lease.DefaultDisconnectGrace {
		t.Fatalf("lease granted with fast release %v, want %v", l.FastRelease(), lease.DefaultDisconnectGrace)
	}
	if rec := l.Record(); rec.ConnServer != holderNC.ConnectedServerId() {
		t.Fatalf("lease bound to %q, want the holder's server %q", rec.ConnServer, holderNC.ConnectedServerId())
	}
	holderNC.Close()
	closed := time.Now()
	select {
	case w := <-got:
		d := time.Since(closed)
		select {
		case <-l.Done():
		default:
			t.Fatalf("the waiter was granted %v after the close while the holder still relied on its lease", d)
		}
		if !errors.Is(l.Err(), lease.ErrConnectionDropped) {
			t.Fatalf("the holder's lease ended with %v, want %v", l.Err(), lease.ErrConnectionDropped)
		}
		t.Logf("closed holder's slot granted to the waiter after %v (TTL 15s, grace %v)", d.Round(time.Millisecond), lease.DefaultDisconnectGrace)
		_ = w.Release(t.Context())
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(7 * time.Second):
		t.Fatal("the slot of a closed holder was not granted within half the TTL")
	}
}

// A queued request whose connection closes leaves the queue: the one
// behind it is granted as soon as the slot is free.
func TestFastReleaseDropsAClosedQueuedRequest(t *testing.T) {
	t.Parallel()
	srv, n := fastRelease(t)
	ctx := t.Context()
	holder, _ := executorClient(t, srv)
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	gone, goneNC := executorClient(t, srv)
	_, goneErr, _ := harness.QueuedAcquire(t, gone, ctx, "p", 1)
	next, _ := executorClient(t, srv)
	got, errc, pos := harness.QueuedAcquire(t, next, ctx, "p", 1)
	if pos != 2 {
		t.Fatalf("queued at %d, want 2", pos)
	}
	goneNC.Close()
	harness.Eventually(t, 5*time.Second, "the closed requester's request leaves the queue", func() bool {
		return harness.PoolStats(t, n.Manager, "p").QueuedRequests == 1
	})
	select {
	case err := <-goneErr:
		t.Fatalf("the closed requester heard %v on a closed connection", err)
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-got:
		_ = w.Release(ctx)
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("the request behind a dropped one was not granted")
	}
}

// A holder whose connection is reset while its process lives (the server
// sees a close at the holder's end, as for a dead process) reconnects and
// moves its lease to the new connection before the grace ends: it keeps
// the lease, and nobody else is granted the slot. A grace of 3 s: the
// default's 0.6 s to move (3/4 of 0.8 s) is a deadline a loaded machine
// missed, and the rule is the same at any grace.
func TestFastReleaseReconnectKeepsTheLease(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	srv := harness.StartSecureServer(t)
	n := harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), manager.Config{Node: node, TTL: 15 * time.Second,
		Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}, DisconnectEvents: jetstream.ExecutorDisconnectSubject, DisconnectGrace: grace})
	ctx := t.Context()
	p := harness.StartProxy(t, srv.Server.Addr().String())
	holder, holderNC := proxiedClient(t, srv, p, nats.ReconnectWait(10*time.Millisecond))
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := executorClient(t, srv)
	got, errc, _ := harness.QueuedAcquire(t, waiter, ctx, "p", 1)
	for range 3 {
		before, err := holderNC.GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		p.Reset()
		harness.Eventually(t, 5*time.Second, "the lease moves to the new connection", func() bool {
			for _, rec := range n.Manager.Leases() {
				if rec.ID == l.ID() {
					return rec.ConnID != before && rec.ConnID != 0
				}
			}
			return false
		})
	}
	select {
	case <-l.Done():
		t.Fatalf("lease lost over reconnects: %v", l.Err())
	case w := <-got:
		t.Fatalf("the waiter was granted the slot of a live holder: %+v", w.Record())
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(2 * grace):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A holder whose connection is reset while it lives and that cannot
// reconnect (a middlebox reset it, then the path failed) stops relying on
// its lease before the manager gives the slot to the next waiter: never two
// holders.
func TestFastReleaseCutOffHolderStopsFirst(t *testing.T) {
	t.Parallel()
	srv, _ := fastRelease(t)
	ctx := t.Context()
	p := harness.StartProxy(t, srv.Server.Addr().String())
	holder, _ := proxiedClient(t, srv, p)
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := executorClient(t, srv)
	got, errc, _ := harness.QueuedAcquire(t, waiter, ctx, "p", 1)
	p.Refuse()
	p.Reset()
	var lost time.Time
	select {
	case <-l.Done():
		lost = time.Now()
		if !errors.Is(l.Err(), lease.ErrConnectionDropped) {
			t.Fatalf("Done closed with %v, want %v", l.Err(), lease.ErrConnectionDropped)
		}
	case <-got:
		t.Fatal("the waiter was granted before the cut-off holder gave up its lease")
	case <-time.After(5 * time.Second):
		t.Fatal("the cut-off holder's lease did not end")
	}
	select {
	case w := <-got:
		margin := time.Since(lost)
		t.Logf("holder gave up %v before the waiter's grant", margin.Round(time.Millisecond))
		_ = w.Release(ctx)
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted the cut-off holder's slot")
	}
	_ = l.Release(context.Background())
}

// leaseEnd waits on sub (the pool's events) for the event that ended lease
// id, and returns it.
func leaseEnd(t *testing.T, sub *nats.Subscription, id string, within time.Duration) lease.Event {
	t.Helper()
	deadline := time.Now().Add(within)
	events := harness.ReadEvents(sub)
	for {
		ev, _, err := events.Next(time.Until(deadline))
		if err != nil {
			t.Fatalf("no event ended lease %s within %v: %v", id, within, err)
		}
		if ev.LeaseID == id && (ev.Kind == lease.EventReleased || ev.Kind == lease.EventExpired) {
			return ev
		}
	}
}

// A connection its server closes (kicked here; a server stopping, or one
// that found the client stale or slow, likewise) says nothing about the
// holder, which may be working and about to reconnect: nothing is freed
// early. The lease ends by its TTL; the holder that could not reconnect
// gave it up before.
func TestServerClosedConnectionFreesNothing(t *testing.T) {
	t.Parallel()
	srv, n := fastReleaseTTL(t, 2*time.Second)
	ctx := t.Context()
	events, err := n.Conn.SubscribeSync(lease.EventFilter(lease.DefaultPrefix, node, "p", ""))
	if err != nil {
		t.Fatal(err)
	}
	holder, holderNC := executorClient(t, srv, nats.NoReconnect())
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	cid, err := holderNC.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	ev := leaseEnd(t, events, l.ID(), 10*time.Second)
	if ev.Kind != lease.EventExpired {
		t.Fatalf("the kicked holder's lease ended by %q (code %q), want by its TTL (%q)", ev.Kind, ev.Code, lease.EventExpired)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the record expired while the kicked holder, unable to reconnect, still relied on it")
	}
}

// A stalled connection (the server or the path holds every byte, the
// connection stays open) costs no lease: nobody can free it meanwhile, so
// the holder keeps working through a stall far longer than the grace.
// Under the old rule (lost 3/4 of the grace after the last answer) it was
// lost.
func TestStalledConnectionKeepsTheLease(t *testing.T) {
	t.Parallel()
	srv, _ := fastRelease(t)
	ctx := t.Context()
	p := harness.StartProxy(t, srv.Server.Addr().String())
	holder, _ := proxiedClient(t, srv, p)
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	p.Stall()
	stall := 3 * lease.DefaultDisconnectGrace
	time.Sleep(stall) // the fault's length, not a wait for something to happen
	if err := l.Err(); err != nil {
		t.Fatalf("a %v stall cost the lease: %v", stall, err)
	}
	p.Resume()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after the stall: %v", err)
	}
}

// A connection that drops while a renewal waits for an answer (the
// manager is stalled) ends the lease by the dropped clock, not when the
// renewal gives up at the TTL deadline: Done must close while the slot
// could still be freed a grace after the drop.
func TestDropDuringARenewalEndsTheLeaseInTime(t *testing.T) {
	t.Parallel()
	srv := harness.StartSecureServer(t)
	pm := harness.StartProxy(t, srv.Server.Addr().String())
	mnc := harness.ConnectAuth(t, pm.URL(), natsconn.Auth{NKeySeed: config.AuthFile(srv.AuthDir, config.RoleManager),
		InboxPrefix: config.RoleManager.InboxPrefix()})
	cfg := manager.Config{Node: node, TTL: 3 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}},
		DisconnectEvents: jetstream.ExecutorDisconnectSubject}
	harness.StartManagerConn(t, mnc, cfg)
	ph := harness.StartProxy(t, srv.Server.Addr().String())
	holder, _ := proxiedClient(t, srv, ph)
	l, err := holder.Acquire(t.Context(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	pm.Stall() // renewals go unanswered from now on
	// The first renewal goes out TTL/3 after the grant; let it wait.
	time.Sleep(l.TTL()/3 + 300*time.Millisecond)
	ttlDeadline := l.Deadline() // the connection lives: the TTL's
	ph.Refuse()
	ph.Reset()
	select {
	case <-l.Done():
		if lost := time.Now(); !lost.Before(ttlDeadline) || !errors.Is(l.Err(), lease.ErrConnectionDropped) {
			t.Fatalf("lease ended at its TTL deadline %v (now %v) with %v; want it ended by the dropped clock", ttlDeadline, lost, l.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lease did not end")
	}
	pm.Resume()
}

// grantedElsewhere starts a secure server with fast release and a manager
// whose store f wraps, has pool p's one slot granted to a raw request bound
// to one executor connection (first), and returns a Client on a second
// executor connection (nc) with the same holder, to acquire it again with
// the request's id and secret: a lease granted on a connection its holder
// is no longer on, as after a reconnect between a request and its grant.
func grantedElsewhere(t *testing.T, f *renewFault) (first, nc *nats.Conn, c *lease.Client) {
	t.Helper()
	srv := harness.StartSecureServer(t)
	cfg := manager.Config{Node: node, TTL: 15 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}},
		DisconnectEvents: jetstream.ExecutorDisconnectSubject}
	harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), cfg, func(s manager.Store) manager.Store { f.Store = s; return f })
	first = srv.Connect(t, config.RoleExecutor)
	cid, err := first.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	req := lease.AcquireRequest{RequestID: "mine", Holder: "h", Slots: 1, Secret: "s3cret", ConnServer: first.ConnectedServerId(), ConnID: cid}
	granted := harness.Request(t, first, lease.Subject("lease", node, "p", lease.VerbAcquire), req)
	if granted.Status != lease.StatusGranted || granted.Lease == nil || granted.Lease.ConnID != cid {
		t.Fatalf("first acquire: %+v", granted)
	}
	nc = srv.Connect(t, config.RoleExecutor)
	c, err = lease.NewClient(nc, node, lease.WithHolder("h"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return first, nc, c
}

// acquireMoved acquires grantedElsewhere's lease with c and checks it was
// moved to c's connection: closing first does not end it.
func acquireMoved(t *testing.T, first *nats.Conn, c *lease.Client, f *renewFault) {
	t.Helper()
	l := acquireMine(t, c)
	defer l.Release(context.Background())
	if !f.hit.Load() {
		t.Fatalf("%d renewals reached the store, none hit: the test did not reach the move", f.renews.Load())
	}
	first.Close()
	select {
	case <-l.Done():
		t.Fatalf("the lease ended when its first connection closed: %v", l.Err())
	case <-time.After(lease.DefaultDisconnectGrace + 2*time.Second):
	}
}

// The lease is moved to its holder's connection by a renewal before
// Acquire returns (the first renewal confirms the grant, the second moves
// it). That renewal answered "unavailable" (a store failing over, a
// manager stopping for a restart) is asked again, as the heartbeat would:
// Acquire returns the lease, bound to its holder's connection. It used to
// fail with "the connection to the NATS server could not be confirmed".
func TestFastReleaseBindingOutlivesAnUnavailableAnswer(t *testing.T) {
	t.Parallel()
	f := &renewFault{skip: 1}
	first, _, c := grantedElsewhere(t, f)
	f.armed.Store(true)
	acquireMoved(t, first, c, f)
	if n := f.renews.Load(); n < 3 {
		t.Fatalf("%d renewals reached the store: the refused move was not asked again", n)
	}
}

// The move's answer comes later than an eighth of the grace (every
// renewal after the confirming one takes a third of the grace to store,
// as on a store under load). The lease's clocks, still those of the
// connection it was granted on, which this client never pinged, had
// passed long before; the holder does not rely on the lease yet, so they
// do not cut the move short. Each attempt used to end at the first eighth
// of the grace, and the Acquire failed.
func TestFastReleaseBindingWaitsForASlowAnswer(t *testing.T) {
	t.Parallel()
	f := &renewFault{skip: 1, slow: lease.DefaultDisconnectGrace / 3}
	first, _, c := grantedElsewhere(t, f)
	f.armed.Store(true)
	acquireMoved(t, first, c, f)
}

// The lease is granted on a connection its holder is no longer on, and
// the connection the holder is on now is one whose server said it is in
// lame duck mode (a reconnect during a rolling restart; the notice is
// given as a program's own lame duck handler gives it). The move's
// renewal says lame_duck, and the manager unbinds the lease instead of
// binding it there: the lease rides its TTL alone, and Acquire returns
// it. It used to take the unbound lease for one whose connection was not
// confirmed, move it twice more and fail with "the connection to the NATS
// server could not be confirmed".
func TestFastReleaseMoveToALameDucksConnectionUnbinds(t *testing.T) {
	t.Parallel()
	f := &renewFault{}
	first, nc, c := grantedElsewhere(t, f)
	lease.LameDuckNotice(nc)
	l := acquireMine(t, c)
	defer l.Release(context.Background())
	data, _, err := f.Get(t.Context(), lease.RecordKey(node, "p", l.ID()))
	if err != nil {
		t.Fatal(err)
	}
	var rec lease.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.ConnServer != "" || rec.ConnID != 0 {
		t.Fatalf("the lease is stored bound to %s/%d, want unbound", rec.ConnServer, rec.ConnID)
	}
	first.Close() // the connection it was granted on: it frees nothing now
	select {
	case <-l.Done():
		t.Fatalf("the lease ended: %v", l.Err())
	case <-time.After(lease.DefaultDisconnectGrace + 2*time.Second):
	}
}

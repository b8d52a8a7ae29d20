package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// fastRelease is a secure server with a manager that has fast release on,
// a 15s TTL (the default) and one pool of one slot.
func fastRelease(t *testing.T) (*harness.SecureServer, *harness.Node) {
	t.Helper()
	srv := harness.StartSecureServer(t)
	cfg := lease.ManagerConfig{Node: node, TTL: 15 * time.Second, Pools: []lease.PoolConfig{{Name: "p", Capacity: 1}},
		DisconnectEvents: jetstream.ExecutorDisconnectSubject}
	return srv, harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), cfg)
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
	got, errc, _ = queuedAcquire(t, waiter, t.Context(), "p", 1)
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
func TestFastReleaseFreesAClosedHoldersSlots(t *testing.T) {
	srv, _ := fastRelease(t)
	l, holderNC, got, errc := heldAndQueued(t, srv)
	if l.FastRelease() != lease.DefaultDisconnectGrace {
		t.Fatalf("lease granted with fast release %v, want %v", l.FastRelease(), lease.DefaultDisconnectGrace)
	}
	if rec := l.Record(); rec.ConnServer != holderNC.ConnectedServerId() {
		t.Fatalf("lease bound to %q, want the holder's server %q", rec.ConnServer, holderNC.ConnectedServerId())
	}
	holderNC.Close()
	d := awaitGrant(t, got, errc, 7*time.Second, "the slot of a closed holder, within half the TTL")
	t.Logf("closed holder's slot granted to the waiter after %v (TTL 15s, grace %v)", d.Round(time.Millisecond), lease.DefaultDisconnectGrace)
	if d < lease.DefaultDisconnectGrace*3/4 {
		t.Fatalf("granted %v after the close: before the holder's own deadline", d)
	}
}

// A queued request whose connection closes leaves the queue: the one
// behind it is granted as soon as the slot is free.
func TestFastReleaseDropsAClosedQueuedRequest(t *testing.T) {
	srv, n := fastRelease(t)
	ctx := t.Context()
	holder, _ := executorClient(t, srv)
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	gone, goneNC := executorClient(t, srv)
	_, goneErr, _ := queuedAcquire(t, gone, ctx, "p", 1)
	next, _ := executorClient(t, srv)
	got, errc, pos := queuedAcquire(t, next, ctx, "p", 1)
	if pos != 2 {
		t.Fatalf("queued at %d, want 2", pos)
	}
	goneNC.Close()
	harness.Eventually(t, 5*time.Second, "the closed requester's request leaves the queue", func() bool {
		return poolStats(t, n.Manager, "p").QueuedRequests == 1
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

// A holder whose connection is cut while its process lives reconnects and
// moves its lease to the new connection: it keeps the lease, and nobody
// else is granted the slot.
func TestFastReleaseReconnectKeepsTheLease(t *testing.T) {
	srv, n := fastRelease(t)
	ctx := t.Context()
	holder, holderNC := executorClient(t, srv, nats.ReconnectWait(10*time.Millisecond))
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := executorClient(t, srv)
	got, errc, _ := queuedAcquire(t, waiter, ctx, "p", 1)
	for range 3 {
		before, err := holderNC.GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.DisconnectClientByID(before); err != nil {
			t.Fatal(err)
		}
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
	case <-time.After(2 * lease.DefaultDisconnectGrace):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A holder cut off for good (no reconnect) stops relying on its lease
// before the manager gives the slot to the next waiter: never two holders.
func TestFastReleaseCutOffHolderStopsFirst(t *testing.T) {
	srv, _ := fastRelease(t)
	ctx := t.Context()
	holder, holderNC := executorClient(t, srv, nats.NoReconnect())
	l, err := holder.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := executorClient(t, srv)
	got, errc, _ := queuedAcquire(t, waiter, ctx, "p", 1)
	cid, err := holderNC.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	var lost time.Time
	select {
	case <-l.Done():
		lost = time.Now()
		if !errors.Is(l.Err(), lease.ErrLeaseLost) {
			t.Fatalf("Done closed with %v, want a loss", l.Err())
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

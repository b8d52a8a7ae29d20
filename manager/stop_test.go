package manager_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// stopUnderALease runs a manager with fast release (embedded: whether its
// NATS server stops with it), grants a lease, stops the manager cleanly,
// then shuts the server down, as leasemgr does on SIGTERM. It returns the
// lease and its deadline as the renewal at the stop notice set it.
func stopUnderALease(t *testing.T, embedded bool) (*lease.Lease, time.Time) {
	t.Helper()
	const ttl = 15 * time.Second
	srv := harness.StartSecureServer(t)
	cfg := manager.Config{Node: node, TTL: ttl, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}},
		DisconnectEvents: jetstream.ExecutorDisconnectSubject, EmbeddedServer: embedded}
	_, stop := harness.RunManagerConn(t, srv.Connect(t, config.RoleManager), cfg)
	holder, holderNC := executorClient(t, srv)
	l, err := holder.Acquire(t.Context(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	before := l.Deadline()
	time.Sleep(500 * time.Millisecond) // so that a renewal now moves the deadline visibly
	stopping := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The manager's answer may still be on its way when Run returns. A
	// renewal's deadline is its send time + TTL less the margin (TTL/10),
	// so the deadline tells when it was sent: after the stop began, and
	// before the holder's own heartbeat was due (TTL/3 after the grant's
	// request, the send time of before), so it was the notice that woke
	// the holder. Measured on the holder's own clock, not on when this
	// goroutine gets to look.
	var renewed time.Time
	harness.Eventually(t, time.Minute, "the holder to renew at the stop notice", func() bool {
		renewed = l.Deadline()
		return renewed.After(before)
	})
	if sent := renewed.Add(-(ttl - ttl/10)); sent.Before(stopping) || !renewed.Before(before.Add(ttl/3)) {
		t.Fatalf("the holder's renewal was sent %v after the stop began, %v after the grant's request; want after the stop began and before its heartbeat was due (%v)",
			sent.Sub(stopping).Round(time.Millisecond), renewed.Sub(before).Round(time.Millisecond), ttl/3)
	}
	srv.Shutdown()
	harness.Eventually(t, time.Minute, "the holder to see its server gone", func() bool { return holderNC.Status() != nats.CONNECTED })
	return l, renewed
}

// A manager that stops cleanly with its embedded server (leasemgr's
// default layout, on SIGTERM) tells its holders: they renew at once, and
// the close of their connections by the server that goes with it does not
// count against their leases. Work outlives the restart.
func TestCleanStopKeepsLeasesThroughTheServersStop(t *testing.T) {
	t.Parallel()
	l, renewed := stopUnderALease(t, true)
	// Three times the time the dropped clock allows: the lease is held.
	time.Sleep(3 * lease.DefaultDisconnectGrace)
	if err := l.Err(); err != nil {
		t.Fatalf("the lease was given up over a clean stop of its manager and server: %v", err)
	}
	// The server's going did not bring the deadline forward: it is still
	// the one the renewal at the stop notice set, a TTL less the margin
	// from its sending (the dropped clock would have put it in the past).
	if d := l.Deadline(); d.Before(renewed) {
		t.Fatalf("deadline %v after the server's stop, %v before the one the renewal at the stop notice set", d, renewed.Sub(d))
	}
}

// Without that word (a manager whose server does not stop with it), a
// holder whose connection drops and cannot come back gives its lease up
// within the grace: nothing tells it the close cannot free its slot.
func TestDroppedConnectionWithoutStopNoticeEndsTheLease(t *testing.T) {
	t.Parallel()
	l, _ := stopUnderALease(t, false)
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), lease.ErrConnectionDropped) {
			t.Fatalf("lease ended with %v, want %v", l.Err(), lease.ErrConnectionDropped)
		}
	case <-time.After(time.Minute): // only a stuck run: the TTL would end it with another error
		t.Fatal("the lease was kept after its connection dropped for good")
	}
}

// A client whose connection only its server can close (WithServerOnlyDrops:
// the executor on leasemgr's embedded server) keeps its lease through its
// server's going, even without a stop notice (a crash of leasemgr): that
// drop freed nothing, so only the silent and TTL clocks count.
func TestServerOnlyDropsKeepTheLeaseThroughACrash(t *testing.T) {
	t.Parallel()
	srv := harness.StartSecureServer(t)
	cfg := manager.Config{Node: node, TTL: 15 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}},
		DisconnectEvents: jetstream.ExecutorDisconnectSubject}
	harness.StartManagerConn(t, srv.Connect(t, config.RoleManager), cfg)
	nc := srv.Connect(t, config.RoleExecutor)
	c, err := lease.NewClient(nc, node, lease.WithServerOnlyDrops())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := c.Acquire(t.Context(), "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown() // as if leasemgr was killed: no notice
	harness.Eventually(t, 5*time.Second, "the holder to see its server gone", func() bool { return nc.Status() != nats.CONNECTED })
	time.Sleep(3 * lease.DefaultDisconnectGrace) // three times what the dropped clock would allow
	if err := l.Err(); err != nil {
		t.Fatalf("the lease was given up over its server's going: %v", err)
	}
}

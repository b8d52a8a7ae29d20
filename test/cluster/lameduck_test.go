package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/test/harness"
)

// A server stopped in lame duck mode (a rolling restart) costs its holders
// nothing, however long they take to reconnect: told by their server, they
// take their leases off fast release before it closes their connections
// (lease/lameduck.go), so the close is no longer a deadline. Here the
// holder cannot reconnect for several times the grace after its server
// closed its connection, which would lose a bound lease at 3/4 of the
// grace; it keeps it, the waiter behind it is not granted, and its first
// renewal on the new connection binds the lease there again.
func TestLameDuckStopCostsAHolderNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := StartLameDuckStage(ctx, t)
	hnc, err := dial(ctx, s.Proxy.URL(), "holder", s.Cluster.Auth(config.RoleExecutor))
	if err != nil {
		t.Fatal(err)
	}
	defer hnc.Close()
	holder, err := lease.NewClient(hnc, "node1", lease.WithPrefix(s.Settings.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	l, err := holder.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	if l.FastRelease() == 0 {
		t.Fatal("granted without fast release")
	}
	got := s.QueueWaiter(ctx, t)
	if r := s.Stored(ctx, "gpu", l.ID()); r.ConnServer != s.Server1 {
		t.Fatalf("lease stored bound to %q, want the holder's server %q", r.ConnServer, s.Server1)
	}

	// Server 1 enters lame duck mode; the holder cannot come back.
	at := s.StopServer1(t)
	harness.Eventually(t, time.Minute, "the lease is stored unbound before the server closes the holder's connection", func() bool {
		r := s.Stored(ctx, "gpu", l.ID())
		return r.ID == l.ID() && r.ConnServer == "" && hnc.ConnectedServerId() == s.Server1
	})
	t.Logf("unbound %v after the lame duck stop began", time.Since(at).Round(time.Millisecond))
	// A lease granted after the notice, on the same connection, is
	// unbound at once too.
	l2, err := holder.Acquire(ctx, "cpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, time.Minute, "a lease granted after the notice is stored unbound before the close", func() bool {
		r := s.Stored(ctx, "cpu", l2.ID())
		return r.ID == l2.ID() && r.ConnServer == "" && hnc.ConnectedServerId() == s.Server1
	})
	harness.Eventually(t, time.Minute, "server 1 closes the holder's connection", func() bool { return hnc.Status() != nats.CONNECTED })
	dropped := time.Now()
	t.Logf("connection closed %v after the stop began", dropped.Sub(at).Round(time.Millisecond))
	select {
	case <-l.Done():
		t.Fatalf("lease lost while its holder could not reconnect: %v", l.Err())
	case <-l2.Done():
		t.Fatalf("the lease granted after the notice was lost while its holder could not reconnect: %v", l2.Err())
	case w := <-got:
		t.Fatalf("the waiter was granted a live holder's slot: %+v", w.Record())
	case <-time.After(4 * l.FastRelease()):
	}

	s.Allow()
	harness.Eventually(t, time.Minute, "the lease moves to the holder's new connection", func() bool {
		r := s.Stored(ctx, "gpu", l.ID())
		return r.ConnServer != "" && r.ConnServer != s.Server1 && r.ConnServer == hnc.ConnectedServerId()
	})
	t.Logf("bound again %v after the close", time.Since(dropped).Round(time.Millisecond))
	select {
	case <-l.Done():
		t.Fatalf("lease lost: %v", l.Err())
	case w := <-got:
		t.Fatalf("the waiter was granted a live holder's slot: %+v", w.Record())
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s.WaiterGranted(ctx, t, got)
}

package cluster

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	sljs "github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
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
	st := Settings{LeaseTTL: 15 * time.Second, LeaderTTL: 5 * time.Second, DisconnectGrace: lease.DefaultDisconnectGrace, Logger: harness.Logger()}
	cl := provisionedCluster(ctx, t, &st)
	c, err := StartCandidate(ctx, CandidateConfig{Settings: st, Cluster: cl, Node: "node1", Instance: "m", Upstream: 0,
		Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}, {Name: "cpu", Capacity: 1}}, Terms: &Terms{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	harness.Eventually(t, 2*time.Minute, "the manager serves", c.Serving)

	// The holder reaches server 1 through a proxy that can refuse it a
	// new connection.
	var refuse atomic.Bool
	p, err := NewProxy(func() []string {
		if refuse.Load() {
			return nil
		}
		return cl.LiveAddrs(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	hnc, err := dial(ctx, p.URL(), "holder", cl.Auth(config.RoleExecutor))
	if err != nil {
		t.Fatal(err)
	}
	defer hnc.Close()
	server1 := hnc.ConnectedServerId()
	holder, err := lease.NewClient(hnc, "node1", lease.WithPrefix(st.Prefix))
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
	wnc, err := dial(ctx, "nats://"+cl.ClientAddr(2), "waiter", cl.Auth(config.RoleExecutor))
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	waiter, err := lease.NewClient(wnc, "node1", lease.WithPrefix(st.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	queued := make(chan struct{})
	got := make(chan *lease.Lease, 1)
	go func() {
		w, err := waiter.Acquire(ctx, "gpu", 1, lease.OnQueued(func(int) {
			select {
			case <-queued:
			default:
				close(queued)
			}
		}))
		if err == nil {
			got <- w
		}
	}()
	select {
	case <-queued:
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not queued")
	}

	mgr, err := dial(ctx, cl.URL(), "lease bucket", cl.Auth(config.RoleManager))
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	js, _ := jetstream.New(mgr)
	kv, err := js.KeyValue(ctx, sljs.NamesFor(st.Prefix).Leases)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() lease.Record {
		e, err := kv.Get(ctx, lease.RecordKey("node1", "gpu", l.ID()))
		if err != nil {
			return lease.Record{}
		}
		var r lease.Record
		_ = json.Unmarshal(e.Value(), &r)
		return r
	}
	if r := stored(); r.ConnServer != server1 {
		t.Fatalf("lease stored bound to %q, want the holder's server %q", r.ConnServer, server1)
	}

	// Server 1 enters lame duck mode; the holder cannot come back.
	refuse.Store(true)
	stopped := make(chan struct{})
	at := time.Now()
	go func() {
		defer close(stopped)
		cl.Stop(1)
	}()
	harness.Eventually(t, time.Minute, "the lease is stored unbound before the server closes the holder's connection", func() bool {
		r := stored()
		return r.ID == l.ID() && r.ConnServer == "" && hnc.ConnectedServerId() == server1
	})
	t.Logf("unbound %v after the lame duck stop began", time.Since(at).Round(time.Millisecond))
	// A lease granted after the notice, on the same connection, is
	// unbound at once too.
	l2, err := holder.Acquire(ctx, "cpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, time.Minute, "a lease granted after the notice is stored unbound before the close", func() bool {
		e, err := kv.Get(ctx, lease.RecordKey("node1", "cpu", l2.ID()))
		var r lease.Record
		return err == nil && json.Unmarshal(e.Value(), &r) == nil && r.ConnServer == "" && hnc.ConnectedServerId() == server1
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

	refuse.Store(false)
	harness.Eventually(t, time.Minute, "the lease moves to the holder's new connection", func() bool {
		r := stored()
		return r.ConnServer != "" && r.ConnServer != server1 && r.ConnServer == hnc.ConnectedServerId()
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
	select {
	case w := <-got:
		_ = w.Release(ctx)
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not granted after the release")
	}
	<-stopped
}

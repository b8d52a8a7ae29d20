package cluster

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	sljs "github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// LameDuckStage is the stage of the lame duck tests, the Go client's
// (lameduck_test.go) and the TypeScript client's
// (clients/typescript/lameduck_test.go): a 3-server cluster at the
// defaults of a rolling restart (15 s TTL, 5 s LEADER_TTL, the default
// grace), a manager for node "node1" with pools "gpu" and "cpu" of one
// slot each, a proxy to server 1 that can be made to refuse new
// connections (the holder's way in), and a reader of the lease bucket.
// Everything it starts ends with the test.
type LameDuckStage struct {
	Settings Settings
	Cluster  *Cluster
	// Proxy leads to server 1 until StopServer1, and to nothing from then
	// until Allow.
	Proxy   *Proxy
	Server1 string // server 1's id
	refuse  atomic.Bool
	kv      jetstream.KeyValue
}

// StartLameDuckStage sets the stage up; ctx bounds its setting up and its
// reads.
func StartLameDuckStage(ctx context.Context, t testing.TB) *LameDuckStage {
	t.Helper()
	s := &LameDuckStage{Settings: Settings{LeaseTTL: 15 * time.Second, LeaderTTL: 5 * time.Second, DisconnectGrace: lease.DefaultDisconnectGrace, Logger: harness.Logger()}}
	s.Settings.defaults()
	cl, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown)
	s.Cluster, s.Server1 = cl, cl.Server(1).ID()
	if err := Provision(ctx, cl.URL(), cl.Auth(config.RoleManager), s.Settings); err != nil {
		t.Fatal(err)
	}
	c, err := StartCandidate(ctx, CandidateConfig{Settings: s.Settings, Cluster: cl, Node: "node1", Instance: "m", Upstream: 0,
		Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}, {Name: "cpu", Capacity: 1}}, Terms: &Terms{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	harness.Eventually(t, 2*time.Minute, "the manager serves", c.Serving)
	if s.Proxy, err = NewProxy(func() []string {
		if s.refuse.Load() {
			return nil
		}
		return cl.LiveAddrs(1)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Proxy.Close() })
	mgr, err := dial(ctx, cl.URL(), "lease bucket", cl.Auth(config.RoleManager))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	js, _ := jetstream.New(mgr)
	if s.kv, err = js.KeyValue(ctx, sljs.NamesFor(s.Settings.Prefix).Leases); err != nil {
		t.Fatal(err)
	}
	return s
}

// Stored is the record of lease id in pool as the bucket has it; a zero
// Record if it has none.
func (s *LameDuckStage) Stored(ctx context.Context, pool, id string) lease.Record {
	e, err := s.kv.Get(ctx, lease.RecordKey("node1", pool, id))
	if err != nil {
		return lease.Record{}
	}
	var r lease.Record
	_ = json.Unmarshal(e.Value(), &r)
	return r
}

// QueueWaiter has a Go client on server 2 ask for pool "gpu"'s slot, and
// returns once it is queued; the channel gets its lease once granted.
func (s *LameDuckStage) QueueWaiter(ctx context.Context, t testing.TB) <-chan *lease.Lease {
	t.Helper()
	wnc, err := dial(ctx, "nats://"+s.Cluster.ClientAddr(2), "waiter", s.Cluster.Auth(config.RoleExecutor))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	waiter, err := lease.NewClient(wnc, "node1", lease.WithPrefix(s.Settings.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waiter.Close() })
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
	return got
}

// StopServer1 has the proxy refuse new connections and stops server 1 in
// lame duck mode, which takes it seconds: it returns when the stop began,
// and the test's end waits for the stop to end.
func (s *LameDuckStage) StopServer1(t testing.TB) time.Time {
	s.refuse.Store(true)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.Cluster.Stop(1)
	}()
	t.Cleanup(func() { <-stopped })
	return time.Now()
}

// Allow lets new connections through the proxy again, to the servers
// still up.
func (s *LameDuckStage) Allow() { s.refuse.Store(false) }

// WaiterGranted waits for the queued waiter's grant, after the holder's
// release, and releases it.
func (s *LameDuckStage) WaiterGranted(ctx context.Context, t testing.TB, got <-chan *lease.Lease) {
	t.Helper()
	select {
	case w := <-got:
		_ = w.Release(ctx)
	case <-time.After(time.Minute):
		t.Fatal("the waiter was not granted after the release")
	}
}

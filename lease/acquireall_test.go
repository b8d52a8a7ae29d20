package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// setNodes starts one manager per node with gpu=1 and the cluster pools'
// manager with api of capacity api.
func setNodes(t *testing.T, api int64, nodes ...string) (url string, cluster *harness.Node) {
	t.Helper()
	srv := harness.StartServer(t)
	for _, n := range nodes {
		harness.StartManager(t, srv.URL, manager.Config{Node: n, TTL: 3 * time.Second,
			Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}}})
	}
	cluster = harness.StartManager(t, srv.URL, manager.Config{Node: lease.ClusterNode, TTL: 3 * time.Second,
		Pools: []manager.PoolConfig{{Name: "api", Capacity: api}}})
	return srv.URL, cluster
}

func inUse(t *testing.T, c *lease.Client, pool string) int64 {
	t.Helper()
	ps, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Name == pool {
			return p.InUse
		}
	}
	t.Fatalf("no pool %s", pool)
	return 0
}

// A set is acquired in the global order whatever the order asked: the
// node's pools, then the cluster's; a refused pool leaves nothing held;
// bad sets are refused before anything is asked.
func TestAcquireAllIsAllOrNothing(t *testing.T) {
	t.Parallel()
	url, _ := setNodes(t, 2, "n1")
	c := harness.Client(t, url, "n1")
	cc := harness.Client(t, url, lease.ClusterNode)
	ctx := context.Background()
	held := func() (int64, int64) { return inUse(t, c, "gpu"), inUse(t, cc, "api") }

	set, err := c.AcquireAll(ctx, []lease.Want{{Pool: "api", Slots: 2}, {Pool: "gpu", Slots: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range set.Leases() {
		got = append(got, fmt.Sprintf("%s/%s=%d", l.Node(), l.Pool(), l.Slots()))
	}
	if strings.Join(got, ",") != "n1/gpu=1,cluster/api=2" {
		t.Fatalf("leases %v, want the node's gpu first, then the cluster's api", got)
	}
	if g, a := held(); g != 1 || a != 2 {
		t.Fatalf("held gpu %d, api %d", g, a)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if !errors.Is(set.Err(), lease.ErrReleased) {
		t.Fatalf("released set's Err: %v", set.Err())
	}
	harness.Eventually(t, 5*time.Second, "both pools free after the release", func() bool {
		g, a := held()
		return g == 0 && a == 0
	})

	busy, err := cc.Acquire(ctx, "api", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		wants []lease.Want
		opts  []lease.AcquireOption
		want  error
		names string
	}{
		{"over capacity", []lease.Want{{"gpu", 1}, {"api", 3}}, nil, lease.ErrExceedsCapacity, "pool api on node cluster"},
		{"unknown pool", []lease.Want{{"gpu", 1}, {"nope", 1}}, []lease.AcquireOption{lease.WithWait(time.Second)}, lease.ErrUnknownPool, "pool nope on node n1"},
		{"would wait", []lease.Want{{"api", 2}, {"gpu", 1}}, []lease.AcquireOption{lease.NoWait()}, lease.ErrWouldWait, "pool api on node cluster"},
		{"wait runs out", []lease.Want{{"gpu", 1}, {"api", 2}}, []lease.AcquireOption{lease.WithWait(300 * time.Millisecond)}, lease.ErrWaitExpired, "pool api on node cluster"},
		{"empty", nil, nil, lease.ErrBadRequest, "no pools"},
		{"twice", []lease.Want{{"gpu", 1}, {"gpu", 1}}, nil, lease.ErrBadRequest, "named twice"},
		{"no slots", []lease.Want{{"gpu", 0}}, nil, lease.ErrInvalidSlots, "at least 1"},
		{"bad name", []lease.Want{{"a.b", 1}}, nil, lease.ErrBadRequest, `pool "a.b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AcquireAll(ctx, tc.wants, tc.opts...)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("got %v, want %v naming %q", err, tc.want, tc.names)
			}
			harness.Eventually(t, 5*time.Second, "nothing held but the busy api slot", func() bool {
				g, a := held()
				return g == 0 && a == 1
			})
		})
	}
	_ = busy.Release(ctx)
}

// When one lease of a set is lost, Done closes, Err names it, and Release
// still gives the others back.
func TestLeaseSetEndsWithItsFirstLoss(t *testing.T) {
	t.Parallel()
	url, cluster := setNodes(t, 1, "n1")
	c := harness.Client(t, url, "n1")
	ctx := context.Background()
	var queued []lease.Queued
	set, err := c.AcquireAll(ctx, []lease.Want{{"gpu", 1}, {"api", 1}}, lease.WithRequestID("job-7"),
		lease.OnQueuedIn(func(q lease.Queued) { queued = append(queued, q) }))
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != 0 {
		t.Fatalf("queued %v with nothing else asking", queued)
	}
	// The api record is deleted behind the holder's back: its next renewal
	// is refused.
	key := lease.RecordKey(lease.ClusterNode, "api", "job-7-api")
	_, rev, err := cluster.Store.Get(ctx, key)
	if err != nil {
		t.Fatalf("the api lease is not stored under the derived request id: %v", err)
	}
	if err := cluster.Store.Delete(ctx, key, rev); err != nil {
		t.Fatal(err)
	}
	select {
	case <-set.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the set did not end after its api lease was lost")
	}
	if err := set.Err(); !errors.Is(err, lease.ErrLeaseLost) || !strings.Contains(err.Error(), "pool api on node cluster") {
		t.Fatalf("Err %v, want the api lease's loss", err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("release after a loss: %v", err)
	}
	harness.Eventually(t, 5*time.Second, "gpu free after the set's release", func() bool { return inUse(t, c, "gpu") == 0 })
}

// Two nodes with gpu=1 each and one cluster api=1: 8 clients, 4 per node,
// ask for gpu and api in random orders and hold briefly, until each has
// been granted five times. Nobody deadlocks (each keeps being granted), no pool
// is ever over its capacity, and a waiter's position names the pool it
// waits in and what it holds. The run ends when every client has its
// grants and somebody has waited for api, not after a fixed time: the one
// api slot serialises every grant, and on a busy machine (load 20) a 6 s
// window gave two clients one grant each. Two minutes only catch a
// deadlock, a starvation or a lack of contention for good.
func TestAcquireAllNeverDeadlocks(t *testing.T) {
	t.Parallel()
	url, _ := setNodes(t, 1, "n1", "n2")
	var over atomic.Int64
	nc := harness.Connect(t, url)
	if _, err := nc.Subscribe(lease.EventFilter(lease.DefaultPrefix, "", "", ""), func(m *nats.Msg) {
		evs, _ := lease.DecodeEvents(m.Data)
		for _, ev := range evs {
			if ev.Stats.InUse > ev.Stats.Capacity {
				over.Add(1)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const each = 5
	var wg sync.WaitGroup
	grants := make([]int, 8)
	var mu sync.Mutex // grants, waits and apiWaits
	var waits []lease.Queued
	apiWaits := 0
	// enough ends the run once every client has its grants and somebody
	// has waited for api (the contention the test is about).
	enough := func() {
		if slices.Min(grants) >= each && apiWaits > 0 {
			cancel()
		}
	}
	for i := range 8 {
		c := harness.Client(t, url, []string{"n1", "n2"}[i%2])
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for ctx.Err() == nil {
				wants := []lease.Want{{"gpu", 1}, {"api", 1}}
				rng.Shuffle(2, func(a, b int) { wants[a], wants[b] = wants[b], wants[a] })
				set, err := c.AcquireAll(ctx, wants, lease.OnQueuedIn(func(q lease.Queued) {
					mu.Lock()
					defer mu.Unlock()
					waits = append(waits, q)
					if q.Pool == "api" {
						apiWaits++
						enough()
					}
				}))
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("client %d: %v", i, err)
					}
					return
				}
				mu.Lock()
				grants[i]++
				enough()
				mu.Unlock()
				time.Sleep(time.Duration(20+rng.IntN(30)) * time.Millisecond)
				if err := set.Release(context.Background()); err != nil {
					t.Errorf("client %d: release: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	for i, n := range grants {
		if n < each {
			t.Errorf("client %d was granted gpu+api %d times in 2 minutes: starved or deadlocked", i, n)
		}
	}
	if n := over.Load(); n > 0 {
		t.Errorf("%d events showed a pool over its capacity", n)
	}
	for _, q := range waits {
		if q.Pool == "api" {
			if q.Node != lease.ClusterNode || len(q.Holding) != 1 || !strings.HasPrefix(q.Holding[0], "gpu on node n") {
				t.Errorf("a wait for api says %+v, want it on node cluster holding one gpu", q)
			}
		}
	}
	if apiWaits == 0 {
		t.Error("nobody ever waited for api: the test did not contend")
	}
	t.Logf("grants per client %v; %d waits reported", grants, len(waits))
}

// A stats request nobody answers (the cluster pools' manager took it and
// stood down, a takeover under way) costs AcquireAll one request timeout,
// not the caller's whole wait: it asks again, and the set is granted. With
// ctx's deadline as the only bound, such a set waited until that deadline
// (TestClusterPoolsAcrossNodes: executors granted nothing for a minute).
func TestAcquireAllOutlivesALostStatsRequest(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", TTL: 3 * time.Second, Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}}})
	// Until the cluster pools' manager starts, a subscriber takes the
	// cluster's stats requests and answers none.
	nc := harness.Connect(t, srv.URL)
	swallowed := make(chan struct{}, 1)
	sub, err := nc.Subscribe(lease.StatsSubject("lease", lease.ClusterNode), func(*nats.Msg) {
		select {
		case swallowed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := lease.NewClient(harness.Connect(t, srv.URL), "n1", lease.WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		set, err := c.AcquireAll(ctx, []lease.Want{{Pool: "gpu", Slots: 1}, {Pool: "api", Slots: 1}})
		if err == nil {
			err = set.Release(context.Background())
		}
		done <- err
	}()
	select {
	case <-swallowed:
	case <-time.After(2 * time.Minute):
		t.Fatal("AcquireAll asked no stats of the cluster")
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	harness.StartManager(t, srv.URL, manager.Config{Node: lease.ClusterNode, TTL: 3 * time.Second, Pools: []manager.PoolConfig{{Name: "api", Capacity: 1}}})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("AcquireAll: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("AcquireAll still waiting 2 minutes after the cluster pools' manager started: a lost stats request holds it")
	}
	t.Logf("granted %v after the cluster pools' manager started", time.Since(start).Round(time.Millisecond))
}

package manager_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// cycle acquires a slot of pool p and releases it: granted, completed.
func cycle(t *testing.T, c *lease.Client) {
	t.Helper()
	ctx := context.Background()
	l, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// counts is pool p's counts as n's manager reports them.
func counts(t *testing.T, n *harness.Node) lease.PoolCounts {
	t.Helper()
	s := harness.PoolStats(t, n.Manager, "p")
	if s.Counts == nil {
		t.Fatal("the stats carry no counts")
	}
	return *s.Counts
}

// storedCounts is pool p's counts as stored in the pool bucket, zero if
// none are.
func storedCounts(t *testing.T, ps manager.Store) lease.PoolCounts {
	t.Helper()
	var v struct {
		Pools map[string]lease.PoolCounts `json:"pools"`
	}
	readStoredCounts(t, ps, &v)
	return v.Pools["p"]
}

// readStoredCounts decodes the node's stored counts into v, leaving it as
// it is if none are stored.
func readStoredCounts(t *testing.T, ps manager.Store, v any) {
	t.Helper()
	data, _, err := ps.Get(context.Background(), node+".counts")
	if errors.Is(err, manager.ErrStoreNotFound) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("stored counts %q: %v", data, err)
	}
}

// Every outcome is counted in its pool as docs/protocol.md defines them,
// and the counts carry on across a restart: the next manager of the node
// starts from them, written as the first one closed.
func TestPoolCountsCountEveryOutcomeAcrossARestart(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1,
		Options: pools.Options{MaxQueue: 1, OnFull: pools.OnFullDropOldest}}}}
	first := harness.StartManager(t, srv.URL, cfg)
	c := harness.Client(t, srv.URL, node, lease.WithPollInterval(time.Minute), lease.WithRequestTimeout(time.Minute))
	ctx := context.Background()
	want := lease.PoolCounts{}
	check := func(n *harness.Node, what string) {
		t.Helper()
		harness.Eventually(t, 30*time.Second, what, func() bool { return counts(t, n) == want })
	}
	check(first, "no counts at first")

	l, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want.Granted, want.Completed = 1, 1
	check(first, "a grant and a release: granted and completed")

	hold, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "p", 1, lease.NoWait()); !errors.Is(err, lease.ErrWouldWait) {
		t.Fatalf("a try on a full pool: %v, want would_wait", err)
	}
	if _, err := c.Acquire(ctx, "p", 2); !errors.Is(err, lease.ErrExceedsCapacity) {
		t.Fatalf("2 slots of 1: %v, want exceeds_capacity", err)
	}
	want.Granted, want.Rejected = 2, 2
	check(first, "two refusals: rejected")

	_, oldErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithRequestID("old"))
	newCtx, cancelNew := context.WithCancel(ctx)
	defer cancelNew()
	_, newErr, _ := harness.QueuedAcquire(t, c, newCtx, "p", 1, lease.WithRequestID("new"))
	select {
	case err := <-oldErr:
		if !errors.Is(err, lease.ErrDropped) {
			t.Fatalf("the oldest waiter got %v, want dropped", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the oldest waiter heard nothing")
	}
	want.Dropped = 1
	check(first, "a drop: dropped, not rejected")
	cancelNew() // the client withdraws it
	<-newErr
	want.Cancelled = 1
	check(first, "a withdrawn request: cancelled")
	if err := hold.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want.Completed = 2

	// A lease nobody renews expires: failed.
	nc := harness.Connect(t, srv.URL)
	r := harness.Request(t, nc, lease.Subject("lease", node, "p", lease.VerbAcquire), lease.AcquireRequest{RequestID: "lost", Holder: "h", Slots: 1})
	if r.Status != lease.StatusGranted {
		t.Fatalf("acquire: %+v", r)
	}
	want.Granted, want.Failed = 3, 1
	check(first, "a lease whose TTL lapsed: failed")

	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	if got := storedCounts(t, first.Config.PoolStore); got != want {
		t.Fatalf("stored as the manager closed: %+v, want %+v", got, want)
	}
	second := harness.StartManager(t, srv.URL, cfg)
	check(second, "the counts carried on by the next manager")
	l, err = c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	want.Granted, want.Completed = 4, 3
	check(second, "the next manager counts on")
	harness.Eventually(t, 30*time.Second, "the next manager stores its counts within a second", func() bool {
		return storedCounts(t, second.Config.PoolStore) == want
	})
}

// A standby that takes over a crashed leader's node carries on from the
// counts the leader stored (each second), and counts on.
func TestPoolCountsSurviveATakeover(t *testing.T) {
	t.Parallel()
	const leaderTTL = time.Second
	srv := harness.StartServer(t)
	var overlap atomic.Int32
	pool := manager.PoolConfig{Name: "p", Capacity: 1}
	a := startCandidate(t, srv.URL, "a", leaderTTL, &overlap, pool)
	harness.Eventually(t, time.Minute, "a leads", a.serving.Load)
	b := startCandidate(t, srv.URL, "b", leaderTTL, &overlap, pool)
	c := harness.Client(t, srv.URL, node, lease.WithRequestTimeout(300*time.Millisecond), lease.WithPollInterval(300*time.Millisecond))
	ctx := context.Background()
	cycle(t, c)
	if _, err := c.Acquire(ctx, "p", 2); !errors.Is(err, lease.ErrExceedsCapacity) {
		t.Fatalf("2 slots of 1: %v, want exceeds_capacity", err)
	}
	want := lease.PoolCounts{Granted: 1, Completed: 1, Rejected: 1}
	ps, err := jetstream.OpenLeaseStore(ctx, harness.Connect(t, srv.URL), jetstream.BucketConfig{Name: jetstream.NamesFor("lease").Pools})
	if err != nil {
		t.Fatal(err)
	}
	// What a crash may lose is what was counted in its last second.
	harness.Eventually(t, 30*time.Second, "a stores its counts", func() bool { return storedCounts(t, ps) == want })

	a.crash()
	harness.Eventually(t, 2*time.Minute, "b takes over", b.serving.Load)
	reported := func() lease.PoolCounts {
		st, err := c.Stats(ctx)
		if err != nil {
			return lease.PoolCounts{}
		}
		for _, s := range st {
			if s.Name == "p" && s.Counts != nil {
				return *s.Counts
			}
		}
		return lease.PoolCounts{}
	}
	harness.Eventually(t, 30*time.Second, "b reports a's counts", func() bool { return reported() == want })
	cycle(t, c)
	want.Granted, want.Completed = 2, 2
	harness.Eventually(t, 30*time.Second, "b counts on and stores them", func() bool {
		return reported() == want && storedCounts(t, ps) == want
	})
}

// Stored counts no manager wrote are refused, logged and counted: the
// manager counts from zero and replaces them.
func TestPoolCountsNoManagerWroteAreRefused(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	ctx := context.Background()
	ps, err := jetstream.OpenLeaseStore(ctx, harness.Connect(t, srv.URL), jetstream.BucketConfig{Name: jetstream.NamesFor("lease").Pools})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Put(ctx, node+".counts", []byte(`{"pools":{"p":{"granted":1000000}}}`)); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Value
	n := harness.StartManager(t, srv.URL, manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}},
		RecordRefused: func(reason string) { refused.Store(reason) }})
	if got, _ := refused.Load().(string); got != manager.RefusedPoolCounts {
		t.Fatalf("refusal reason %q, want %q", got, manager.RefusedPoolCounts)
	}
	if got := counts(t, n); got != (lease.PoolCounts{}) {
		t.Fatalf("counts %+v after a refused stored value, want zero", got)
	}
	l, err := harness.Client(t, srv.URL, node).Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	want := lease.PoolCounts{Granted: 1, Completed: 1}
	harness.Eventually(t, 30*time.Second, "the manager's counts replace the refused ones", func() bool { return storedCounts(t, ps) == want })
}

// A successor's counts are never overwritten: a manager whose write finds
// the counts of a later term stored (it expects the revision it wrote
// last) is deposed, and the successor's counts stay.
func TestPoolCountsOfALaterTermDeposeTheWriter(t *testing.T) {
	t.Parallel()
	srv, n := startFenced(t, newTestFence(5), nil)
	ctx := context.Background()
	c := harness.Client(t, srv.URL, node)
	cycle(t, c)
	ps := n.Config.PoolStore // the store itself, not the manager's fenced view
	harness.Eventually(t, 30*time.Second, "the counts stored", func() bool {
		return storedCounts(t, ps) == lease.PoolCounts{Granted: 1, Completed: 1}
	})
	successor := `{"manager":"successor","term":6,"pools":{"p":{"granted":7}}}`
	if _, err := ps.Put(ctx, node+".counts", []byte(successor)); err != nil {
		t.Fatal(err)
	}
	cycle(t, c) // counted, and so written within a second
	select {
	case <-n.Manager.Deposed():
	case <-time.After(30 * time.Second):
		t.Fatal("the manager was not deposed by the later term's counts")
	}
	if data, _, err := ps.Get(ctx, node+".counts"); err != nil || string(data) != successor {
		t.Fatalf("stored counts %s, %v: want the successor's", data, err)
	}
}

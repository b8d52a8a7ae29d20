package manager_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// A full drop_oldest queue keeps the newest requests: the oldest waiter is
// told "dropped", announced in a rejected event with that code, and its
// queue entry deleted; the newcomer is queued and served in its turn.
func TestDropOldestTellsTheDroppedWaiter(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1,
		Options: pools.Options{MaxQueue: 2, OnFull: pools.OnFullDropOldest}})
	nc := harness.Connect(t, srv.URL)
	events, err := nc.SubscribeSync(lease.EventFilter("lease", node, "p", lease.EventRejected))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// No polls during the test: the dropped request's answer is the one
	// the manager sends when it drops it.
	c := harness.Client(t, srv.URL, node, lease.WithPollInterval(time.Minute), lease.WithRequestTimeout(time.Minute))
	ctx := context.Background()
	hold, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, oldErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithRequestID("old"))
	midGot, midErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithRequestID("mid"))
	harness.Eventually(t, 10*time.Second, "both queue entries stored", func() bool { return storedQueueEntries(t, n) == 2 })

	newGot, newErr, pos := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithRequestID("new"))
	if pos != 2 {
		t.Errorf("the newcomer is queued at %d, want 2 (behind mid)", pos)
	}
	select {
	case err := <-oldErr:
		var le *lease.Error
		if !errors.Is(err, lease.ErrDropped) || !errors.As(err, &le) || !strings.Contains(le.Message, `dropped from pool "p"`) || !strings.Contains(le.Message, "max_queue 2") {
			t.Fatalf("the oldest waiter got %v, want dropped naming the pool and its queue bound", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the oldest waiter heard nothing")
	}
	ev, _, err := harness.ReadEvents(events).Next(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ev.RequestID != "old" || ev.Code != lease.CodeDropped || ev.Stats.OnFull != pools.OnFullDropOldest {
		t.Fatalf("rejected event %+v, want old's, code dropped, on_full in its stats", ev)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.QueuedRequests != 2 || s.MaxQueue != 2 || s.OnFull != pools.OnFullDropOldest {
		t.Fatalf("stats %+v, want mid and new queued", s.Stats)
	}
	harness.Eventually(t, 10*time.Second, "the dropped request's queue entry deleted", func() bool {
		_, _, err := n.Store.Get(ctx, lease.RecordKey(node, "p", "old"))
		return errors.Is(err, manager.ErrStoreNotFound) && storedQueueEntries(t, n) == 2
	})

	if err := hold.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mid := mustGrant(t, midGot, midErr)
	if err := mid.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := mustGrant(t, newGot, newErr)
	_ = l.Release(ctx)
}

// A fail-fast pool (no queue) refuses what cannot start at once with
// would_wait, saying why, and queues nothing.
func TestFailFastPool(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1, Options: pools.Options{FailFast: true}})
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	hold, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, "p", 1)
	var le *lease.Error
	if !errors.As(err, &le) || le.Code != lease.CodeWouldWait || !strings.Contains(le.Message, "the pool has no queue") {
		t.Fatalf("acquire on a busy fail-fast pool: %v, want would_wait saying the pool has no queue", err)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); !s.FailFast || s.MaxQueue != 0 || s.QueuedRequests != 0 {
		t.Fatalf("stats %+v, want fail_fast, no max_queue, nothing queued", s.Stats)
	}
	if err := hold.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A release is answered before its delete is stored; the slot is free
	// once it is.
	harness.Eventually(t, 30*time.Second, "the released slot free", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 0 })
	l, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatalf("acquire on a free fail-fast pool: %v", err)
	}
	_ = l.Release(ctx)
}

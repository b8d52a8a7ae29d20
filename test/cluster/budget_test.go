package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// Issue 42: a budget holds across a takeover on a real three-server
// cluster. The leader settles 450 units above an estimate of 300 (in the
// stored window before the record's delete) and grants 500 more, held;
// then it crashes. The standby that takes over counts both, the 450 spent
// from the stored window and the 500 reserved from the record: it refuses
// 100 more (1000 would be passed), and grants them once the holder, which
// renewed across the takeover, settles 100 of its 500.
func TestBudgetSurvivesATakeover(t *testing.T) {
	t.Parallel()
	p := startPairOf(t, 8*time.Second, []manager.PoolConfig{{Name: "llm", Capacity: 10,
		Options: pools.Options{Budget: pools.Rate{Slots: 1000, Per: time.Hour}}}})
	c, err := lease.NewClient(p.nc, "node1", lease.WithHolder("agent"), lease.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	figures := func(want [2]int64) func() bool {
		return func() bool {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			st, err := c.Stats(sctx)
			if err != nil {
				return false
			}
			for _, s := range st {
				if s.Name == "llm" {
					return [2]int64{s.BudgetUsed, s.BudgetReserved} == want
				}
			}
			return false
		}
	}

	first, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(300))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.ReleaseUsage(ctx, 450); err != nil {
		t.Fatal(err)
	}
	held, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(500))
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, time.Minute, "the leader to count 450 spent and 500 reserved", figures([2]int64{450, 500}))

	p.a.Crash()
	harness.Eventually(t, time.Minute, "b takes over", p.b.Serving)
	harness.Eventually(t, time.Minute, "the successor to count 450 spent and 500 reserved", figures([2]int64{450, 500}))
	if _, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(100), lease.NoWait()); !errors.Is(err, lease.ErrWouldWait) {
		t.Fatalf("100 more units after the takeover: %v, want would_wait (450 + 500 + 100 > 1000)", err)
	}
	if err := held.ReleaseUsage(ctx, 100); err != nil {
		t.Fatalf("the lease held across the takeover: %v", err)
	}
	harness.Eventually(t, time.Minute, "550 spent, nothing reserved", figures([2]int64{550, 0}))
	l, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(450), lease.NoWait())
	if err != nil {
		t.Fatalf("450 units with 550 of 1000 spent: %v", err)
	}
	_ = l.Release(ctx)
}

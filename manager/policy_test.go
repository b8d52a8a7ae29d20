package manager_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// grantOrder queues one request per option set behind a held slot (capacity
// 1), releases the slot, and returns the indexes in the order they were
// granted (each releases at once).
func grantOrder(t *testing.T, c *lease.Client, pool string, opts [][]lease.AcquireOption) []int {
	t.Helper()
	h, order := queueBehind(t, c, pool, opts, false)
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out []int
	for i := range order {
		out = append(out, i)
	}
	return out
}

func TestPriorityPolicyOrder(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1, Options: pools.Options{Policy: pools.PolicyPriority, AgingStep: time.Hour}})
	c := harness.Client(t, srv.URL, node)
	if s := harness.PoolStats(t, n.Manager, "p"); s.Policy != pools.PolicyPriority {
		t.Fatalf("stats policy %q", s.Policy)
	}
	got := grantOrder(t, c, "p", [][]lease.AcquireOption{
		{lease.WithPriority(-1)}, // 0 low
		{},                       // 1 normal
		{lease.WithPriority(1)},  // 2 high
		{},                       // 3 normal, after 1
		{lease.WithPriority(1)},  // 4 high, after 2
	})
	want := []int{2, 4, 1, 3, 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("grant order %v, want %v (high first, FIFO within a priority)", got, want)
	}
}

func TestPriorityAgingPromotesOldLowRequest(t *testing.T) {
	t.Parallel()
	// One priority level is worth 300ms of waiting: a low request that has
	// waited more than 600ms goes before a high one that just arrived.
	srv, _ := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1, Options: pools.Options{Policy: pools.PolicyPriority, AgingStep: 300 * time.Millisecond}})
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	h, err := c.Acquire(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	lowGot, lowErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithPriority(-1))
	time.Sleep(800 * time.Millisecond) // the claim: aged past two 300ms steps
	highGot, highErr, _ := harness.QueuedAcquire(t, c, ctx, "p", 1, lease.WithPriority(1))
	_ = h.Release(ctx)
	low := mustGrant(t, lowGot, lowErr)
	select {
	case l := <-highGot:
		t.Fatalf("high request granted while the aged low one holds the slot: %+v", l.Record())
	default:
	}
	_ = low.Release(ctx)
	high := mustGrant(t, highGot, highErr)
	_ = high.Release(ctx)
}

func TestFairPolicyFollowsWeights(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1,
		Options: pools.Options{Policy: pools.PolicyFair, Weights: map[string]int{"a": 3, "b": 1}}})
	c := harness.Client(t, srv.URL, node, lease.WithPollInterval(time.Minute))
	var opts [][]lease.AcquireOption
	for range 40 {
		opts = append(opts, []lease.AcquireOption{lease.WithTenant("a")}, []lease.AcquireOption{lease.WithTenant("b")})
	}
	got := grantOrder(t, c, "p", opts)
	a := 0
	for _, i := range got[:40] {
		if i%2 == 0 {
			a++
		}
	}
	// 3:1 over the first 40 grants is 30 for a; within 10%.
	if a < 27 || a > 33 {
		t.Fatalf("tenant a got %d of the first 40 grants, want about 30 (weights 3:1); order %v", a, got)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.Policy != pools.PolicyFair {
		t.Fatalf("stats %+v", s)
	}
	harness.Eventually(t, 5*time.Second, "drained", func() bool { return harness.PoolStats(t, n.Manager, "p").InUse == 0 })
}

func TestQueueFullAndWouldWait(t *testing.T) {
	t.Parallel()
	srv, n := startNode(t, 3*time.Second, manager.PoolConfig{Name: "p", Capacity: 1, Options: pools.Options{MaxQueue: 2}})
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	// Try-acquire on a free pool is a plain grant.
	h, err := c.Acquire(ctx, "p", 1, lease.NoWait())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "p", 1, lease.NoWait()); !errors.Is(err, lease.ErrWouldWait) {
		t.Fatalf("try-acquire on a full pool: %v", err)
	}
	got1, err1, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
	got2, err2, _ := harness.QueuedAcquire(t, c, ctx, "p", 1)
	_, err = c.Acquire(ctx, "p", 1)
	var le *lease.Error
	if !errors.As(err, &le) || le.Code != lease.CodeQueueFull || le.RetryAfterMs <= 0 {
		t.Fatalf("third waiter with max queue 2: %v", err)
	}
	if s := harness.PoolStats(t, n.Manager, "p"); s.QueuedRequests != 2 || s.MaxQueue != 2 {
		t.Fatalf("stats %+v", s)
	}
	// Nothing lost: both queued requests are served.
	_ = h.Release(ctx)
	l1 := mustGrant(t, got1, err1)
	_ = l1.Release(ctx)
	l2 := mustGrant(t, got2, err2)
	_ = l2.Release(ctx)
	harness.Eventually(t, 5*time.Second, "pool empty", func() bool {
		s := harness.PoolStats(t, n.Manager, "p")
		return s.InUse == 0 && s.QueuedRequests == 0
	})
}

// Under every policy, many concurrent holders never exceed the capacity nor
// a tenant its cap, and everything drains.
func TestPoliciesNeverOverGrant(t *testing.T) {
	t.Parallel()
	for _, o := range []pools.Options{
		{},
		{Policy: pools.PolicyPriority, AgingStep: 50 * time.Millisecond},
		{Policy: pools.PolicyFair, Weights: map[string]int{"t0": 2}, TenantCap: 2},
	} {
		t.Run(string(o.Policy), func(t *testing.T) {
			const capacity = 3
			srv, n := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: capacity, Options: o})
			var held atomic.Int64
			var perTenant [3]atomic.Int64
			var wg sync.WaitGroup
			for g := range 12 {
				c := harness.Client(t, srv.URL, node)
				tenant := g % 3
				wg.Go(func() {
					for range 8 {
						l, err := c.Acquire(context.Background(), "p", int64(1+rand.IntN(2)),
							lease.WithTenant(fmt.Sprintf("t%d", tenant)), lease.WithPriority(rand.IntN(3)-1))
						if err != nil {
							t.Error(err)
							return
						}
						if h := held.Add(l.Slots()); h > capacity {
							t.Errorf("%d slots held, capacity %d", h, capacity)
						}
						if o.TenantCap > 0 {
							if h := perTenant[tenant].Add(l.Slots()); h > o.TenantCap {
								t.Errorf("tenant t%d holds %d slots, cap %d", tenant, h, o.TenantCap)
							}
						}
						time.Sleep(time.Millisecond)
						held.Add(-l.Slots())
						perTenant[tenant].Add(-l.Slots())
						if err := l.Release(context.Background()); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			harness.Eventually(t, 5*time.Second, "drained", func() bool {
				s := harness.PoolStats(t, n.Manager, "p")
				return s.InUse == 0 && s.QueuedRequests == 0
			})
		})
	}
}

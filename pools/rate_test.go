package pools_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/pools"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func ratePool(t *testing.T, capacity int64, o pools.Options) (*pools.Pool, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)}
	o.Now = clk.Now
	p, err := pools.NewWithOptions(capacity, o)
	if err != nil {
		t.Fatal(err)
	}
	return p, clk
}

// A rate-limited pool starts empty, grants as the bucket fills, never more
// than burst + rate*t from the start, and refuses more than the burst.
func TestRateGrantsAsTheBucketFills(t *testing.T) {
	p, clk := ratePool(t, 1000, pools.Options{Rate: pools.Rate{Slots: 10, Per: time.Second}, Burst: 5})
	if _, _, _, err := p.EnqueueRequest(pools.Request{Slots: 6}); !errors.Is(err, pools.ErrExceedsCapacity) {
		t.Fatalf("6 slots on a burst of 5: %v, want ErrExceedsCapacity", err)
	}
	if _, err := p.TryAcquireRequest(pools.Request{Slots: 1}); !errors.Is(err, pools.ErrWouldWait) {
		t.Fatalf("try on an empty bucket: %v, want ErrWouldWait", err)
	}
	if d := p.RetryAfter(1); d != 100*time.Millisecond {
		t.Fatalf("retry after %v, want 100ms", d)
	}
	granted := 0
	for range 200 {
		if _, ok, _, err := p.EnqueueRequest(pools.Request{Slots: 1}); err != nil {
			t.Fatal(err)
		} else if ok {
			granted++
		}
	}
	elapsed := time.Duration(0)
	for elapsed < 10*time.Second {
		d, ok := p.NextGrant()
		if !ok {
			t.Fatalf("nothing waits for the rate after %v with %d granted", elapsed, granted)
		}
		clk.add(d)
		elapsed += d
		granted += len(p.Refill())
		if limit := 5 + int(10*elapsed.Seconds()); granted > limit {
			t.Fatalf("%d granted after %v: more than burst + rate*t = %d", granted, elapsed, limit)
		}
	}
	if granted < 99 || granted > 100 {
		t.Fatalf("%d granted in 10s at 10/s from empty, want 100", granted)
	}
	if s := p.Stats(); s.Rate != "10/s" || s.Burst != 5 {
		t.Fatalf("stats %+v", s)
	}
}

// Under a rate, a fair pool still shares by weight: 3:1 starts.
func TestRateKeepsTheFairShare(t *testing.T) {
	p, clk := ratePool(t, 1000, pools.Options{Policy: pools.PolicyFair, Weights: map[string]int{"a": 3, "b": 1},
		Rate: pools.Rate{Slots: 100, Per: time.Second}, Burst: 1})
	for range 500 {
		for _, tenant := range []string{"a", "b"} {
			if _, _, _, err := p.EnqueueRequest(pools.Request{Slots: 1, Tenant: tenant}); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := map[string]int{}
	for count["a"]+count["b"] < 400 {
		d, ok := p.NextGrant()
		if !ok {
			t.Fatal("nothing waits for the rate")
		}
		clk.add(d)
		for _, w := range p.Refill() {
			count[w.Tenant]++
			p.ReleaseFor(w.Tenant, w.Slots)
		}
	}
	if a := float64(count["a"]) / float64(count["a"]+count["b"]); a < 0.73 || a > 0.77 {
		t.Fatalf("a started %.3f of the slots (%v), want 0.75", a, count)
	}
}

// Acquire, in process, is woken by the rate: 20 callers at 100/s with a
// burst of 1 all get through, in about 0.2 s, none sooner.
func TestRateWakesAcquire(t *testing.T) {
	p, err := pools.NewWithOptions(4, pools.Options{Rate: pools.Rate{Slots: 100, Per: time.Second}, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := p.Acquire(ctx, 1); err != nil {
				t.Error(err)
				return
			}
			p.Release(1)
		})
	}
	wg.Wait()
	if took := time.Since(start); took < 190*time.Millisecond {
		t.Fatalf("20 starts at 100/s took %v: faster than the rate", took)
	}
}

func TestRateOptions(t *testing.T) {
	for _, o := range []pools.Options{
		{Rate: pools.Rate{Slots: 0, Per: time.Second}},
		{Rate: pools.Rate{Slots: 1, Per: time.Second}, Burst: -1},
		{Burst: 3},
	} {
		if _, err := pools.NewWithOptions(1, o); !errors.Is(err, pools.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
	p, _ := pools.NewWithOptions(1, pools.Options{Rate: pools.Rate{Slots: 60, Per: time.Minute}})
	if s := p.Stats(); s.Burst != 1 || s.Rate != "60/m" {
		t.Fatalf("60/m default burst: %+v, want 1 (one second's worth)", s)
	}
}

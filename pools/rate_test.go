package pools_test

import (
	"context"
	"errors"
	"fmt"
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

// SetRate gives, changes and takes away a rate: a new rate starts empty, a
// changed one keeps its tokens up to the new burst, waiters over a lowered
// burst are rejected, and taking the rate away grants who it held back.
func TestSetRate(t *testing.T) {
	p, clk := ratePool(t, 10, pools.Options{})
	r := pools.Rate{Slots: 10, Per: time.Second}
	if _, _, err := p.SetRate(r, -1); !errors.Is(err, pools.ErrInvalidOptions) {
		t.Fatalf("negative burst: %v", err)
	}
	if _, _, err := p.SetRate(pools.Rate{}, 2); !errors.Is(err, pools.ErrInvalidOptions) {
		t.Fatalf("burst without a rate: %v", err)
	}
	if g, rj, err := p.SetRate(r, 4); err != nil || len(g)+len(rj) != 0 {
		t.Fatalf("SetRate: %v %v %v", g, rj, err)
	}
	if s := p.Stats(); s.Rate != "10/s" || s.Burst != 4 || s.Tokens != 0 {
		t.Fatalf("a new rate starts empty: %+v", s)
	}
	if o := p.Options(); o.Rate != r || o.Burst != 4 {
		t.Fatalf("Options after SetRate: %+v", o)
	}
	clk.add(time.Second) // full: 4
	small, _, _, _ := p.EnqueueRequest(pools.Request{Slots: 4})
	if !small.Granted() {
		t.Fatal("4 slots from a full bucket of 4 not granted")
	}
	clk.add(300 * time.Millisecond) // 3 tokens
	big, granted, _, err := p.EnqueueRequest(pools.Request{Slots: 4})
	if err != nil || granted {
		t.Fatalf("4 slots with 3 tokens: granted %v, %v", granted, err)
	}
	// Doubling the rate keeps the 3 tokens; lowering the burst to 3
	// rejects the 4-slot waiter.
	g, rj, err := p.SetRate(pools.Rate{Slots: 20, Per: time.Second}, 3)
	if err != nil || len(g) != 0 || len(rj) != 1 || rj[0] != big {
		t.Fatalf("SetRate(20/s, 3): granted %d, rejected %d, %v", len(g), len(rj), err)
	}
	if s := p.Stats(); s.Tokens != 3 || s.QueuedRequests != 0 {
		t.Fatalf("after lowering the burst: %+v, want 3 tokens kept, nothing queued", s)
	}
	p.Release(4)
	for range 3 {
		if !p.TryAcquire(1) {
			t.Fatal("3 kept tokens: 3 slots")
		}
	}
	w, granted, _, _ := p.EnqueueRequest(pools.Request{Slots: 1})
	if granted {
		t.Fatal("granted from an empty bucket")
	}
	// Taken away: the waiter goes in at once.
	if g, _, err := p.SetRate(pools.Rate{}, 0); err != nil || len(g) != 1 || g[0] != w {
		t.Fatalf("rate off: granted %v, %v", g, err)
	}
	if s := p.Stats(); s.Rate != "" || s.Tokens != 0 || s.Burst != 0 {
		t.Fatalf("rate off: %+v", s)
	}
}

// RetryAfter is honest about what a fifo queue starts first, and says
// nothing (0) without a rate or when the rate allows it now.
func TestRetryAfterCountsTheQueue(t *testing.T) {
	p, clk := ratePool(t, 100, pools.Options{Rate: pools.Rate{Slots: 10, Per: time.Second}, Burst: 5})
	if d := p.RetryAfter(2); d != 200*time.Millisecond {
		t.Fatalf("2 slots from empty: %v, want 200ms", d)
	}
	for range 3 {
		if _, _, _, err := p.EnqueueRequest(pools.Request{Slots: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if d := p.RetryAfter(2); d != 500*time.Millisecond {
		t.Fatalf("2 slots behind 3 queued: %v, want 500ms", d)
	}
	clk.add(time.Second)
	p.Refill()
	if d := p.RetryAfter(2); d != 0 {
		t.Fatalf("2 slots with 2 tokens left: %v, want 0", d)
	}
	q, _ := pools.NewWithOptions(1, pools.Options{})
	if d := q.RetryAfter(1); d != 0 {
		t.Fatalf("no rate: %v", d)
	}
}

// Rates at the edges of the configuration's range keep exact, overflow-free
// arithmetic: a day's worth at 1/h, 2^40 per second.
func TestRateExtremes(t *testing.T) {
	for _, tc := range []struct {
		r     pools.Rate
		burst int64
	}{
		{pools.Rate{Slots: 1, Per: time.Hour}, 24},
		{pools.Rate{Slots: 1 << 40, Per: time.Second}, 1 << 40},
		{pools.Rate{Slots: 90000, Per: time.Minute}, 1500},
	} {
		p, clk := ratePool(t, pools.MaxCapacity, pools.Options{Rate: tc.r, Burst: tc.burst})
		clk.add(1000 * time.Hour)
		if s := p.Stats(); s.Tokens != tc.burst {
			t.Errorf("%v after a long idle: %d tokens, want the burst %d", tc.r, s.Tokens, tc.burst)
		}
		if !p.TryAcquire(tc.burst) || p.TryAcquire(1) {
			t.Errorf("%v: a full bucket grants exactly its burst", tc.r)
		}
		if d := p.RetryAfter(tc.burst); d <= 0 || d > tc.r.Per*time.Duration(tc.burst/tc.r.Slots+1) {
			t.Errorf("%v: a burst again in %v", tc.r, d)
		}
	}
	if _, err := pools.CheckRate(pools.Rate{Slots: 1, Per: time.Hour}, 1<<40); err == nil {
		t.Error("a burst of 2^40 at 1/h accepted: its tokens overflow")
	}
}

// The policy's order holds under a rate: the head waits for its tokens and
// nobody jumps it, whether it is a multi-slot fifo head or the highest
// priority.
func TestRateKeepsThePolicyOrder(t *testing.T) {
	r := pools.Rate{Slots: 10, Per: time.Second}
	p, clk := ratePool(t, 100, pools.Options{Rate: r, Burst: 3})
	big, _, _, _ := p.EnqueueRequest(pools.Request{Slots: 3, Value: "big"})
	small, _, _, _ := p.EnqueueRequest(pools.Request{Slots: 1, Value: "small"})
	clk.add(100 * time.Millisecond) // one token: enough for small, not for big
	if g := p.Refill(); len(g) != 0 {
		t.Fatalf("granted %v ahead of the 3-slot head", g[0].Value)
	}
	if _, err := p.TryAcquireRequest(pools.Request{Slots: 1}); !errors.Is(err, pools.ErrWouldWait) {
		t.Fatalf("a newcomer jumped the queue: %v", err)
	}
	clk.add(200 * time.Millisecond)
	if g := p.Refill(); len(g) != 1 || g[0] != big {
		t.Fatalf("after 3 tokens: granted %d, want the head", len(g))
	}
	clk.add(100 * time.Millisecond)
	if g := p.Refill(); len(g) != 1 || g[0] != small {
		t.Fatal("small not granted next")
	}

	q, clk := ratePool(t, 100, pools.Options{Policy: pools.PolicyPriority, AgingStep: time.Hour, Rate: r, Burst: 1})
	for _, pr := range []int{-1, 0, 1} {
		if _, _, _, err := q.EnqueueRequest(pools.Request{Slots: 1, Priority: pr, Value: pr}); err != nil {
			t.Fatal(err)
		}
	}
	var order []any
	for len(order) < 3 {
		d, ok := q.NextGrant()
		if !ok {
			t.Fatal("nothing waits for the rate")
		}
		clk.add(d)
		for _, w := range q.Refill() {
			order = append(order, w.Value)
		}
	}
	if fmt.Sprint(order) != "[1 0 -1]" {
		t.Fatalf("priority order under a rate: %v, want [1 0 -1]", order)
	}
}

// A waiter granted under a start rate says when the rate counted it, on
// the pool's clock: a caller that stamps its own clock later (the manager,
// descheduled on a busy machine) would show grants closer together than
// the rate allowed them.
func TestRateGrantSaysWhenItStarted(t *testing.T) {
	p, clk := ratePool(t, 10, pools.Options{Rate: pools.Rate{Slots: 10, Per: time.Second}, Burst: 1})
	w, ok, _, err := p.EnqueueRequest(pools.Request{Slots: 1})
	if err != nil || ok {
		t.Fatalf("first request on an empty bucket: granted %v, %v; want it queued", ok, err)
	}
	d, _ := p.NextGrant()
	clk.add(d)
	at := clk.Now()
	if got := p.Refill(); len(got) != 1 || got[0] != w || !w.Started.Equal(at) {
		t.Fatalf("refill granted %v, started %v; want the waiter, started %v", got, w.Started, at)
	}
	clk.add(100 * time.Millisecond)
	w2, err := p.TryAcquireRequest(pools.Request{Slots: 1})
	if err != nil || !w2.Started.Equal(clk.Now()) {
		t.Fatalf("try: %v, started %v; want granted at %v", err, w2.Started, clk.Now())
	}
	free, _ := pools.NewWithOptions(1, pools.Options{})
	if w3, _, _, _ := free.EnqueueRequest(pools.Request{Slots: 1}); !w3.Started.IsZero() {
		t.Fatalf("a pool without a rate says its grant started %v, want zero", w3.Started)
	}
}

package manager_test

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

// budgetFigures is what pool p's stats say of its budget: spent in the
// window, reserved.
func budgetFigures(t *testing.T, n *harness.Node, pool string) (used, reserved int64) {
	t.Helper()
	s := harness.PoolStats(t, n.Manager, pool)
	return s.BudgetUsed, s.BudgetReserved
}

// A budget pool across a restart: the estimate a held lease reserved is
// reserved again by the next manager (from the record), the units settled
// before the restart still count (from the stored window), and a waiter
// blocked by the budget alone is granted as soon as a settlement below
// the estimate frees room.
func TestBudgetAcrossARestart(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "llm", Capacity: 10,
		Options: pools.Options{Budget: pools.Rate{Slots: 1000, Per: time.Hour}}}}}
	first := harness.StartManager(t, srv.URL, cfg)
	c := harness.Client(t, srv.URL, node, lease.WithRequestTimeout(time.Minute))
	ctx := context.Background()

	// Refusals at once: no estimate, one over the whole budget, a bad one.
	if _, err := c.Acquire(ctx, "llm", 1); !errors.Is(err, lease.ErrBadRequest) {
		t.Fatalf("no units in a budget pool: %v, want bad_request", err)
	}
	if _, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(1001)); !errors.Is(err, lease.ErrExceedsCapacity) {
		t.Fatalf("1001 units of 1000: %v, want exceeds_capacity", err)
	}
	if _, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(-1)); !errors.Is(err, lease.ErrBadRequest) {
		t.Fatalf("-1 units: %v, want bad_request", err)
	}

	a, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(300))
	if err != nil {
		t.Fatal(err)
	}
	if a.Record().Units != 300 {
		t.Fatalf("the record carries units %d, want 300", a.Record().Units)
	}
	if err := a.ReleaseUsage(ctx, 450); err != nil { // above the estimate: 450 spent
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "450 spent after the release", func() bool {
		u, r := budgetFigures(t, first, "llm")
		return u == 450 && r == 0
	})
	held, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(500))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(100), lease.NoWait()); !errors.Is(err, lease.ErrWouldWait) {
		t.Fatalf("100 more with 450 spent and 500 reserved of 1000: %v, want would_wait", err)
	}

	if err := first.Manager.Close(); err != nil {
		t.Fatal(err)
	}
	second := harness.StartManager(t, srv.URL, cfg)
	harness.Eventually(t, 30*time.Second, "the next manager counts 450 spent and 500 reserved", func() bool {
		u, r := budgetFigures(t, second, "llm")
		return u == 450 && r == 500
	})
	_, err = c.Acquire(ctx, "llm", 1, lease.WithUnits(100), lease.NoWait())
	var le *lease.Error
	if !errors.As(err, &le) || le.Code != lease.CodeWouldWait {
		t.Fatalf("after the restart, 100 more: %v, want would_wait", err)
	}
	// Only the budget holds it back: the message says so, and when the
	// window frees room (the 450 settled leave it in an hour).
	if want := `100 units not within pool "llm"'s budget 1000/h at once: 450 settled in the window, 500 reserved by leases held`; le.Message != want {
		t.Errorf("would_wait message %q, want %q", le.Message, want)
	}
	if le.RetryAfterMs < 3_500_000 || le.RetryAfterMs > 3_700_000 {
		t.Errorf("retry_after_ms %d, want about an hour (the 450 units leave the window then)", le.RetryAfterMs)
	}
	// A waiter the budget alone holds back, granted when the holder
	// settles 200 of its 500.
	got, errs, _ := harness.QueuedAcquire(t, c, ctx, "llm", 1, lease.WithUnits(300))
	if err := held.ReleaseUsage(ctx, 200); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l.Units() != 300 {
			t.Fatalf("granted with units %d", l.Units())
		}
		defer l.Release(ctx)
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not granted after the settlement below its estimate")
	}
	harness.Eventually(t, 30*time.Second, "650 spent and 300 reserved", func() bool {
		u, r := budgetFigures(t, second, "llm")
		return u == 650 && r == 300
	})
}

// Events carry the units: the estimate in granted, what was settled in
// released and expired (the estimate, for a lease nobody settled).
func TestBudgetEvents(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	cfg := manager.Config{Node: node, TTL: time.Second, Pools: []manager.PoolConfig{{Name: "llm", Capacity: 10,
		Options: pools.Options{Budget: pools.Rate{Slots: 1000, Per: time.Minute}}}}}
	n := harness.StartManager(t, srv.URL, cfg)
	nc := harness.Connect(t, srv.URL)
	sub, err := nc.SubscribeSync(lease.EventSubject(lease.DefaultPrefix, node, "llm", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := harness.Client(t, srv.URL, node)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "llm", 1, lease.WithUnits(40))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseUsage(ctx, 0); err != nil {
		t.Fatal(err)
	}
	// Nobody renews this one: it expires and settles its estimate.
	r := harness.Request(t, nc, lease.Subject("lease", node, "llm", lease.VerbAcquire), lease.AcquireRequest{RequestID: "lost", Holder: "h", Slots: 1, Units: 70})
	if r.Status != lease.StatusGranted {
		t.Fatalf("acquire: %+v", r)
	}
	want := map[lease.EventKind][]int64{}
	deadline := time.Now().Add(30 * time.Second)
	for len(want[lease.EventExpired]) == 0 && time.Now().Before(deadline) {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := lease.DecodeEvents(msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			switch ev.Kind {
			case lease.EventGranted:
				want[ev.Kind] = append(want[ev.Kind], ev.Units)
			case lease.EventReleased, lease.EventExpired:
				if ev.Settled == nil {
					t.Fatalf("%s event without settled units: %+v", ev.Kind, ev)
				}
				want[ev.Kind] = append(want[ev.Kind], *ev.Settled)
			}
			if ev.Stats.Budget != "1000/m" {
				t.Fatalf("event stats without the budget: %+v", ev.Stats)
			}
		}
	}
	if g, rel, exp := want[lease.EventGranted], want[lease.EventReleased], want[lease.EventExpired]; len(g) != 2 || g[0] != 40 || g[1] != 70 ||
		len(rel) != 1 || rel[0] != 0 || len(exp) != 1 || exp[0] != 70 {
		t.Fatalf("units in events: %v", want)
	}
	harness.Eventually(t, 30*time.Second, "70 spent by the expiry, nothing reserved", func() bool {
		u, r := budgetFigures(t, n, "llm")
		return u == 70 && r == 0
	})
}

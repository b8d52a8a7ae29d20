package pools

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// budgetModel is the budget as docs/configuration.md states it, kept
// apart from budget.go: units settled at t count until t + window rounded
// up to the next 1/60 of it; a grant needs spent + reserved + estimate <=
// limit.
type budgetModel struct {
	limit    int64
	window   time.Duration
	settled  []Spent // until each counts
	reserved int64
}

func (m *budgetModel) spent(now time.Time, exact bool) int64 {
	var n int64
	for _, s := range m.settled {
		until := s.Until
		if exact {
			// When it was settled plus one window, not rounded: the
			// sliding window users expect, which the pool must never
			// under-count.
			until = s.Until.Add(-m.window / budgetSlices)
		}
		if until.After(now) {
			n += s.Units
		}
	}
	return n
}

func (m *budgetModel) fits(now time.Time, units int64) bool {
	return m.spent(now, false)+m.reserved+units <= m.limit
}

type modelLease struct {
	w     *Waiter
	units int64
}

// TestBudgetAgainstModel drives a budget pool with random requests,
// settlements below and above the estimate, clock moves past the window
// and restarts (a new pool given Spent and the open reservations), and
// checks every grant and every wait against the model.
func TestBudgetAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 42))
		clock := newClock()
		// A window that is a whole number of slices, so the model's exact
		// time is the settlement's.
		window := time.Duration(1+rng.IntN(3)) * time.Minute
		limit := int64(20 + rng.IntN(200))
		opts := Options{Budget: Rate{Slots: limit, Per: window}, Now: clock.Now}
		p := mustNew(t, MaxCapacity, opts)
		m := &budgetModel{limit: limit, window: window}
		var held []modelLease
		var queue []*Waiter // in order, as the model sees them

		take := func(ws []*Waiter) {
			for _, w := range ws {
				if len(queue) == 0 || queue[0] != w {
					t.Fatalf("seed %d: granted %p out of order", seed, w)
				}
				if !m.fits(clock.Now(), w.Units) {
					t.Fatalf("seed %d: granted %d units with %d spent and %d reserved of %d", seed, w.Units, m.spent(clock.Now(), false), m.reserved, limit)
				}
				if m.spent(clock.Now(), true)+m.reserved+w.Units > limit {
					t.Fatalf("seed %d: the sliding window is over its limit", seed)
				}
				queue = queue[1:]
				m.reserved += w.Units
				held = append(held, modelLease{w, w.Units})
			}
		}
		checkHead := func(op string) {
			if len(queue) > 0 && m.fits(clock.Now(), queue[0].Units) {
				t.Fatalf("seed %d after %s: head of %d units waits with %d spent, %d reserved of %d", seed, op, queue[0].Units, m.spent(clock.Now(), false), m.reserved, limit)
			}
			st := p.Stats()
			if st.BudgetUsed != m.spent(clock.Now(), false) || st.BudgetReserved != m.reserved {
				t.Fatalf("seed %d after %s: stats used %d reserved %d, model %d %d", seed, op, st.BudgetUsed, st.BudgetReserved, m.spent(clock.Now(), false), m.reserved)
			}
		}
		for step := 0; step < 400; step++ {
			switch op := rng.IntN(10); {
			case op < 4: // request
				units := 1 + rng.Int64N(limit/2)
				w, granted, _, err := p.EnqueueRequest(Request{Slots: 1, Units: units})
				if err != nil {
					t.Fatal(err)
				}
				queue = append(queue, w)
				if granted {
					take([]*Waiter{w})
				}
				checkHead("request")
			case op < 7 && len(held) > 0: // settle
				i := rng.IntN(len(held))
				l := held[i]
				held = append(held[:i], held[i+1:]...)
				actual := rng.Int64N(2 * l.units) // below or above
				m.reserved -= l.units
				if actual > 0 {
					until := clock.Now().Add(window).Truncate(window / budgetSlices).Add(window / budgetSlices)
					m.settled = append(m.settled, Spent{Until: until, Units: actual})
				}
				take(p.ReleaseUnits("", "", 1, l.units, actual))
				checkHead("settle")
			case op < 9: // time
				clock.Advance(time.Duration(rng.Int64N(int64(window / 3))))
				if d, ok := p.NextGrant(); ok && d == 0 {
					take(p.Refill())
				}
				take(p.Refill())
				checkHead("time")
			default: // restart: a new pool from what the store keeps
				spent := p.Spent()
				q := mustNew(t, MaxCapacity, opts)
				q.RestoreSpent(spent)
				for _, l := range held {
					q.RestoreKey("", "", 1)
					q.RestoreUnits(l.units)
				}
				p = q
				waiting := queue
				queue = nil
				var granted []*Waiter
				for _, w := range waiting {
					nw, ok, _, err := p.EnqueueRequest(Request{Slots: 1, Units: w.Units})
					if err != nil {
						t.Fatal(err)
					}
					queue = append(queue, nw)
					if ok {
						granted = append(granted, nw)
					}
				}
				// The old held leases keep their own waiters: settle them
				// through the new pool by units only.
				take(granted)
				checkHead("restart")
			}
		}
	}
}

// TestBudgetRefusals: a request without units, with too many, or with an
// estimate over the whole budget is refused at once, naming why.
func TestBudgetRefusals(t *testing.T) {
	p := mustNew(t, 10, Options{Budget: Rate{Slots: 100, Per: time.Minute}})
	for _, c := range []struct {
		units int64
		want  error
	}{{0, ErrInvalidUnits}, {-1, ErrInvalidUnits}, {MaxUnits + 1, ErrInvalidUnits}, {101, ErrExceedsCapacity}} {
		if _, _, _, err := p.EnqueueRequest(Request{Slots: 1, Units: c.units}); !errors.Is(err, c.want) {
			t.Errorf("units %d: got %v, want %v", c.units, err, c.want)
		}
	}
	if _, err := NewWithOptions(1, Options{Budget: Rate{Slots: MaxUnits + 1, Per: time.Minute}}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("a budget over MaxUnits: %v", err)
	}
	// A pool without a budget ignores units.
	q := mustNew(t, 1, Options{})
	if _, ok, _, err := q.EnqueueRequest(Request{Slots: 1, Units: 5}); !ok || err != nil {
		t.Errorf("units in a pool without a budget: granted %v, %v", ok, err)
	}
}

// TestBudgetSettleBelowFreesAtOnce: a holder that used less than its
// estimate lets the next waiter in at its release; above, the excess
// holds the next one back until the window passes it.
func TestBudgetSettleBelowFreesAtOnce(t *testing.T) {
	clock := newClock()
	p := mustNew(t, 10, Options{Budget: Rate{Slots: 100, Per: time.Minute}, Now: clock.Now})
	a, ok, _, _ := p.EnqueueRequest(Request{Slots: 1, Units: 80})
	if !ok {
		t.Fatal("first not granted")
	}
	b, ok, _, _ := p.EnqueueRequest(Request{Slots: 1, Units: 50})
	if ok {
		t.Fatal("80 reserved + 50 granted within 100")
	}
	if g := p.ReleaseUnits("", "", 1, a.Units, 30); len(g) != 1 || g[0] != b {
		t.Fatalf("settling 30 of 80 did not grant the 50 waiting: %v", g)
	}
	// b used 90 of its 50: 120 spent, over the budget until the window
	// passes them.
	if g := p.ReleaseUnits("", "", 1, b.Units, 90); len(g) != 0 {
		t.Fatalf("granted %v with nothing waiting", g)
	}
	d, ok, _, _ := p.EnqueueRequest(Request{Slots: 1, Units: 10})
	if ok {
		t.Fatal("granted 10 units with 120 of 100 spent")
	}
	wait, ok2 := p.NextGrant()
	if !ok2 || wait < time.Minute || wait > time.Minute+time.Second {
		t.Fatalf("NextGrant = %v, %v; want a minute and at most a slice", wait, ok2)
	}
	clock.Advance(wait - time.Nanosecond)
	if g := p.Refill(); len(g) != 0 {
		t.Fatal("granted before the window passed the spent units")
	}
	clock.Advance(time.Nanosecond)
	if g := p.Refill(); len(g) != 1 || g[0] != d {
		t.Fatalf("not granted once the window passed: %v", g)
	}
}

package pools

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// A usage budget (Options.Budget) limits the units (tokens, cents: the
// caller's) a pool's holders use per window, beside its slots. A request
// reserves an estimate of its units (Request.Units) when it is granted;
// its holder settles the actual at release (ReleaseUnits). A grant needs
//
//	spent in the window + reserved by open grants + its estimate <= limit
//
// where spent counts what was settled in the last window, a sliding
// window: units settled at t count until t + window, rounded up to the
// next 1/budgetSlices of the window so that the window is kept in at most
// budgetSlices+1 figures (a unit counts between one window and one window
// and a slice: never less, so the limit is never passed). What only time
// frees is granted by Refill once NextGrant has passed, as for a start
// rate; a settlement below the estimate frees the rest at once.

// budgetSlices is how many parts of its window a budget keeps apart.
const budgetSlices = 60

// MaxUnits bounds a request's estimate and a settled actual: the largest
// budget a pool may have (MaxCapacity units per window).
const MaxUnits = MaxCapacity

// maxSpent saturates one slice's sum of settled units: far over any
// budget, far from overflow when budgetSlices+1 of them are added.
const maxSpent = 1 << 54

// ErrInvalidUnits is returned (wrapped) for a request to a pool with a
// budget that gives no estimate, or one out of range.
var ErrInvalidUnits = errors.New("pools: invalid units")

// Spent is one slice of a budget's window: Units settled that count until
// Until. A pool's spent units are a list of them (Pool.Spent), sorted by
// Until, that RestoreSpent takes back.
type Spent struct {
	Until time.Time `json:"until"`
	Units int64     `json:"units"`
}

// budget is a pool's usage budget: limit units per window.
type budget struct {
	limit    int64
	window   time.Duration
	reserved int64   // estimates of the open grants
	spent    []Spent // sorted by Until, each Until distinct
	total    int64   // sum of spent's units
}

func newBudget(b Rate) (*budget, error) {
	if b.Slots <= 0 || b.Slots > MaxUnits || b.Per < budgetSlices {
		return nil, fmt.Errorf("budget %v: units must be 1..%d and the window positive", b, int64(MaxUnits))
	}
	return &budget{limit: b.Slots, window: b.Per}, nil
}

// expire drops the slices whose time is over.
func (b *budget) expire(now time.Time) {
	i := 0
	for i < len(b.spent) && !b.spent[i].Until.After(now) {
		b.total -= b.spent[i].Units
		i++
	}
	if i > 0 {
		b.spent = slices.Delete(b.spent, 0, i)
	}
}

// used is what counts against the limit now: spent and reserved.
func (b *budget) used(now time.Time) int64 {
	b.expire(now)
	return b.total + b.reserved
}

// fits reports whether an estimate of units may be reserved now.
func (b *budget) fits(now time.Time, units int64) bool {
	return b.used(now)+units <= b.limit
}

// settle ends a grant that reserved reserved units and used actual.
func (b *budget) settle(now time.Time, reserved, actual int64) {
	b.reserved = max(0, b.reserved-reserved)
	if actual <= 0 {
		return
	}
	b.add(b.until(now), actual)
}

// until is when units settled now stop counting: now plus the window,
// rounded up to a slice.
func (b *budget) until(now time.Time) time.Time {
	slice := b.window / budgetSlices
	return now.Add(b.window).Truncate(slice).Add(slice)
}

// add counts units spent until until, keeping spent sorted.
func (b *budget) add(until time.Time, units int64) {
	i, found := slices.BinarySearchFunc(b.spent, until, func(s Spent, t time.Time) int { return s.Until.Compare(t) })
	if !found {
		b.spent = slices.Insert(b.spent, i, Spent{Until: until})
	}
	units = min(units, maxSpent-b.spent[i].Units)
	b.spent[i].Units += units
	b.total += units
}

// when returns how long from now until time alone frees room for an
// estimate of units, and false if it never does: the reservations fill
// the budget, and only a settlement frees them.
func (b *budget) when(now time.Time, units int64) (time.Duration, bool) {
	over := b.used(now) + units - b.limit
	if over <= 0 {
		return 0, true
	}
	for _, s := range b.spent {
		over -= s.Units
		if over <= 0 {
			return s.Until.Sub(now), true
		}
	}
	return 0, false
}

// String writes the budget as POOL_BUDGETS takes it.
func (b *budget) String() string { return Rate{Slots: b.limit, Per: b.window}.String() }

// checkUnits validates a request's estimate. p.mu must be held.
func (p *Pool) checkUnits(units int64) error {
	b := p.budget
	switch {
	case units < 0 || units > MaxUnits:
		return fmt.Errorf("%w: units %d: must be between 1 and %d", ErrInvalidUnits, units, int64(MaxUnits))
	case b == nil:
		return nil // units are for budgets; a pool without one ignores them
	case units == 0:
		return fmt.Errorf("%w: the pool has a budget of %v: a request must give its estimated units", ErrInvalidUnits, b)
	case units > b.limit:
		return fmt.Errorf("%w: %d units requested, the budget is %v", ErrExceedsCapacity, units, b)
	}
	return nil
}

// affords reports whether the budget lets an estimate of units be
// reserved now. p.mu must be held.
func (p *Pool) affords(units int64) bool {
	return p.budget == nil || p.budget.fits(p.opts.Now(), units)
}

// reserve counts a granted estimate. p.mu must be held.
func (p *Pool) reserve(units int64) {
	if p.budget != nil {
		p.budget.reserved += units
	}
}

// ReleaseUnits is ReleaseKey(tenant, key, n) for a grant that reserved
// reserved units and used actual: the reservation ends, and actual counts
// as spent for the window from now. Below the estimate, the rest is free
// at once; above it, the excess is spent too. Without a budget it is
// ReleaseKey. It panics as ReleaseKey does, or for negative units.
func (p *Pool) ReleaseUnits(tenant, key string, n, reserved, actual int64) []*Waiter {
	if reserved < 0 || actual < 0 {
		panic("pools: release of negative units")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release(tenant, key, n)
	if p.budget != nil {
		p.budget.settle(p.opts.Now(), reserved, min(actual, MaxUnits))
	}
	return p.grant(nil)
}

// RestoreUnits counts an estimate reserved by a grant restored with
// RestoreKey. It grants nothing.
func (p *Pool) RestoreUnits(units int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reserve(max(0, units))
}

// Spent returns the units settled in the budget's window, in slices
// sorted by when they stop counting; nil without a budget.
func (p *Pool) Spent() []Spent {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.budget == nil {
		return nil
	}
	p.budget.expire(p.opts.Now())
	return slices.Clone(p.budget.spent)
}

// RestoreSpent adds slices of spent units, as Spent returned them (by
// this pool or an earlier one), to the budget's window; those over are
// dropped. Units are clamped to 0..MaxUnits per slice. It grants nothing;
// without a budget it does nothing.
func (p *Pool) RestoreSpent(spent []Spent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.budget
	if b == nil {
		return
	}
	now := p.opts.Now()
	for _, s := range spent {
		if s.Until.After(now) && s.Units > 0 {
			// A window shortened since may not keep it longer than its own.
			b.add(minTime(s.Until, b.until(now)), min(s.Units, maxSpent))
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Settling returns how units settled now would count in the budget's
// window (see Spent), and false without a budget. A caller that must
// store a settlement before it happens stores this.
func (p *Pool) Settling(units int64) (Spent, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.budget == nil {
		return Spent{}, false
	}
	return Spent{Until: p.budget.until(p.opts.Now()), Units: min(max(0, units), MaxUnits)}, true
}

// HasBudget reports whether the pool has a usage budget.
func (p *Pool) HasBudget() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.budget != nil
}

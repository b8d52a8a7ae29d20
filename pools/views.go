package pools

import (
	"maps"
	"slices"
	"time"
)

// What a pool shows of itself: its figures, a waiter's place, when the
// next grant can come, its tenants.
// Position returns the 1-based position of a queued waiter, 0 if w is not
// queued:
//   - fifo: its place in the queue. O(n): it walks the queue from the head.
//   - lifo: its place counted from the newest. O(n), and O(1) for the
//     newest.
//   - priority: 1 + the number of queued requests with a smaller virtual
//     time (or the same and queued earlier), the exact place in service
//     order. O(log n).
//   - fair: 1 + the number of requests deficit round robin would grant
//     before it if nothing else arrived, ignoring tenant caps (a capped
//     tenant's requests are not counted; a capped waiter is placed as if
//     its tenant joined the round now). Its own tenant's requests are
//     counted exactly; another tenant's from its queued slots, so the
//     position is exact when each tenant's queued requests are of one size.
//     O(tenants queued).
//
// A position can grow: later requests of higher priority, or of a tenant
// joining the round, may be served first.
func (p *Pool) Position(w *Waiter) int {
	if w == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.pool != p || w.state != stateQueued {
		return 0
	}
	return p.q.rank(w)
}

// Stats is a snapshot of a pool's accounting.
type Stats struct {
	Capacity       int64 `json:"capacity"`
	InUse          int64 `json:"in_use"`
	Available      int64 `json:"available"` // max(0, capacity-in_use)
	QueuedRequests int   `json:"queued"`
	QueuedSlots    int64 `json:"queued_slots"`
	// Policy is "" for fifo, the default, so that a fifo pool's stats read
	// as they did before policies existed.
	Policy   Policy `json:"policy,omitempty"`
	MaxQueue int    `json:"max_queue,omitempty"`
	// OnFull is "" for refuse, the default; FailFast is set for a pool
	// without a queue.
	OnFull    OnFull `json:"on_full,omitempty"`
	FailFast  bool   `json:"fail_fast,omitempty"`
	TenantCap int64  `json:"tenant_cap,omitempty"`
	KeyCap    int64  `json:"key_cap,omitempty"`
	// Rate (e.g. "60/m"), Burst and Tokens (whole slots in the bucket now)
	// describe a start rate; omitted without one.
	Rate   string `json:"rate,omitempty"`
	Burst  int64  `json:"burst,omitempty"`
	Tokens int64  `json:"tokens,omitempty"`
	// Budget (e.g. "100000/m"), BudgetLimit and BudgetWindowMs describe
	// a usage budget; BudgetUsed is the units settled in the window now,
	// BudgetReserved the estimates of the open grants. Omitted without
	// one.
	Budget         string `json:"budget,omitempty"`
	BudgetLimit    int64  `json:"budget_limit,omitempty"`
	BudgetWindowMs int64  `json:"budget_window_ms,omitempty"`
	BudgetUsed     int64  `json:"budget_used,omitempty"`
	BudgetReserved int64  `json:"budget_reserved,omitempty"`
	// Shadow is set for a pool in shadow mode: its limits are counted, not
	// enforced, and InUse may exceed Capacity.
	Shadow bool `json:"shadow,omitempty"`
}

// Stats returns a snapshot of the pool's accounting. It is O(1); see
// Tenants for the per-tenant counts.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{
		Capacity:       p.capacity,
		InUse:          p.inUse,
		Available:      max(0, p.capacity-p.inUse),
		QueuedRequests: p.queued,
		QueuedSlots:    p.queuedSlots,
		MaxQueue:       p.opts.MaxQueue,
		TenantCap:      p.opts.TenantCap,
		KeyCap:         p.opts.KeyCap,
	}
	if p.opts.Policy != PolicyFIFO {
		s.Policy = p.opts.Policy
	}
	if p.opts.OnFull != OnFullRefuse {
		s.OnFull = p.opts.OnFull
	}
	s.FailFast = p.opts.FailFast
	s.Shadow = p.opts.Shadow
	if b := p.bucket; b != nil {
		s.Rate, s.Burst, s.Tokens = b.rate.String(), b.burst, b.tokens(p.opts.Now())
	}
	if b := p.budget; b != nil {
		b.expire(p.opts.Now())
		s.Budget, s.BudgetLimit, s.BudgetWindowMs = b.String(), b.limit, b.window.Milliseconds()
		s.BudgetUsed, s.BudgetReserved = b.total, b.reserved
	}
	return s
}

// NextGrant reports how long until time lets the next waiter in service
// order be granted, when time is all it waits for (its slots are free):
// the start rate's tokens, or the budget's window moving past units spent.
// ok is false when no waiter waits for time alone. The caller calls Refill
// after that long; nothing else wakes such a waiter.
func (p *Pool) NextGrant() (d time.Duration, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bucket == nil && p.budget == nil {
		return 0, false
	}
	w := p.q.next()
	if w == nil || p.capacity-p.inUse < w.Slots {
		return 0, false
	}
	now := p.opts.Now()
	if p.bucket != nil {
		d = p.bucket.when(now, w.Slots)
	}
	if p.budget != nil {
		b, ok := p.budget.when(now, w.Units)
		if !ok {
			return 0, false // the reservations fill the budget: a release frees them
		}
		d = max(d, b)
	}
	return d, true
}

// RetryAfter is how long, at the least, until the start rate would let a
// new request of n slots start: 0 without a rate, or when it would allow
// them now. Under the fifo policy everything queued starts first, so it
// counts the queued slots too; the other policies may serve a newcomer
// first, so it counts n alone. Slots busy are not counted: it is a lower
// bound, when the rate is all that holds a request back, exact.
func (p *Pool) RetryAfter(n int64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d time.Duration
	if p.bucket != nil && n <= p.bucket.burst {
		m := n
		if p.opts.Policy == PolicyFIFO {
			m += p.queuedSlots
		}
		d = p.bucket.when(p.opts.Now(), m)
	}
	return d
}

// RetryAfterUnits is RetryAfter, and with a budget, at the least how long
// until its window frees room for an estimate of units (0 when only a
// settlement would).
func (p *Pool) RetryAfterUnits(n, units int64) time.Duration {
	d := p.RetryAfter(n)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.budget != nil {
		if b, ok := p.budget.when(p.opts.Now(), units); ok {
			d = max(d, b)
		}
	}
	return d
}

// Tenants returns the tenants with slots held or requests queued, sorted
// by name. Weight is set under the fair policy only.
func (p *Pool) Tenants() []TenantStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]TenantStats, 0, len(p.tenants)+1)
	add := func(t *tenant) {
		if t.inUse == 0 && t.queued == 0 {
			return
		}
		s := TenantStats{Tenant: t.name, InUse: t.inUse, QueuedRequests: t.queued, QueuedSlots: t.queuedSlots}
		if p.opts.Policy == PolicyFair {
			s.Weight = p.weightOf(t.name)
		}
		out = append(out, s)
	}
	add(&p.anon) // "" sorts first
	for _, name := range slices.Sorted(maps.Keys(p.tenants)) {
		add(p.tenants[name])
	}
	return out
}

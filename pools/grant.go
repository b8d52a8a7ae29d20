package pools

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Admission and grants: the checks a request passes, the tenants' and the
// rate's accounts, and granting from the head of the queue.

// check validates a request of n slots. p.mu must be held.
func (p *Pool) check(n int64) error {
	if n <= 0 {
		return fmt.Errorf("%w: %d slots requested, must be at least 1", ErrInvalidSlots, n)
	}
	if n > p.capacity {
		return p.exceeds(n)
	}
	if c := p.opts.TenantCap; c > 0 && n > c {
		return fmt.Errorf("%w: %d slots requested, tenant cap is %d", ErrExceedsCapacity, n, c)
	}
	if c := p.opts.KeyCap; c > 0 && n > c {
		return fmt.Errorf("%w: %d slots requested, key cap is %d", ErrExceedsCapacity, n, c)
	}
	if p.bucket != nil && n > p.bucket.burst {
		return fmt.Errorf("%w: %d slots requested, the rate %v allows at most %d at once (its burst)", ErrExceedsCapacity, n, p.bucket.rate, p.bucket.burst)
	}
	return nil
}

func (p *Pool) exceeds(n int64) error {
	return fmt.Errorf("%w: %d slots requested, capacity is %d", ErrExceedsCapacity, n, p.capacity)
}

// room reports ErrQueueFull if the queue cannot take one more request,
// and ErrWouldWait if the pool has none (FailFast). p.mu must be held.
func (p *Pool) room() error {
	if p.opts.FailFast {
		return fmt.Errorf("%w: the pool has no queue (fail fast): %d slots free, %d in use", ErrWouldWait, max(0, p.capacity-p.inUse), p.inUse)
	}
	if m := p.opts.MaxQueue; m > 0 && p.queued >= m {
		return fmt.Errorf("%w: %d requests queued, max_queue is %d", ErrQueueFull, p.queued, m)
	}
	return nil
}

// grantable reports whether a new request may be granted at once: it would
// be the next in service order, so it jumps nobody the policy puts first,
// and its slots are free. p.mu must be held.
func (p *Pool) grantable(r Request, vt int64) bool {
	return p.capacity-p.inUse >= r.Slots && p.q.first(p.lookup(r.Tenant), r.Key, r.Slots, vt) && p.tokens(r.Slots) && p.affords(r.Units)
}

// checkRequest validates r's slots and units. p.mu must be held.
func (p *Pool) checkRequest(r Request) error {
	if err := p.check(r.Slots); err != nil {
		return err
	}
	return p.checkUnits(r.Units)
}

// granted returns r's waiter, granted at once. p.mu must be held.
func (p *Pool) granted(r Request) *Waiter {
	p.start(r.Tenant, r.Key, r.Slots)
	p.reserve(r.Units)
	return &Waiter{Slots: r.Slots, Units: r.Units, Value: r.Value, Tenant: r.Tenant, Key: r.Key, Priority: r.Priority, pool: p, state: stateGranted, Started: p.startedAt()}
}

// tokens reports whether the start rate allows n slots now. p.mu must be
// held.
func (p *Pool) tokens(n int64) bool {
	return p.bucket == nil || p.bucket.allows(p.opts.Now(), n)
}

// start counts n slots granted to the named tenant and key: in use, and
// taken from the start rate's bucket. p.mu must be held.
func (p *Pool) start(name, key string, n int64) {
	p.take(name, key, n)
	if f, ok := p.q.(*fairQueue); ok {
		f.grantedAtOnce(p.lookup(name), key)
	}
	if p.bucket != nil {
		p.bucket.take(n)
	}
}

// startedAt is when the start rate last counted its tokens: the time of
// the grant that just took them. Zero without a rate. p.mu must be held.
func (p *Pool) startedAt() time.Time {
	if p.bucket == nil {
		return time.Time{}
	}
	return p.bucket.at
}

// vtime is the virtual time of a new request under the priority policy:
// its age since the pool was made, less one AgingStep per priority level.
// Smaller is served first, so a request that waited k steps longer than one
// of k levels higher is served no later. Priorities too large to scale are
// clamped; they still order above or below every sane one. It is 0 under
// other policies, which never read the clock. p.mu must be held.
func (p *Pool) vtime(priority int) int64 {
	if p.opts.Policy != PolicyPriority {
		return 0
	}
	const limit = math.MaxInt64 / 4 // leaves room for ±292 years of age
	step := int64(p.opts.AgingStep)
	var boost int64
	switch pr := int64(priority); {
	case pr > limit/step:
		boost = limit
	case pr < -limit/step:
		boost = -limit
	default:
		boost = pr * step
	}
	return int64(p.opts.Now().Sub(p.epoch)) - boost
}

func (p *Pool) weightOf(name string) int {
	if w, ok := p.opts.Weights[name]; ok {
		return w
	}
	return p.opts.DefaultWeight
}

// lookup returns the tenant of that name, or nil if it holds and queues
// nothing. p.mu must be held.
func (p *Pool) lookup(name string) *tenant {
	if name == "" {
		return &p.anon
	}
	return p.tenants[name]
}

// tenant returns the tenant of that name, creating it if needed. p.mu must
// be held.
func (p *Pool) tenant(name string) *tenant {
	if t := p.lookup(name); t != nil {
		return t
	}
	if p.tenants == nil {
		p.tenants = make(map[string]*tenant)
	}
	t := &tenant{name: name}
	p.tenants[name] = t
	return t
}

// forget drops t from the map once it holds and queues nothing, so that a
// stream of one-off tenant keys does not grow the pool. p.mu must be held.
func (p *Pool) forget(t *tenant) {
	if t != &p.anon && t.inUse == 0 && t.queued == 0 {
		delete(p.tenants, t.name)
	}
}

// take counts n more slots in use by the named tenant and key. p.mu must
// be held.
func (p *Pool) take(name, key string, n int64) {
	p.inUse += n
	t := p.tenant(name)
	t.inUse += n
	p.q.took(t, key, n)
}

// release counts n slots less in use by the named tenant, or panics. The
// caller grants. p.mu must be held.
func (p *Pool) release(name, key string, n int64) {
	if p.checkRelease(name, key, n) {
		p.forget(p.untake(name, key, n))
	}
}

// checkRelease panics if the named tenant and key do not hold n slots,
// and reports whether there is anything to release (n > 0). p.mu must be
// held.
func (p *Pool) checkRelease(name, key string, n int64) bool {
	if n < 0 {
		panic("pools: release of negative slots")
	}
	if n > p.inUse {
		panic(fmt.Sprintf("pools: released %d slots, %d in use", n, p.inUse))
	}
	t := p.lookup(name)
	var held int64
	if t != nil {
		held = t.inUse
	}
	if n > held {
		panic(fmt.Sprintf("pools: released %d slots for tenant %q, which holds %d", n, name, held))
	}
	if n == 0 {
		return false
	}
	if p.opts.Policy == PolicyFair {
		if s := shareOf(t, key); s == nil || n > s.inUse {
			panic(fmt.Sprintf("pools: released %d slots for tenant %q key %q, which holds fewer", n, name, key))
		}
	}
	return true
}

// untake counts n checked slots less in use by the named tenant and key,
// keeping the tenant's entry (forget drops it, take undoes this), and
// returns the tenant. p.mu must be held.
func (p *Pool) untake(name, key string, n int64) *tenant {
	t := p.lookup(name)
	p.inUse -= n
	t.inUse -= n
	p.q.took(t, key, -n)
	return t
}

// push queues a new waiter. p.mu must be held.
func (p *Pool) push(r Request, vt int64) *Waiter {
	w := &Waiter{}
	p.pushWaiter(w, r, vt)
	return w
}

// pushWaiter queues w, a fresh or recycled waiter, for r. p.mu must be held.
func (p *Pool) pushWaiter(w *Waiter, r Request, vt int64) {
	p.seq++
	t := p.tenant(r.Tenant)
	*w = Waiter{
		Slots: r.Slots, Units: r.Units, Value: r.Value, Tenant: r.Tenant, Key: r.Key, Priority: r.Priority,
		pool: p, state: stateQueued, ready: w.ready, seq: p.seq, vt: vt, t: t,
	}
	if p.opts.Policy == PolicyFair {
		w.vt = p.stamp() // for StarvationAge and Scheduler's ages
	}
	t.queued++
	t.queuedSlots += r.Slots
	p.queued++
	p.queuedSlots += r.Slots
	p.q.push(w)
}

// acquirers recycles Acquire's private waiters with their ready channels
// (capacity 1, drained before reuse), so a blocked Acquire allocates no
// waiter and no channel.
var acquirers = sync.Pool{New: func() any { return &Waiter{ready: make(chan struct{}, 1)} }}

func recycle(w *Waiter) {
	*w = Waiter{ready: w.ready}
	acquirers.Put(w)
}

// unlink takes a queued waiter out of the queue; the caller sets its new
// state and, unless granted, forgets its tenant if idle. p.mu must be held.
func (p *Pool) unlink(w *Waiter, granted bool) {
	t := w.t
	t.queued--
	t.queuedSlots -= w.Slots
	p.queued--
	p.queuedSlots -= w.Slots
	p.q.remove(w, granted)
	w.t = nil
}

// remove cancels a queued waiter and grants the waiters that now fit. p.mu
// must be held.
func (p *Pool) remove(w *Waiter) []*Waiter {
	// Under fifo and lifo only the next waiter's removal can let others
	// through; the other policies' next waiter is cheaper to recompute
	// than to predict.
	wasNext := true
	switch p.opts.Policy {
	case PolicyFIFO:
		wasNext = p.waiters.Front() == w.elem
	case PolicyLIFO:
		wasNext = p.waiters.Back() == w.elem
	}
	t := w.t
	p.unlink(w, false)
	p.forget(t)
	w.state = stateCancelled
	if !wasNext {
		// The head is unchanged and still does not fit.
		return nil
	}
	return p.grant(nil)
}

// grant grants waiters in service order while they fit, appending them to
// out. Waiters created by Acquire are woken through their ready channel
// instead of being returned. p.mu must be held.
func (p *Pool) grant(out []*Waiter) []*Waiter {
	for {
		w := p.q.next()
		if w == nil {
			return out // Nobody waiting, or every waiting tenant at its cap.
		}
		if p.capacity-p.inUse < w.Slots {
			// Not enough free slots for the next waiter. We could look
			// further down the queue for a smaller request that fits, but
			// under load that starves large requests: with capacity N, a
			// request for N slots waiting behind a steady stream of 1-slot
			// requests would never see N slots free, since a newcomer could
			// always take the one slot just released. So nobody is granted
			// ahead of the next waiter, and a newcomer never jumps a waiting
			// multi-slot request that the policy puts first.
			return out
		}
		if !p.tokens(w.Slots) || !p.affords(w.Units) {
			// The start rate's or the budget's turn: the next waiter goes
			// first once the bucket has its slots or the window its units
			// (NextGrant, or a settlement), and nobody jumps it.
			return out
		}
		p.reserve(w.Units)
		if p.bucket != nil {
			p.bucket.take(w.Slots)
			w.Started = p.startedAt()
		}
		p.inUse += w.Slots
		w.t.inUse += w.Slots
		p.unlink(w, true)
		w.state = stateGranted
		if w.ready != nil {
			w.ready <- struct{}{} // buffered, and empty while queued
			continue
		}
		out = append(out, w)
	}
}

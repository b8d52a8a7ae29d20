package pools

// Shadow mode (Options.Shadow) tries a pool's limits before they bite: the
// pool grants at once every request its limits would have queued or
// refused, and says on the waiter which limit held it and what the pool
// would have done (Waiter.Shadow), for the caller to count. A request that
// could never be granted (check: more slots than the capacity, a cap or
// the rate's burst allow at once) is still refused: that is no limit
// biting but a request no pool of this shape could serve.
//
// A shadow pool's slots in use may exceed its capacity, and its tenants'
// and keys' slots their caps, as after RestoreKey.
//
// Its limits are judged against the state the pool really has: the slots
// its shadow grants hold count as in use, as the capacity would have seen
// the requests it queued when it granted them. The start rate's tokens are
// taken when the bucket has them and not owed when it has not. The queue it
// would have had, for Options.MaxQueue, is the slots it holds beyond its
// capacity: exact for requests of one slot, and blind to requests only the
// rate or a cap held back. Shadow mode is set when the pool is made; a
// pool made again without it (a restart) keeps what the old one granted.

// ShadowReason names the limit that would have held a request back in a
// shadow pool. It is the reason label of the lease manager's shadow counts
// and metric: new limits add a value here and to ShadowReasons.
type ShadowReason string

const (
	// ShadowCapacity: the request's slots were not free.
	ShadowCapacity ShadowReason = "capacity"
	// ShadowRate: the start rate's bucket did not hold its slots.
	ShadowRate ShadowReason = "rate"
	// ShadowKeyLimit: its fairness key (fair policy) held Options.KeyCap.
	ShadowKeyLimit ShadowReason = "key_limit"
	// ShadowTenantCap: its tenant (fair policy) held Options.TenantCap.
	ShadowTenantCap ShadowReason = "tenant_cap"
	// ShadowBudget: the usage budget's window had no room for its
	// estimate (Options.Budget).
	ShadowBudget ShadowReason = "budget"
)

// ShadowReasons lists every ShadowReason, in the order views show them.
var ShadowReasons = []ShadowReason{ShadowCapacity, ShadowRate, ShadowKeyLimit, ShadowTenantCap, ShadowBudget}

// ShadowAction is what a pool out of shadow mode would have done with a
// request its limits held back.
type ShadowAction string

const (
	// ShadowQueued: queued it.
	ShadowQueued ShadowAction = "queued"
	// ShadowWouldWait: refused it with ErrWouldWait (a pool without a
	// queue, or a try: TryAcquireRequest).
	ShadowWouldWait ShadowAction = "would_wait"
	// ShadowQueueFull: refused it with ErrQueueFull (Options.MaxQueue).
	ShadowQueueFull ShadowAction = "queue_full"
	// ShadowDropped: queued it in a full drop_oldest queue, dropping the
	// waiter that came first.
	ShadowDropped ShadowAction = "dropped"
)

// ShadowActions lists every ShadowAction, in the order views show them.
var ShadowActions = []ShadowAction{ShadowQueued, ShadowWouldWait, ShadowQueueFull, ShadowDropped}

// Shadowed says why a shadow pool granted a request its limits would have
// held back; the zero value means they would have granted it too.
type Shadowed struct {
	Reason ShadowReason
	Action ShadowAction
}

// Shadow reports whether the pool is in shadow mode.
func (p *Pool) Shadow() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opts.Shadow
}

// grantShadow grants r at once in a shadow pool, where its limits would
// have held it back; try says the request would not have waited
// (TryAcquireRequest). r passed check. p.mu must be held.
func (p *Pool) grantShadow(r Request, try bool) *Waiter {
	why := Shadowed{Reason: p.heldBy(p.lookup(r.Tenant), r.Key, r.Slots, r.Units), Action: p.wouldDo(try)}
	p.take(r.Tenant, r.Key, r.Slots)
	if f, ok := p.q.(*fairQueue); ok {
		f.grantedAtOnce(p.lookup(r.Tenant), r.Key)
	}
	p.spend(r.Slots)
	p.reserve(r.Units) // settled at release like any grant's: the window counts what was used
	return &Waiter{Slots: r.Slots, Units: r.Units, Value: r.Value, Tenant: r.Tenant, Key: r.Key, Priority: r.Priority, pool: p, state: stateGranted,
		Started: p.startedAt(), Shadow: why}
}

// spend takes n slots' tokens from the start rate's bucket if it holds
// them: a shadow grant owes none it does not have. p.mu must be held.
func (p *Pool) spend(n int64) {
	if p.bucket != nil && p.tokens(n) {
		p.bucket.take(n)
	}
}

// heldBy names the first limit that holds back a request of n slots and
// an estimate of units of tenant t (nil: one holding and queueing nothing)
// with key key: a cap, the capacity, else the rate, else the budget.
// Being queued behind others is none: a shadow pool queues nobody. p.mu
// must be held.
func (p *Pool) heldBy(t *tenant, key string, n, units int64) ShadowReason {
	o := &p.opts
	if _, ok := p.q.(*fairQueue); ok {
		var sIn, tIn int64
		if s := shareOf(t, key); s != nil {
			sIn = s.inUse
		}
		if t != nil {
			tIn = t.inUse
		}
		switch {
		case o.KeyCap > 0 && sIn+n > o.KeyCap:
			return ShadowKeyLimit
		case o.TenantCap > 0 && tIn+n > o.TenantCap:
			return ShadowTenantCap
		}
	}
	if p.capacity-p.inUse >= n {
		if !p.tokens(n) {
			return ShadowRate
		}
		if !p.affords(units) {
			return ShadowBudget
		}
	}
	return ShadowCapacity
}

// wouldDo is what the pool out of shadow mode would have done with a
// request its limits held back; try: a request that would not wait.
// p.mu must be held.
func (p *Pool) wouldDo(try bool) ShadowAction {
	if try || p.opts.FailFast {
		return ShadowWouldWait
	}
	if m := p.opts.MaxQueue; m > 0 && p.inUse-p.capacity >= int64(m) {
		if p.opts.OnFull == OnFullDropOldest {
			return ShadowDropped
		}
		return ShadowQueueFull
	}
	return ShadowQueued
}

package pools

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Policy is the order in which a pool serves its queued requests.
type Policy string

const (
	// PolicyFIFO serves requests strictly in arrival order. It is the default.
	PolicyFIFO Policy = "fifo"
	// PolicyPriority serves higher priorities first, with aging.
	PolicyPriority Policy = "priority"
	// PolicyFair shares the slots across tenants by weight (deficit round robin).
	PolicyFair Policy = "fair"
	// PolicyLIFO serves the newest request first.
	PolicyLIFO Policy = "lifo"
)

// OnFull is what a pool does with a request that would have to wait when
// its queue already holds Options.MaxQueue requests.
type OnFull string

const (
	// OnFullRefuse refuses the newcomer with ErrQueueFull. It is the default.
	OnFullRefuse OnFull = "refuse"
	// OnFullDropOldest drops the waiter that arrived first (whatever the
	// policy's order) to make room, and queues the newcomer: the queue is
	// a ring buffer of the newest MaxQueue requests. Admit applies it.
	OnFullDropOldest OnFull = "drop_oldest"
)

// Defaults and limits of Options.
const (
	DefaultAgingStep = 10 * time.Second
	// MaxWeight bounds a fair weight: weights are ratios, and bounding them
	// keeps the deficit arithmetic far from overflow.
	MaxWeight = 1_000_000
	// MaxCapacity is the largest capacity callers should give a pool
	// (2^40 slots): the lease manager and its configuration refuse more, so
	// that sums of slots (queued_slots over millions of waiters) cannot
	// overflow an int64.
	MaxCapacity = 1 << 40
	// MaxQuantum bounds Options.Quantum: with MaxWeight it keeps a turn's
	// credit under 2^40 slots.
	MaxQuantum = 1_000_000
)

var (
	// ErrQueueFull is returned (wrapped) by EnqueueRequest, Enqueue and
	// Acquire when the request cannot be granted at once and the queue
	// already holds Options.MaxQueue requests.
	ErrQueueFull = errors.New("pools: queue full")
	// ErrWouldWait is returned (wrapped) by TryAcquireRequest when the
	// request cannot be granted at once.
	ErrWouldWait = errors.New("pools: request would wait")
	// ErrInvalidOptions is returned (wrapped) by NewWithOptions.
	ErrInvalidOptions = errors.New("pools: invalid options")
	// ErrDropped wakes a blocked Acquire whose waiter Admit dropped to make
	// room in a full drop_oldest queue.
	ErrDropped = errors.New("pools: dropped from a full queue for a newer request")
)

// Options configure a pool made by NewWithOptions. The zero value is a
// strict FIFO pool with an unbounded queue, the same as New.
type Options struct {
	// Policy is the queue's service order; "" means PolicyFIFO.
	Policy Policy
	// AgingStep (priority): waiting this long is worth one priority level.
	// 0 means DefaultAgingStep.
	AgingStep time.Duration
	// Weights (fair): name -> weight, each in 1..MaxWeight. A share's
	// weight is that of its key (Request.Key), or of its tenant for
	// requests without a key; its credit per turn is weight × Quantum
	// slots. Accepted and ignored under the other policies.
	Weights map[string]int
	// DefaultWeight (fair) is the weight of names not in Weights; 0 means 1.
	DefaultWeight int
	// Quantum (fair only) is the slots of credit a share of weight 1 gets
	// per turn, 1..MaxQuantum; 0 means 1.
	Quantum int64
	// StarvationAge (fair only), if positive: a request at the head of its
	// share, in the round (under its caps), that has waited this long goes
	// next whatever its share's credit (the oldest such first). It is
	// looked at whenever the pool grants (a new request, a release, a
	// cancel, a capacity change), not on a timer.
	StarvationAge time.Duration
	// TenantCap (fair only) is the most slots one tenant may hold at once;
	// 0 means no cap. A request for more than TenantCap slots is refused
	// with ErrExceedsCapacity, since it could never be granted.
	TenantCap int64
	// KeyCap (fair only) is the most slots one share (one tenant's requests
	// with one key, or without a key) may hold at once; 0 means no cap. A
	// share at its cap is passed over, blocking nobody. A request for more
	// than KeyCap slots is refused with ErrExceedsCapacity.
	KeyCap int64
	// MaxQueue is the most requests the queue holds; 0 means unbounded
	// (unless FailFast).
	MaxQueue int
	// OnFull is what a full queue does with a newcomer; "" means
	// OnFullRefuse. OnFullDropOldest needs a MaxQueue.
	OnFull OnFull
	// FailFast makes a pool without a queue: a request that cannot be
	// granted at once is refused with ErrWouldWait, as TryAcquireRequest
	// refuses it. Not with MaxQueue or OnFullDropOldest.
	FailFast bool
	// Rate, if set, is a start rate: every grant also takes its slots from
	// a token bucket refilled at Rate, holding at most Burst slots (0: one
	// second's worth, at least 1). The bucket starts empty. A request for
	// more than Burst slots is refused with ErrExceedsCapacity. A waiter
	// that fits the capacity but not the bucket is granted by Refill once
	// NextGrant has passed: the caller owns the timer.
	Rate  Rate
	Burst int64
	// Budget, if set, is a usage budget: Budget.Slots units per
	// Budget.Per, a sliding window (budget.go). Every request must then
	// give its estimate (Request.Units), reserved while it holds its
	// slots and settled by ReleaseUnits. A waiter that fits the capacity
	// but not the budget is granted by a release, or by Refill once
	// NextGrant has passed.
	Budget Rate
	// Shadow puts the pool in shadow mode (shadow.go): it grants at once
	// what its limits would have queued or refused, saying so on the
	// waiter (Waiter.Shadow), and refuses only what it could never grant.
	Shadow bool
	// Now is the clock that dates requests for aging; nil means time.Now.
	Now func() time.Time
}

// normalize validates o and fills in its defaults. The returned Options own
// a copy of Weights.
func (o Options) normalize() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return Options{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	switch o.Policy {
	case "":
		o.Policy = PolicyFIFO
	case PolicyFIFO, PolicyLIFO, PolicyPriority, PolicyFair:
	default:
		return bad("unknown policy %q (want %q, %q, %q or %q)", o.Policy, PolicyFIFO, PolicyLIFO, PolicyPriority, PolicyFair)
	}
	if o.AgingStep < 0 {
		return bad("aging step %v is negative", o.AgingStep)
	}
	if o.AgingStep == 0 {
		o.AgingStep = DefaultAgingStep
	}
	for _, tenant := range slices.Sorted(maps.Keys(o.Weights)) {
		if w := o.Weights[tenant]; w <= 0 || w > MaxWeight {
			return bad("weight %d of tenant %q is not in 1..%d", w, tenant, MaxWeight)
		}
	}
	o.Weights = maps.Clone(o.Weights)
	if o.DefaultWeight < 0 || o.DefaultWeight > MaxWeight {
		return bad("default weight %d is not in 1..%d", o.DefaultWeight, MaxWeight)
	}
	burst, err := normalizeRate(o.Rate, o.Burst)
	if err != nil {
		return bad("%v", err)
	}
	if o.Budget != (Rate{}) {
		if _, err := newBudget(o.Budget); err != nil {
			return bad("%v", err)
		}
	}
	o.Burst = burst
	if o.DefaultWeight == 0 {
		o.DefaultWeight = 1
	}
	if o.TenantCap < 0 {
		return bad("tenant cap %d is negative", o.TenantCap)
	}
	if o.TenantCap > 0 && o.Policy != PolicyFair {
		// Passing over a capped tenant needs per-tenant queues, which only
		// the fair policy keeps; ignoring the cap would break its promise.
		return bad("tenant cap needs policy %q, not %q", PolicyFair, o.Policy)
	}
	if o.KeyCap < 0 {
		return bad("key cap %d is negative", o.KeyCap)
	}
	if o.Quantum < 0 || o.Quantum > MaxQuantum {
		return bad("quantum %d is not in 1..%d", o.Quantum, MaxQuantum)
	}
	if o.StarvationAge < 0 {
		return bad("starvation age %v is negative", o.StarvationAge)
	}
	if o.Policy != PolicyFair {
		// Passing over a capped key needs per-key queues, which only the
		// fair policy keeps, as do quanta and ages of ready requests.
		switch {
		case o.KeyCap > 0:
			return bad("key cap needs policy %q, not %q", PolicyFair, o.Policy)
		case o.Quantum > 0:
			return bad("quantum needs policy %q, not %q", PolicyFair, o.Policy)
		case o.StarvationAge > 0:
			return bad("starvation age needs policy %q, not %q", PolicyFair, o.Policy)
		}
	}
	if o.Quantum == 0 {
		o.Quantum = 1
	}
	if o.MaxQueue < 0 {
		return bad("max queue %d is negative", o.MaxQueue)
	}
	switch o.OnFull {
	case "":
		o.OnFull = OnFullRefuse
	case OnFullRefuse:
	case OnFullDropOldest:
		if o.MaxQueue == 0 {
			// An unbounded queue is never full; a pool without one
			// (FailFast) has nobody to drop.
			return bad("on full %q needs a max queue", o.OnFull)
		}
	default:
		return bad("unknown on full %q (want %q or %q)", o.OnFull, OnFullRefuse, OnFullDropOldest)
	}
	if o.FailFast && o.MaxQueue != 0 {
		return bad("fail fast (no queue) with max queue %d", o.MaxQueue)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// CheckRate validates a start rate and its burst (see Options.Rate), and
// returns the burst with its default filled in: one second's worth, at
// least 1. The zero Rate with burst 0 is no rate, and valid.
func CheckRate(r Rate, burst int64) (int64, error) { return normalizeRate(r, burst) }

// normalizeRate is CheckRate.
func normalizeRate(r Rate, burst int64) (int64, error) {
	if r == (Rate{}) {
		if burst != 0 {
			return 0, fmt.Errorf("burst %d without a rate", burst)
		}
		return 0, nil
	}
	if r.Slots <= 0 || r.Per <= 0 {
		return 0, fmt.Errorf("rate %v: slots and period must be positive", r)
	}
	if burst < 0 {
		return 0, fmt.Errorf("burst %d is negative", burst)
	}
	if burst == 0 {
		// One second's worth, clamped so that the conversion cannot
		// overflow (newBucket then refuses what is too large).
		burst = max(1, int64(min(float64(r.Slots)*float64(time.Second)/float64(r.Per), 1<<62)))
	}
	if _, err := newBucket(r, burst, time.Time{}); err != nil {
		return 0, err
	}
	return burst, nil
}

// Request is a request for slots.
type Request struct {
	Slots int64
	// Priority (priority policy): higher is served first, e.g. low -1,
	// normal 0, high 1. Ignored by the other policies.
	Priority int
	// Tenant: every policy counts slots held and queued per tenant (see
	// Pool.Tenants); "" is a tenant too. The fair policy shares by it
	// when Key is "".
	Tenant string
	// Key (fair policy) is the fairness key: the fair policy shares the
	// slots across the keys of a tenant, and KeyCap caps each. "" is the
	// tenant's requests without a key. Ignored by the other policies.
	Key string
	// Units is the request's estimate of its usage, for a pool with a
	// budget (Options.Budget), which requires it; ignored by the others.
	Units int64
	// Value is the caller's, opaque to the pool.
	Value any
}

// TenantStats is a snapshot of one tenant's accounting.
type TenantStats struct {
	Tenant         string `json:"tenant"`
	Weight         int    `json:"weight,omitempty"` // fair policy only
	InUse          int64  `json:"in_use"`
	QueuedRequests int    `json:"queued"`
	QueuedSlots    int64  `json:"queued_slots"`
}

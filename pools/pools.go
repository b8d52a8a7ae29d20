package pools

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

var (
	// ErrInvalidSlots is returned (wrapped) for a request of zero or fewer slots.
	ErrInvalidSlots = errors.New("pools: invalid slot count")
	// ErrExceedsCapacity is returned (wrapped) for a request of more slots
	// than the pool's capacity, or than Options.TenantCap: such a request
	// could never be granted.
	ErrExceedsCapacity = errors.New("pools: request exceeds capacity")
)

// waiterState is where a Waiter is in its life. It only ever moves from
// stateQueued to one of the other three, under Pool.mu.
type waiterState uint8

const (
	stateQueued    waiterState = iota // in the pool's queue
	stateGranted                      // slots counted in Pool.inUse; the owner must Release them
	stateCancelled                    // removed by Cancel (or by Acquire giving up)
	stateRejected                     // removed by SetCapacity (Slots > capacity), SetRate, or Admit (dropped)
)

// Waiter is one request. Value is the caller's, opaque to the pool. Tenant,
// Key and Priority are copied from the Request and must not be changed: a
// granted waiter's slots are given back with
// ReleaseKey(w.Tenant, w.Key, w.Slots).
type Waiter struct {
	Slots    int64
	Value    any
	Tenant   string
	Key      string
	Priority int
	// Units is the request's estimate, reserved from the pool's budget
	// while granted (Request.Units).
	Units int64
	// Started is when a pool with a start rate took the waiter's tokens,
	// on the pool's clock (Options.Now): the time the rate was counted
	// at, however late the caller reads a clock of its own. Zero without
	// a rate.
	Started time.Time
	// Shadow, for a waiter a shadow pool granted (Options.Shadow), names
	// the limit that would have held it back and what the pool would have
	// done; zero when its limits would have granted it too.
	Shadow Shadowed

	pool *Pool
	// elem is w's element in Pool.waiters (fifo) or in its share's queue
	// (fair); non-nil exactly while queued under those policies.
	elem *list.Element
	// ready gets one token when the waiter leaves the queue by a grant or
	// a rejection. It is nil unless the waiter was created by Acquire; such
	// waiters are private to Acquire, never returned to callers, and
	// recycled with their channel (see acquirers).
	ready chan struct{}
	seq   uint64 // enqueue order, strictly increasing along the queue
	// vt is, under priority, w's virtual time (Pool.vtime); under fair,
	// when w was queued (Pool.stamp).
	vt int64
	t  *tenant // w's tenant while queued, else nil

	// priority: w's node in priorityQueue's treap.
	left, right *Waiter
	size        int32 // of the subtree rooted at w

	state waiterState
}

// Granted reports whether w has been granted.
func (w *Waiter) Granted() bool {
	if w == nil || w.pool == nil {
		return false
	}
	w.pool.mu.Lock()
	defer w.pool.mu.Unlock()
	return w.state == stateGranted
}

// Pool accounts for the slots of one named pool and queues the requests
// that cannot be granted yet.
type Pool struct {
	mu sync.Mutex

	// Invariants, holding whenever mu is not held:
	//   - 0 <= inUse, and inUse <= capacity except after Restore, a
	//     SetCapacity shrink or a shadow grant (shadow.go); while inUse > capacity nothing is granted, since
	//     a grant of n needs capacity-inUse >= n > 0.
	//   - waiters are granted only as q.next() names them, and q.next(),
	//     when not nil, does not fit (capacity-inUse < Slots): every
	//     operation that frees slots or changes the queue grants before
	//     returning. Exception: a RestoreKey that caps a fair share may
	//     leave a grantable waiter for the next Release, Cancel or
	//     SetCapacity (RestoreFor cannot return grants).
	//   - every queued waiter has 0 < Slots <= capacity (and <= TenantCap,
	//     KeyCap).
	//   - queued == number of queued waiters; queuedSlots == sum of their
	//     Slots, kept so Stats is O(1).
	//   - inUse == sum of tenant.inUse over anon and tenants; the same for
	//     queued and queuedSlots.
	capacity    int64
	inUse       int64
	queued      int
	queuedSlots int64
	waiters     list.List // fifo, lifo: the queue in arrival order, of *Waiter; empty under other policies
	seq         uint64    // last Waiter.seq handed out

	opts   Options   // normalized; only SetRate changes it (Rate, Burst)
	bucket *bucket   // the start rate's tokens; nil without a rate
	budget *budget   // the usage budget; nil without one
	q      queue     // the policy's service order
	epoch  time.Time // dates of priorities and of StarvationAge count from here

	// anon is the tenant "", kept outside the map so that requests without
	// a tenant cost no lookup or allocation. tenants holds every other
	// tenant with slots held or requests queued, and no others.
	anon    tenant
	tenants map[string]*tenant
}

// tenant is the accounting of one tenant.
type tenant struct {
	name string

	// inUse >= 0 and, under the fair policy with a cap, inUse <= TenantCap
	// except after RestoreFor. queued and queuedSlots count the queued
	// waiters whose tenant this is.
	inUse       int64
	queued      int
	queuedSlots int64

	// Fair policy only: this tenant's shares (see fairQueue) with slots
	// held or requests queued: own for requests without a key, keyed by
	// key for the others; shares lists them all in the order they came.
	own    *share
	keyed  map[string]*share
	shares list.List
}

// queue is a policy's service order over the queued waiters. Pool keeps
// the counts; a queue only orders. All methods run under Pool.mu.
type queue interface {
	// first reports whether a new request of n slots from t (nil: a tenant
	// with nothing held or queued) with fairness key key would be the next
	// in service order, capacity aside, were it queued now. vt is its
	// virtual time.
	first(t *tenant, key string, n int64, vt int64) bool
	// push queues a new waiter; w.t is set and already counts it.
	push(w *Waiter)
	// remove takes a queued waiter out. granted reports that w was the
	// waiter next() named and its slots are now counted in its tenant.
	remove(w *Waiter, granted bool)
	// next returns the next waiter in service order, or nil if no waiter
	// may be granted (the queue is empty, or every tenant is at its cap).
	next() *Waiter
	// took is called after t's slots in use of key changed by n (negative:
	// given back) other than by a grant from the queue: a grant at once, a
	// RestoreFor, a release. t.inUse already counts it.
	took(t *tenant, key string, n int64)
	// rank returns the 1-based position of a queued waiter (see Position).
	rank(w *Waiter) int
	// each calls f for every queued waiter. f must not change the queue.
	each(f func(*Waiter))
}

// New returns a strict FIFO pool of the given capacity with no slots in
// use. It panics if capacity is negative. A pool of capacity 0 rejects every
// request with ErrExceedsCapacity.
func New(capacity int64) *Pool {
	if capacity < 0 {
		panic("pools: capacity < 0")
	}
	p, _ := NewWithOptions(capacity, Options{})
	return p
}

// NewWithOptions returns a pool of the given capacity with no slots in use,
// serving its queue as o says. It returns an error wrapping
// ErrInvalidOptions for a negative capacity or invalid options.
func NewWithOptions(capacity int64, o Options) (*Pool, error) {
	if capacity < 0 {
		return nil, fmt.Errorf("%w: capacity %d is negative", ErrInvalidOptions, capacity)
	}
	o, err := o.normalize()
	if err != nil {
		return nil, err
	}
	p := &Pool{capacity: capacity, opts: o}
	if o.Rate != (Rate{}) {
		if p.bucket, err = newBucket(o.Rate, o.Burst, o.Now()); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	}
	if o.Budget != (Rate{}) {
		if p.budget, err = newBudget(o.Budget); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	}
	switch o.Policy {
	case PolicyFIFO:
		p.q = fifoQueue{p}
	case PolicyLIFO:
		p.q = lifoQueue{fifoQueue{p}}
	case PolicyPriority:
		p.q = &priorityQueue{}
		p.epoch = o.Now()
	case PolicyFair:
		p.epoch = o.Now()
		p.q = &fairQueue{p: p}
	}
	return p, nil
}

// Policy returns the pool's queue policy.
func (p *Pool) Policy() Policy { return p.opts.Policy }

// Options returns the pool's options with their defaults filled in.
func (p *Pool) Options() Options {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.opts
	o.Weights = maps.Clone(o.Weights)
	return o
}

// Enqueue is EnqueueRequest(Request{Slots: n, Value: value}).
func (p *Pool) Enqueue(n int64, value any) (w *Waiter, granted bool, position int, err error) {
	return p.EnqueueRequest(Request{Slots: n, Value: value})
}

// EnqueueRequest grants r at once when it would be the next in service
// order and its slots are free (granted is true and w, already granted, is
// returned), or in a shadow pool (Options.Shadow: w.Shadow says why its
// limits would have held it back); otherwise it queues a waiter (granted
// is false). Under fifo a
// request is granted at once only when nobody is waiting. position is the
// waiter's position (see Position), 0 when granted.
//
// A granted waiter's slots must eventually be given back with
// ReleaseFor(w.Tenant, w.Slots). A queued waiter is later returned by
// ReleaseFor, Cancel or SetCapacity as granted, or by SetCapacity as
// rejected, unless the caller cancels it.
//
// It fails with an error wrapping ErrInvalidSlots or ErrExceedsCapacity
// for a request that could never be granted, with ErrQueueFull when r
// would have to wait and the queue holds Options.MaxQueue requests, and
// with ErrWouldWait when r would have to wait in a FailFast pool. It drops
// nobody, whatever Options.OnFull says: it could not hand back the waiter
// it dropped. Admit applies OnFull.
func (p *Pool) EnqueueRequest(r Request) (w *Waiter, granted bool, position int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.enqueue(r)
}

// enqueue is EnqueueRequest. p.mu must be held.
func (p *Pool) enqueue(r Request) (w *Waiter, granted bool, position int, err error) {
	if err := p.checkRequest(r); err != nil {
		return nil, false, 0, err
	}
	vt := p.vtime(r.Priority)
	if p.grantable(r, vt) {
		return p.granted(r), true, 0, nil
	}
	if p.opts.Shadow {
		return p.grantShadow(r, false), true, 0, nil
	}
	if err := p.room(); err != nil {
		return nil, false, 0, err
	}
	w = p.push(r, vt)
	return w, false, p.q.rank(w), nil
}

// TryAcquire grants n slots only if that is possible right now without
// queueing (or, in a shadow pool, if n is valid), and reports whether it
// did. It returns false for an invalid or too large n.
func (p *Pool) TryAcquire(n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.check(n) != nil || p.budget != nil {
		return false
	}
	if !p.grantable(Request{Slots: n}, p.vtime(0)) {
		if p.opts.Shadow {
			p.grantShadow(Request{Slots: n}, true)
		}
		return p.opts.Shadow
	}
	p.start("", "", n)
	return true
}

// TryAcquireRequest grants r exactly when EnqueueRequest would grant it at
// once (a shadow pool grants every valid request, Waiter.Shadow saying it
// would have been refused with ErrWouldWait), and otherwise returns an error wrapping ErrWouldWait (or
// ErrInvalidSlots or ErrExceedsCapacity for a request that could never be
// granted). It never queues.
func (p *Pool) TryAcquireRequest(r Request) (*Waiter, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.checkRequest(r); err != nil {
		return nil, err
	}
	if !p.grantable(r, p.vtime(r.Priority)) {
		if p.opts.Shadow {
			return p.grantShadow(r, true), nil
		}
		return nil, fmt.Errorf("%w: %d slots requested, %d free, %d requests queued",
			ErrWouldWait, r.Slots, max(0, p.capacity-p.inUse), p.queued)
	}
	return p.granted(r), nil
}

// Acquire blocks until n slots are granted or ctx is done. On success it
// returns nil. On failure it returns ctx.Err() (or an error wrapping
// ErrInvalidSlots, ErrExceedsCapacity or ErrQueueFull) and leaves the pool
// as if it had not been called. The request has tenant "" and priority 0.
//
// When Acquire gives slots back or leaves the queue, waiters queued behind
// it by Enqueue may be granted; Acquire cannot return them, so they are only
// visible through Waiter.Granted. A pool driven by Enqueue should not also
// be used with Acquire.
func (p *Pool) Acquire(ctx context.Context, n int64) error {
	done := ctx.Done()

	p.mu.Lock()
	if err := p.checkRequest(Request{Slots: n}); err != nil {
		p.mu.Unlock()
		return err
	}
	select {
	case <-done:
		// ctx becoming done happened before we got the lock: prefer to fail
		// even though we might be able to acquire without blocking.
		p.mu.Unlock()
		return ctx.Err()
	default:
	}
	vt := p.vtime(0)
	if p.grantable(Request{Slots: n}, vt) {
		p.start("", "", n)
		p.mu.Unlock()
		return nil
	}
	if p.opts.Shadow {
		p.grantShadow(Request{Slots: n}, false)
		p.mu.Unlock()
		return nil
	}
	if err := p.room(); err != nil {
		p.mu.Unlock()
		return err
	}
	w := acquirers.Get().(*Waiter)
	p.pushWaiter(w, Request{Slots: n}, vt)
	p.mu.Unlock()

	// With a start rate, nothing but time grants a waiter the bucket holds
	// back: look again whenever the rate says so.
	var tick <-chan time.Time
	rearm := func() {
		tick = nil
		if d, ok := p.recheck(); ok {
			tick = time.After(d)
		}
	}
	rearm()
	for {
		select {
		case <-tick:
			p.Refill()
			rearm()
			continue
		case <-done:
			// The grant may have raced the cancellation: whoever granted us did
			// so under the lock, so re-check the state under it.
			p.mu.Lock()
			switch w.state {
			case stateQueued:
				p.remove(w)
			case stateGranted:
				// Granted after ctx was done. Pretend we weren't and give the
				// slots back.
				<-w.ready // sent under the lock with the state
				p.release("", "", n)
				p.grant(nil)
			case stateRejected:
				<-w.ready
			case stateCancelled:
			}
			p.mu.Unlock()
			recycle(w)
			return ctx.Err()

		case <-w.ready:
			// state was written under the lock before the token was sent and
			// no longer changes.
			state, v := w.state, w.Value
			recycle(w)
			if state == stateRejected {
				return v.(error)
			}
			// Granted. Check that ctx isn't already done.
			select {
			case <-done:
				p.Release(n)
				return ctx.Err()
			default:
			}
			return nil
		}
	}
}

// recheck is how long a blocked Acquire waits before it calls Refill: ok is
// false without a rate. When the rate is not what the next waiter waits for
// (slots busy, or others first), a release may change that without telling
// Acquire, so it looks again about once per token.
func (p *Pool) recheck() (time.Duration, bool) {
	if d, ok := p.NextGrant(); ok {
		return d, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bucket == nil {
		return 0, false // a budget's waiter is not Acquire's: it has no units
	}
	r := p.bucket.rate
	return min(max(r.Per/time.Duration(r.Slots), 10*time.Millisecond), time.Second), true
}

// Release is ReleaseFor("", n).
func (p *Pool) Release(n int64) []*Waiter {
	return p.ReleaseFor("", n)
}

// ReleaseFor is ReleaseKey(tenant, "", n).
func (p *Pool) ReleaseFor(tenant string, n int64) []*Waiter {
	return p.ReleaseKey(tenant, "", n)
}

// ReleaseKey returns n slots held by tenant under fairness key key and
// grants waiters in service order while they fit, returning them in that
// order (nil if none). It panics if n is negative, or more than the slots
// in use, in all, by tenant or (fair policy) by tenant and key.
func (p *Pool) ReleaseKey(tenant, key string, n int64) []*Waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release(tenant, key, n)
	return p.grant(nil)
}

// HandOver returns n slots held by tenant under key key and grants
// waiters in service order, as ReleaseKey does, if that grants anyone. If
// it would grant nobody, nothing changes: the slots stay in use by tenant,
// and it returns nil. The manager hands a released lease's slots to the
// next request in one store write this way, and otherwise keeps them until
// the record is deleted. It panics as ReleaseKey does.
func (p *Pool) HandOver(tenant, key string, n int64) []*Waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.checkRelease(tenant, key, n) || p.queued == 0 {
		return nil
	}
	t := p.untake(tenant, key, n)
	granted := p.grant(nil)
	if len(granted) == 0 {
		p.take(tenant, key, n)
		return nil
	}
	p.forget(t)
	return granted
}

// Cancel removes a queued waiter. removed is false when w was already
// granted (the caller owns its slots and must give them back with
// ReleaseKey(w.Tenant, w.Key, w.Slots)) or already removed. Removing the next waiter in service order may let the waiters
// behind it fit: those are granted and returned in service order.
func (p *Pool) Cancel(w *Waiter) (removed bool, granted []*Waiter) {
	if w == nil {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.pool != p {
		panic("pools: Cancel of a waiter from another pool")
	}
	if w.state != stateQueued {
		return false, nil
	}
	return true, p.remove(w)
}

// Restore is RestoreFor("", n).
func (p *Pool) Restore(n int64) {
	p.RestoreFor("", n)
}

// RestoreFor is RestoreKey(tenant, "", n).
func (p *Pool) RestoreFor(tenant string, n int64) {
	p.RestoreKey(tenant, "", n)
}

// RestoreKey adds n slots in use by tenant under fairness key key without
// queue, capacity or cap checks. The manager uses it to rebuild state from stored
// leases after a restart, before it queues requests. In use may then exceed
// capacity or the caps; nothing is granted until it is back below. It
// grants nothing itself: under the fair policy, capping a share whose
// request was next may let another waiter fit, and that waiter is granted
// by the next release, Cancel or SetCapacity. It panics if n is negative.
func (p *Pool) RestoreKey(tenant, key string, n int64) {
	if n < 0 {
		panic("pools: restore of negative slots")
	}
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.take(tenant, key, n)
}

// SetCapacity changes the capacity. Queued waiters that ask for more than c
// slots could never be granted: they are removed and returned as rejected,
// in enqueue order, for the caller to answer with an error. Then the waiters
// that now fit are granted and returned, in service order. Shrinking below
// the slots in use grants nothing until holders release enough. It panics
// if c is negative.
//
// SetCapacity walks the queue when shrinking; it is meant for rare resizes.
func (p *Pool) SetCapacity(c int64) (granted, rejected []*Waiter) {
	if c < 0 {
		panic("pools: capacity < 0")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.capacity
	p.capacity = c
	if c < old {
		rejected = p.rejectOver(c)
	}
	return p.grant(nil), rejected
}

// SetRate changes the start rate (see Options.Rate): the zero Rate, with
// burst 0, removes it; burst 0 with a rate means one second's worth. A
// pool that had no rate starts with an empty bucket, so that adding a rate
// never lets a burst through; a changed rate keeps the tokens already in
// the bucket, up to the new burst. Queued waiters that ask for more than
// the new burst could never be granted: they are removed and returned as
// rejected, in enqueue order. Then the waiters the change lets in are
// granted and returned. It returns an error wrapping ErrInvalidOptions,
// and changes nothing, for an invalid rate or burst.
func (p *Pool) SetRate(r Rate, burst int64) (granted, rejected []*Waiter, err error) {
	burst, err = normalizeRate(r, burst)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.opts.Now()
	switch {
	case r == Rate{}:
		p.bucket = nil
	case p.bucket == nil:
		if p.bucket, err = newBucket(r, burst, now); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	default:
		b, err := newBucket(r, burst, now)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
		b.units = min(p.bucket.tokens(now), burst) * b.unit // whole slots: a fraction is lost, never gained
		p.bucket = b
	}
	p.opts.Rate, p.opts.Burst = r, burst
	if p.bucket != nil {
		rejected = p.rejectOver(burst)
	}
	return p.grant(nil), rejected, nil
}

// rejectOver removes the queued waiters asking for more than limit slots,
// which could never be granted, and returns them in enqueue order; waiters
// of Acquire are woken with the error instead. p.mu must be held.
func (p *Pool) rejectOver(limit int64) (rejected []*Waiter) {
	var drop []*Waiter
	p.q.each(func(w *Waiter) {
		if w.Slots > limit {
			drop = append(drop, w)
		}
	})
	slices.SortFunc(drop, func(a, b *Waiter) int { return cmp.Compare(a.seq, b.seq) })
	for _, w := range drop {
		if p.reject(w, p.check(w.Slots)) { // names the capacity or the burst
			rejected = append(rejected, w)
		}
	}
	return rejected
}

// reject takes queued w out of the queue without a grant, for the reason
// why, and reports whether the caller must answer it: a waiter of Acquire
// is woken with why instead. p.mu must be held.
func (p *Pool) reject(w *Waiter, why error) bool {
	t := w.t
	p.unlink(w, false)
	p.forget(t)
	w.state = stateRejected
	if w.ready != nil {
		w.Value = why
		w.ready <- struct{}{}
		return false
	}
	return true
}

// Refill grants, in service order, the waiters the start rate now allows,
// and returns them (waiters of Acquire are woken instead).
func (p *Pool) Refill() []*Waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.grant(nil)
}

package pools

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
)

var (
	// ErrInvalidSlots is returned (wrapped) for a request of zero or fewer slots.
	ErrInvalidSlots = errors.New("pools: invalid slot count")
	// ErrExceedsCapacity is returned (wrapped) for a request of more slots
	// than the pool's capacity: such a request could never be granted.
	ErrExceedsCapacity = errors.New("pools: request exceeds capacity")
)

// waiterState is where a Waiter is in its life. It only ever moves from
// stateQueued to one of the other three, under Pool.mu.
type waiterState uint8

const (
	stateQueued    waiterState = iota // in Pool.waiters
	stateGranted                      // slots counted in Pool.inUse; the owner must Release them
	stateCancelled                    // removed by Cancel (or by Acquire giving up)
	stateRejected                     // removed by SetCapacity: Slots > capacity
)

// Waiter is one queued request. Value is the caller's, opaque to the pool.
type Waiter struct {
	Slots int64
	Value any

	pool  *Pool
	elem  *list.Element // non-nil exactly while state == stateQueued
	state waiterState
	// ready is closed when the waiter leaves the queue by a grant or a
	// rejection. It is nil unless the waiter was created by Acquire; such
	// waiters are private to Acquire and never returned to callers.
	ready chan struct{}
	seq   uint64 // enqueue order, strictly increasing along the queue
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
	//   - 0 <= inUse, and inUse <= capacity except after Restore or a
	//     SetCapacity shrink; while inUse > capacity nothing is granted, since
	//     a grant of n needs capacity-inUse >= n > 0.
	//   - waiters are granted only from the head of the queue, and when the
	//     queue is non-empty its head does not fit (capacity-inUse < Slots):
	//     every operation that frees slots or removes the head grants before
	//     returning.
	//   - every queued waiter has 0 < Slots <= capacity.
	//   - queuedSlots == sum of Slots over waiters, kept so Stats is O(1).
	capacity    int64
	inUse       int64
	queuedSlots int64
	waiters     list.List // of *Waiter, FIFO
	seq         uint64    // last Waiter.seq handed out
}

// New returns a pool of the given capacity with no slots in use. It panics
// if capacity is negative. A pool of capacity 0 rejects every request with
// ErrExceedsCapacity.
func New(capacity int64) *Pool {
	if capacity < 0 {
		panic("pools: capacity < 0")
	}
	return &Pool{capacity: capacity}
}

// Enqueue grants n slots at once when n are free and nobody is waiting
// (granted is true and w, already granted, is returned); otherwise it queues
// a waiter at the tail (granted is false). position is the 1-based position
// in the queue, 0 when granted.
//
// A granted waiter's slots must eventually be given back with Release. A
// queued waiter is later returned by Release, Cancel or SetCapacity as
// granted, or by SetCapacity as rejected, unless the caller cancels it.
func (p *Pool) Enqueue(n int64, value any) (w *Waiter, granted bool, position int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.check(n); err != nil {
		return nil, false, 0, err
	}
	if p.fits(n) {
		p.inUse += n
		return &Waiter{Slots: n, Value: value, pool: p, state: stateGranted}, true, 0, nil
	}
	w = p.push(n, value, nil)
	return w, false, p.waiters.Len(), nil
}

// TryAcquire grants n slots only if that is possible right now without
// queueing, and reports whether it did. It returns false for an invalid or
// too large n.
func (p *Pool) TryAcquire(n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.check(n) != nil || !p.fits(n) {
		return false
	}
	p.inUse += n
	return true
}

// Acquire blocks until n slots are granted or ctx is done. On success it
// returns nil. On failure it returns ctx.Err() (or an error wrapping
// ErrInvalidSlots or ErrExceedsCapacity) and leaves the pool as if it had
// not been called.
//
// When Acquire gives slots back or leaves the queue, waiters queued behind
// it by Enqueue may be granted; Acquire cannot return them, so they are only
// visible through Waiter.Granted. A pool driven by Enqueue should not also
// be used with Acquire.
func (p *Pool) Acquire(ctx context.Context, n int64) error {
	done := ctx.Done()

	p.mu.Lock()
	if err := p.check(n); err != nil {
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
	if p.fits(n) {
		p.inUse += n
		p.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	w := p.push(n, nil, ready)
	p.mu.Unlock()

	select {
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
			p.inUse -= n
			p.grant(nil)
		case stateRejected, stateCancelled:
		}
		p.mu.Unlock()
		return ctx.Err()

	case <-ready:
		// state was written under the lock before ready was closed and no
		// longer changes.
		if w.state == stateRejected {
			return w.Value.(error)
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

// Release returns n slots and grants waiters from the head of the queue
// while they fit, returning them in FIFO order (nil if none). It panics if n
// is negative or more than the slots in use.
func (p *Pool) Release(n int64) []*Waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n < 0 {
		panic("pools: release of negative slots")
	}
	if n > p.inUse {
		panic(fmt.Sprintf("pools: released %d slots, %d in use", n, p.inUse))
	}
	p.inUse -= n
	return p.grant(nil)
}

// Cancel removes a queued waiter. removed is false when w was already
// granted (the caller owns its slots and must Release them) or already
// removed. Removing the head waiter may let the waiters behind it fit: those
// are granted and returned in FIFO order.
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

// Restore adds n slots in use without queue or capacity checks. The manager
// uses it to rebuild state from stored leases after a restart. In use may
// then exceed capacity; nothing is granted until it is back below. It
// panics if n is negative.
func (p *Pool) Restore(n int64) {
	if n < 0 {
		panic("pools: restore of negative slots")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inUse += n
}

// SetCapacity changes the capacity. Queued waiters that ask for more than c
// slots could never be granted: they are removed and returned as rejected,
// for the caller to answer with an error. Then the waiters that now fit are
// granted and returned, in FIFO order. Shrinking below the slots in use
// grants nothing until holders release enough. It panics if c is negative.
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
		for e := p.waiters.Front(); e != nil; {
			w := e.Value.(*Waiter)
			e = e.Next()
			if w.Slots <= c {
				continue
			}
			p.unlink(w)
			w.state = stateRejected
			if w.ready != nil {
				w.Value = p.exceeds(w.Slots)
				close(w.ready)
				continue
			}
			rejected = append(rejected, w)
		}
	}
	return p.grant(nil), rejected
}

// Position returns the 1-based position of a queued waiter, 0 if w is not
// queued. It walks the queue from the head.
func (p *Pool) Position(w *Waiter) int {
	if w == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.pool != p || w.state != stateQueued {
		return 0
	}
	i := 1
	for e := p.waiters.Front(); e != nil; e = e.Next() {
		if e == w.elem {
			return i
		}
		i++
	}
	return 0 // unreachable while the invariants hold
}

// Stats is a snapshot of a pool's accounting.
type Stats struct {
	Capacity       int64 `json:"capacity"`
	InUse          int64 `json:"in_use"`
	Available      int64 `json:"available"` // max(0, capacity-in_use)
	QueuedRequests int   `json:"queued"`
	QueuedSlots    int64 `json:"queued_slots"`
}

// Stats returns a snapshot of the pool's accounting.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Capacity:       p.capacity,
		InUse:          p.inUse,
		Available:      max(0, p.capacity-p.inUse),
		QueuedRequests: p.waiters.Len(),
		QueuedSlots:    p.queuedSlots,
	}
}

// check validates a request of n slots. p.mu must be held.
func (p *Pool) check(n int64) error {
	if n <= 0 {
		return fmt.Errorf("%w: %d slots requested, must be at least 1", ErrInvalidSlots, n)
	}
	if n > p.capacity {
		return p.exceeds(n)
	}
	return nil
}

func (p *Pool) exceeds(n int64) error {
	return fmt.Errorf("%w: %d slots requested, capacity is %d", ErrExceedsCapacity, n, p.capacity)
}

// fits reports whether a new request of n slots may be granted at once: the
// slots are free and nobody is waiting, since a newcomer must not jump the
// queue. p.mu must be held.
func (p *Pool) fits(n int64) bool {
	return p.waiters.Len() == 0 && p.capacity-p.inUse >= n
}

// push queues a new waiter at the tail. p.mu must be held.
func (p *Pool) push(n int64, value any, ready chan struct{}) *Waiter {
	p.seq++
	w := &Waiter{Slots: n, Value: value, pool: p, state: stateQueued, ready: ready, seq: p.seq}
	w.elem = p.waiters.PushBack(w)
	p.queuedSlots += n
	return w
}

// unlink takes a queued waiter out of the queue; the caller sets its new
// state. p.mu must be held.
func (p *Pool) unlink(w *Waiter) {
	p.waiters.Remove(w.elem)
	w.elem = nil
	p.queuedSlots -= w.Slots
}

// remove cancels a queued waiter and, if it was the head, grants the
// waiters behind it that now fit. p.mu must be held.
func (p *Pool) remove(w *Waiter) []*Waiter {
	isFront := p.waiters.Front() == w.elem
	p.unlink(w)
	w.state = stateCancelled
	if !isFront {
		// The head is unchanged and still does not fit.
		return nil
	}
	return p.grant(nil)
}

// grant grants waiters from the head of the queue while they fit, appending
// them to out. Waiters created by Acquire are woken through their ready
// channel instead of being returned. p.mu must be held.
func (p *Pool) grant(out []*Waiter) []*Waiter {
	for {
		e := p.waiters.Front()
		if e == nil {
			return out // Nobody waiting.
		}
		w := e.Value.(*Waiter)
		if p.capacity-p.inUse < w.Slots {
			// Not enough free slots for the head waiter. We could look
			// further down the queue for a smaller request that fits, but
			// under load that starves large requests: with capacity N, a
			// request for N slots waiting behind a steady stream of 1-slot
			// requests would never see N slots free, since a newcomer could
			// always take the one slot just released. So nobody is granted
			// ahead of the head, and a newcomer never jumps a waiting
			// multi-slot request.
			return out
		}
		p.inUse += w.Slots
		p.unlink(w)
		w.state = stateGranted
		if w.ready != nil {
			close(w.ready)
			continue
		}
		out = append(out, w)
	}
}

package pools

import (
	"errors"
	"fmt"
)

// Admission is what Admit did with a request, and to whom.
type Admission struct {
	// Waiter, Granted and Position are EnqueueRequest's results for the
	// request.
	Waiter   *Waiter
	Granted  bool
	Position int
	// Dropped is the waiter a full drop_oldest queue dropped to make room
	// for the request (nil if none): it is no longer queued, and the
	// caller tells its owner so. Let are the waiters granted because it
	// left, in service order, before the request was admitted.
	Dropped *Waiter
	Let     []*Waiter
}

// Admit is EnqueueRequest with Options.OnFull applied. On a full queue of
// a drop_oldest pool, a request that would have to wait takes the place of
// the waiter that arrived first, whatever the policy's order: that waiter
// is removed and returned as Dropped (a waiter of Acquire is woken with
// ErrDropped instead), the waiters its leaving lets in are granted, and
// the request is then granted or queued as EnqueueRequest would. Elsewhere
// it is EnqueueRequest. Finding the first to arrive is O(1) under fifo and
// lifo, O(n) in the queue's length under priority and fair.
func (p *Pool) Admit(r Request) (a Admission, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a.Waiter, a.Granted, a.Position, err = p.enqueue(r)
	if !errors.Is(err, ErrQueueFull) || p.opts.OnFull != OnFullDropOldest {
		return a, err
	}
	oldest := p.oldest()
	why := fmt.Errorf("%w: a newer request took its place (%d requests queued, max_queue %d)", ErrDropped, p.queued, p.opts.MaxQueue)
	if p.reject(oldest, why) {
		a.Dropped = oldest
	}
	a.Let = p.grant(nil)
	a.Waiter, a.Granted, a.Position, err = p.enqueue(r)
	return a, err
}

// oldest returns the queued waiter that arrived first, nil if none. p.mu
// must be held.
func (p *Pool) oldest() *Waiter {
	switch p.opts.Policy {
	case PolicyFIFO, PolicyLIFO:
		if e := p.waiters.Front(); e != nil {
			return e.Value.(*Waiter)
		}
		return nil
	}
	var first *Waiter
	p.q.each(func(w *Waiter) {
		if first == nil || w.seq < first.seq {
			first = w
		}
	})
	return first
}

package pools

// lifoQueue is PolicyLIFO: Pool.waiters in arrival order, as under fifo,
// served from the back: the newest waiter first. A newcomer is always the
// newest, so it goes first whenever its slots are free; when they are
// not, it becomes the waiter that blocks the queue until they are.
type lifoQueue struct{ fifoQueue }

func (q lifoQueue) first(*tenant, string, int64, int64) bool { return true }

func (q lifoQueue) next() *Waiter {
	if e := q.p.waiters.Back(); e != nil {
		return e.Value.(*Waiter)
	}
	return nil
}

func (q lifoQueue) rank(w *Waiter) int {
	i := 1
	for e := q.p.waiters.Back(); e != nil; e = e.Prev() {
		if e == w.elem {
			return i // just queued: 1, at once
		}
		i++
	}
	return 0 // unreachable while the invariants hold
}

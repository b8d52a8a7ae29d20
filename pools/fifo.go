package pools

// fifoQueue is PolicyFIFO: Pool.waiters in arrival order.
type fifoQueue struct{ p *Pool }

func (q fifoQueue) first(*tenant, string, int64, int64) bool { return q.p.waiters.Len() == 0 }
func (q fifoQueue) push(w *Waiter)                           { w.elem = q.p.waiters.PushBack(w) }
func (q fifoQueue) took(*tenant, string, int64)              {}

func (q fifoQueue) remove(w *Waiter, _ bool) {
	q.p.waiters.Remove(w.elem)
	w.elem = nil
}

func (q fifoQueue) next() *Waiter {
	if e := q.p.waiters.Front(); e != nil {
		return e.Value.(*Waiter)
	}
	return nil
}

func (q fifoQueue) rank(w *Waiter) int {
	if q.p.waiters.Back() == w.elem {
		return q.p.waiters.Len() // just queued: O(1)
	}
	i := 1
	for e := q.p.waiters.Front(); e != nil; e = e.Next() {
		if e == w.elem {
			return i
		}
		i++
	}
	return 0 // unreachable while the invariants hold
}

func (q fifoQueue) each(f func(*Waiter)) {
	for e := q.p.waiters.Front(); e != nil; e = e.Next() {
		f(e.Value.(*Waiter))
	}
}

package pools

// priorityQueue is PolicyPriority: waiters ordered by (vt, seq), smallest
// first, where vt is the virtual time Pool.vtime gave the request when it
// arrived. The key never changes while the waiter is queued, so aging needs
// no timer and no re-sorting: an old request's key is simply smaller than a
// newer one's of up to (age / AgingStep) levels more.
//
// The order is kept in a treap (a binary search tree on the key that is a
// heap on a hash of seq) with subtree sizes, rather than a binary heap, so
// that the position of a waiter, which EnqueueRequest returns for every
// queued request, is an O(log n) rank instead of an O(n) count. Insert,
// remove (Cancel) and next are O(log n) expected; the hash makes the shape
// independent of the arrival pattern.
//
// Invariants: root's in-order sequence is every queued waiter, strictly
// increasing by before; each node's hashed seq >= its children's; size is
// the size of each subtree.
type priorityQueue struct {
	root *Waiter
}

// before orders waiters by virtual time, then arrival. seq is unique, so
// this is a strict total order.
func before(a, b *Waiter) bool {
	if a.vt != b.vt {
		return a.vt < b.vt
	}
	return a.seq < b.seq
}

// treapKey is the heap key of a node: a fixed pseudo-random function of seq
// (splitmix64's finalizer), so the treap needs no random source or field.
func treapKey(w *Waiter) uint64 {
	z := w.seq + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func sizeOf(w *Waiter) int32 {
	if w == nil {
		return 0
	}
	return w.size
}

func (w *Waiter) resize() { w.size = 1 + sizeOf(w.left) + sizeOf(w.right) }

// split splits the treap t into the waiters before k and the others.
func split(t, k *Waiter) (lo, hi *Waiter) {
	if t == nil {
		return nil, nil
	}
	if before(t, k) {
		t.right, hi = split(t.right, k)
		t.resize()
		return t, hi
	}
	lo, t.left = split(t.left, k)
	t.resize()
	return lo, t
}

// merge joins treaps a and b, every waiter of a before every waiter of b.
func merge(a, b *Waiter) *Waiter {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case treapKey(a) > treapKey(b):
		a.right = merge(a.right, b)
		a.resize()
		return a
	default:
		b.left = merge(a, b.left)
		b.resize()
		return b
	}
}

func (q *priorityQueue) first(_ *tenant, _ string, _ int64, vt int64) bool {
	// A new request has the largest seq, so it goes first only with a
	// strictly smaller virtual time.
	h := q.next()
	return h == nil || vt < h.vt
}

func (q *priorityQueue) push(w *Waiter) {
	// Descend to where w's heap key puts it, then split what hangs there
	// around w: fewer pointer writes (and GC write barriers) than
	// splitting the whole tree.
	k := treapKey(w)
	link := &q.root
	for n := *link; n != nil && treapKey(n) > k; n = *link {
		n.size++
		if before(w, n) {
			link = &n.left
		} else {
			link = &n.right
		}
	}
	w.left, w.right = split(*link, w)
	w.resize()
	*link = w
}

func (q *priorityQueue) remove(w *Waiter, _ bool) {
	link := &q.root
	for n := *link; n != w; n = *link {
		n.size--
		if before(w, n) {
			link = &n.left
		} else {
			link = &n.right
		}
	}
	*link = merge(w.left, w.right)
	w.left, w.right, w.size = nil, nil, 0
}

func (q *priorityQueue) next() *Waiter {
	w := q.root
	for w != nil && w.left != nil {
		w = w.left
	}
	return w
}

func (q *priorityQueue) took(*tenant, string, int64) {}

func (q *priorityQueue) rank(w *Waiter) int {
	r := 1
	for n := q.root; n != nil; {
		if before(n, w) {
			r += int(sizeOf(n.left)) + 1
			n = n.right
		} else {
			n = n.left
		}
	}
	return r
}

func (q *priorityQueue) each(f func(*Waiter)) {
	var walk func(*Waiter)
	walk = func(n *Waiter) {
		if n != nil {
			walk(n.left)
			f(n)
			walk(n.right)
		}
	}
	walk(q.root)
}

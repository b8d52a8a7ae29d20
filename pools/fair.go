package pools

import (
	"container/list"
	"math"
	"math/bits"
)

// fairQueue is PolicyFair: deficit round robin over tenants, each tenant's
// requests first-in, first-out (tenant.waiters).
//
// The tenants that may be served form a round (ring). The tenant at the
// front has the turn: when its turn begins it is credited its quantum
// (weight, in slots) on top of what it had left (deficit), and it is served
// while its head request costs no more than its deficit. Then its turn
// ends, it moves to the back with what is left, and the next tenant's turn
// begins. A tenant whose queue empties leaves the round and loses what it
// had left, so idle tenants bank nothing; a tenant that gets a request
// joins at the back, and so is served within the next round. Over many
// rounds each backlogged tenant is granted slots in proportion to its
// weight.
//
// The head request of the tenant whose turn it is, once covered by its
// deficit, is the next in service order: if it does not fit, nothing is
// granted (no skipping to smaller requests of other tenants; see
// Pool.grant). A tenant whose head would take it over TenantCap is not in
// the round at all, so it blocks nobody; it rejoins at the back when a
// release or cancel brings its head under the cap.
//
// Invariants:
//   - a tenant is in ring (t.ring != nil) iff it has queued requests and
//     its head is within its cap;
//   - a tenant not in ring has deficit 0 and started false; only the front
//     of ring may be started;
//   - after every operation but RestoreFor, ring is empty or its front is
//     started with its head's Slots <= deficit (next has settled), and
//     that head does not fit.
type fairQueue struct {
	p    *Pool
	ring list.List // of *tenant, in turn order
}

func head(t *tenant) *Waiter { return t.waiters.Front().Value.(*Waiter) }

// capped reports whether t's head would take t over the cap. t must have
// queued requests.
func (f *fairQueue) capped(t *tenant) bool {
	c := f.p.opts.TenantCap
	return c > 0 && t.inUse+head(t).Slots > c
}

func (f *fairQueue) first(t *tenant, n int64, _ int64) bool {
	// With a round under way, its next request goes first and a newcomer
	// joins at the back. With none, a newcomer whose tenant has nothing
	// queued would start its own turn at once.
	if f.ring.Len() > 0 {
		return false
	}
	if t == nil {
		return true // check has ensured n <= TenantCap
	}
	c := f.p.opts.TenantCap
	return t.queued == 0 && (c == 0 || t.inUse+n <= c)
}

// update puts t in or out of the round as the invariant says.
func (f *fairQueue) update(t *tenant) {
	in := t.queued > 0 && !f.capped(t)
	switch {
	case in && t.ring == nil:
		t.ring = f.ring.PushBack(t)
	case !in && t.ring != nil:
		f.ring.Remove(t.ring)
		t.ring, t.deficit, t.started = nil, 0, false
	}
}

func (f *fairQueue) push(w *Waiter) {
	t := w.t
	w.elem = t.waiters.PushBack(w)
	if t.queued == 1 {
		f.update(t) // t's first request: it may join the round
	}
	f.next() // settle the turn, so the invariants hold between operations
}

func (f *fairQueue) remove(w *Waiter, granted bool) {
	t := w.t
	if granted {
		t.deficit -= w.Slots // next() returned w: Slots <= deficit
	}
	wasHead := t.waiters.Front() == w.elem
	t.waiters.Remove(w.elem)
	w.elem = nil
	if wasHead {
		f.update(t)
	}
}

func (f *fairQueue) next() *Waiter {
	failed := 0 // turns ended in this call without a grant
	for {
		e := f.ring.Front()
		if e == nil {
			return nil
		}
		t := e.Value.(*tenant)
		if !t.started {
			if failed >= f.ring.Len() {
				f.skipRounds()
				failed = 0
			}
			t.deficit += int64(t.weight)
			t.started = true
		}
		if w := head(t); w.Slots <= t.deficit {
			return w
		}
		t.started = false
		f.ring.MoveToBack(e)
		failed++
	}
}

// skipRounds is called when every tenant in the round has just had a turn
// too short for its head request, which happens when requests are larger
// than quanta. It credits all of them the further rounds in which nobody
// would be served either: r-1, where r is the fewest rounds any tenant
// needs. That gives the order plain DRR would, in O(tenants) instead of
// O(tenants * slots / weight).
func (f *fairQueue) skipRounds() {
	r := int64(math.MaxInt64)
	for e := f.ring.Front(); e != nil; e = e.Next() {
		t := e.Value.(*tenant)
		r = min(r, ceilDiv(head(t).Slots-t.deficit, int64(t.weight)))
	}
	if r <= 1 {
		return
	}
	for e := f.ring.Front(); e != nil; e = e.Next() {
		t := e.Value.(*tenant)
		t.deficit += (r - 1) * int64(t.weight) // < head's Slots: no overflow
	}
}

// rank computes Position (see there) in closed form rather than by
// simulating the rounds. If w's tenant t needs m more turns, another
// tenant u gets m or m-1 turns first, depending on where it is in the
// round, and is served the longest prefix of its queue whose slots its
// deficit plus those turns' quanta cover; for u that prefix is estimated
// from u's average request size, which is exact when u's requests are of
// one size.
func (f *fairQueue) rank(w *Waiter) int {
	t := w.t
	// t's own requests up to and including w.
	k, slots := t.queued, t.queuedSlots
	if t.waiters.Back() != w.elem {
		k, slots = 0, 0
		for e := t.waiters.Front(); ; e = e.Next() {
			k++
			slots += e.Value.(*Waiter).Slots
			if e == w.elem {
				break
			}
		}
	}
	if t.started && slots <= t.deficit {
		return k // within the turn under way
	}
	// Turns begin in ring order from the front, or from the one after it if
	// the front's turn has begun (its next one then comes last). A tenant
	// outside the round (capped) is placed as if it joined at the back.
	n := f.ring.Len()
	if t.ring == nil {
		n++ // t, at the back
	}
	started := f.ring.Len() > 0 && f.ring.Front().Value.(*tenant).started
	order := func(i int) int { // turn order of the i-th tenant from the front
		if started {
			return (i + n - 1) % n
		}
		return i
	}
	tOrder := order(n - 1)
	i := 0
	for e := f.ring.Front(); e != nil; e = e.Next() {
		if e == t.ring {
			tOrder = order(i)
			break
		}
		i++
	}
	m := max(1, ceilDiv(slots-t.deficit, int64(t.weight))) // t's turns needed

	pos := k
	i = 0
	for e := f.ring.Front(); e != nil; e = e.Next() {
		u := e.Value.(*tenant)
		o := order(i)
		i++
		if u == t {
			continue
		}
		turns := m - 1
		if o < tOrder {
			turns = m
		}
		if turns == 0 && !u.started {
			continue
		}
		budget := int64(math.MaxInt64)
		if q := int64(u.weight); turns <= (math.MaxInt64-u.deficit)/q {
			budget = u.deficit + turns*q
		}
		pos += prefixCount(u, budget)
	}
	return pos
}

// prefixCount estimates how many of u's queued requests, from the head,
// budget slots cover, assuming they are all of the average size.
func prefixCount(u *tenant, budget int64) int {
	switch {
	case budget <= 0:
		return 0
	case budget >= u.queuedSlots:
		return u.queued
	}
	// budget * queued / queuedSlots, in 128 bits: budget < queuedSlots
	// keeps the quotient below queued.
	hi, lo := bits.Mul64(uint64(budget), uint64(u.queued))
	q, _ := bits.Div64(hi, lo, uint64(u.queuedSlots))
	return int(q)
}

// ceilDiv is ⌈a/b⌉ for b > 0, and at most 0 for a <= 0.
func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

func (f *fairQueue) each(fn func(*Waiter)) {
	visit := func(t *tenant) {
		for e := t.waiters.Front(); e != nil; e = e.Next() {
			fn(e.Value.(*Waiter))
		}
	}
	visit(&f.p.anon)
	for _, t := range f.p.tenants {
		visit(t)
	}
}

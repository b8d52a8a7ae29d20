package pools

import (
	"container/list"
	"math"
	"math/bits"
)

// fairQueue is PolicyFair: deficit round robin over shares, each share's
// requests first-in, first-out (share.waiters). A share is the requests
// of one tenant with one fairness key (Request.Key; a tenant's requests
// without a key are its share ""), so requests are partitioned by key
// where they give one and by tenant where they do not.
//
// The shares that may be served form a round (ring). The share at the
// front has the turn: when its turn begins it is credited its quantum
// (weight × Options.Quantum, in slots) on top of what it had left
// (deficit), and it is served while its head request costs no more than
// its deficit. Then its turn ends, it moves to the back with what is left,
// and the next share's turn begins. A share whose queue empties leaves the
// round and loses what it had left, so idle shares bank nothing; a share
// that gets a request joins at the back, and so is served within the next
// round. Over many rounds each backlogged share is granted slots in
// proportion to its weight.
//
// The head request of the share whose turn it is, once covered by its
// deficit, is the next in service order: if it does not fit, nothing is
// granted (no skipping to smaller requests of other shares; see
// Pool.grant). With Options.StarvationAge, a head request of a share in
// the round that has waited that long goes first instead, whatever the
// credit (the oldest such, by arrival); its slots are still charged to its
// share's deficit, which may go below zero.
//
// A share whose head would take it over KeyCap, or take its tenant over
// TenantCap, is not in the round at all, so it blocks nobody; it rejoins
// at the back when a release or cancel brings its head under the caps.
//
// Invariants:
//   - a share is in ring (s.ring != nil) iff it has queued requests and
//     its head is within the caps (held reports false);
//   - a share not in ring has deficit 0 and started false; only the front
//     of ring may be started;
//   - with StarvationAge, aged holds exactly the shares in ring, as a heap
//     on their head's seq;
//   - after every operation but RestoreFor, ring is empty or its front is
//     started with its head's Slots <= deficit (next has settled), and
//     the waiter next returns does not fit.
type fairQueue struct {
	p    *Pool
	ring list.List // of *share, in turn order
	aged shareHeap // with StarvationAge: the shares in ring, oldest head first

	// What the scheduler decided since the pool was made (see
	// SchedulerStats): the sums of every share's selected and deferred,
	// forgotten shares included, and the grants that were starvation
	// promotions. promoted is the waiter next last returned, when that was
	// a promotion: it is one if it is granted before next is called again.
	selected, deferred, promotions int64
	promoted                       *Waiter
}

// share is the fair policy's accounting of one tenant's requests with one
// fairness key.
type share struct {
	t   *tenant
	key string
	// quantum is the credit of a turn: weight × Options.Quantum.
	quantum int64

	// inUse: slots granted to this share and not released. queued and
	// queuedSlots count its queued waiters.
	inUse       int64
	queued      int
	queuedSlots int64

	waiters list.List     // this share's queued *Waiter, FIFO
	ring    *list.Element // in fairQueue.ring, or nil
	deficit int64         // slots this share may still be granted this round
	started bool          // this share's turn has begun: deficit includes its quantum
	elem    *list.Element // in t.shares
	heapAt  int           // index in fairQueue.aged, -1 when not there

	// selected counts this share's requests the scheduler granted, and
	// deferred the times it passed the share over while it had a request
	// waiting (see KeyStats), since the share was made: a share is
	// forgotten, its counts with it, once it holds and queues nothing.
	selected, deferred int64
}

func head(s *share) *Waiter { return s.waiters.Front().Value.(*Waiter) }

// shareOf returns t's share of key, or nil if it holds and queues nothing.
func shareOf(t *tenant, key string) *share {
	if t == nil {
		return nil
	}
	if key == "" {
		return t.own
	}
	return t.keyed[key]
}

// share returns t's share of key, creating it if needed.
func (f *fairQueue) share(t *tenant, key string) *share {
	if s := shareOf(t, key); s != nil {
		return s
	}
	name := key
	if key == "" {
		name = t.name
	}
	s := &share{t: t, key: key, quantum: int64(f.p.weightOf(name)) * f.p.opts.Quantum, heapAt: -1}
	if key == "" {
		t.own = s
	} else {
		if t.keyed == nil {
			t.keyed = make(map[string]*share)
		}
		t.keyed[key] = s
	}
	s.elem = t.shares.PushBack(s)
	return s
}

// forget drops s once it holds and queues nothing.
func (f *fairQueue) forget(s *share) {
	if s.inUse != 0 || s.queued != 0 {
		return
	}
	t := s.t
	t.shares.Remove(s.elem)
	s.elem = nil
	if s.key == "" {
		t.own = nil
	} else {
		delete(t.keyed, s.key)
	}
}

// held reports whether a request of n slots of share s (nil: one that
// holds nothing) and tenant t would take s over KeyCap or t over
// TenantCap.
func (f *fairQueue) held(t *tenant, s *share, n int64) bool {
	o := &f.p.opts
	var sIn, tIn int64
	if s != nil {
		sIn = s.inUse
	}
	if t != nil {
		tIn = t.inUse
	}
	return (o.KeyCap > 0 && sIn+n > o.KeyCap) || (o.TenantCap > 0 && tIn+n > o.TenantCap)
}

func (f *fairQueue) first(t *tenant, key string, n int64, _ int64) bool {
	// With a round under way, its next request goes first and a newcomer
	// joins at the back. With none, a newcomer whose share has nothing
	// queued would start its own turn at once.
	if f.ring.Len() > 0 {
		return false
	}
	s := shareOf(t, key)
	return (s == nil || s.queued == 0) && !f.held(t, s, n)
}

// update puts s in or out of the round as the invariant says.
func (f *fairQueue) update(s *share) {
	in := s.queued > 0 && !f.held(s.t, s, head(s).Slots)
	switch {
	case in && s.ring == nil:
		s.ring = f.ring.PushBack(s)
	case !in && s.ring != nil:
		f.ring.Remove(s.ring)
		s.ring, s.deficit, s.started = nil, 0, false
		if s.queued > 0 { // out with requests waiting: a cap holds its head back
			f.defer1(s, 1)
		}
	}
	if f.p.opts.StarvationAge > 0 {
		f.aged.set(s, in)
	}
}

// changed updates s after its slots or its queue changed, and, under a
// tenant cap, every other share of its tenant too, in the order they
// came: their heads' room under the cap changed with s's slots.
func (f *fairQueue) changed(s *share) {
	if f.p.opts.TenantCap == 0 {
		f.update(s)
		return
	}
	for e := s.t.shares.Front(); e != nil; e = e.Next() {
		f.update(e.Value.(*share))
	}
}

func (f *fairQueue) push(w *Waiter) {
	s := f.share(w.t, w.Key)
	s.queued++
	s.queuedSlots += w.Slots
	w.elem = s.waiters.PushBack(w)
	if s.queued == 1 {
		f.update(s) // s's first request: it may join the round
		if s.ring == nil {
			f.defer1(s, 1) // or a cap holds it back
		}
	}
	f.next() // settle the turn, so the invariants hold between operations
}

func (f *fairQueue) remove(w *Waiter, granted bool) {
	s := shareOf(w.t, w.Key)
	if granted {
		s.deficit -= w.Slots // next() returned w: covered, or aged past StarvationAge
		s.inUse += w.Slots
		f.selected++
		s.selected++
		if w == f.promoted {
			f.promotions++
		}
	}
	wasHead := s.waiters.Front() == w.elem
	s.waiters.Remove(w.elem)
	s.queued--
	s.queuedSlots -= w.Slots
	w.elem = nil
	if granted || wasHead {
		f.update(s) // first: the age heap must not keep s with an empty queue
	}
	if granted && f.p.opts.TenantCap > 0 {
		f.changed(s) // s's tenant took slots: its other shares may leave the round
	}
	f.forget(s)
}

func (f *fairQueue) took(t *tenant, key string, n int64) {
	s := f.share(t, key)
	s.inUse += n
	if s.queued > 0 || f.p.opts.TenantCap > 0 {
		f.changed(s)
	}
	f.forget(s)
}

// next returns the next waiter in service order: the head of the share
// whose turn it is, once settled, unless an older ready head has waited
// StarvationAge.
func (f *fairQueue) next() *Waiter {
	f.promoted = nil
	w := f.settle()
	if w == nil || f.p.opts.StarvationAge <= 0 {
		return w
	}
	if h := head(f.aged[0]); h != w && f.p.since(h.vt) >= int64(f.p.opts.StarvationAge) {
		f.promoted = h
		return h
	}
	return w
}

// grantedAtOnce counts a request of tenant t with key key granted on
// arrival (Pool.start): a share with nothing queued and an empty round
// starts its turn at once, so the scheduler selected it.
func (f *fairQueue) grantedAtOnce(t *tenant, key string) {
	f.selected++
	shareOf(t, key).selected++ // it holds the slots just taken
}

// defer1 counts n times the scheduler passed s over with a request waiting.
func (f *fairQueue) defer1(s *share, n int64) {
	f.deferred += n
	s.deferred += n
}

// settle plays the round until the share whose turn it is can pay for its
// head, and returns that head (nil if the round is empty).
func (f *fairQueue) settle() *Waiter {
	failed := 0 // turns ended in this call without a grant
	for {
		e := f.ring.Front()
		if e == nil {
			return nil
		}
		s := e.Value.(*share)
		if !s.started {
			if failed >= f.ring.Len() {
				f.skipRounds()
				failed = 0
			}
			s.deficit += s.quantum
			s.started = true
		}
		if w := head(s); w.Slots <= s.deficit {
			return w
		}
		s.started = false
		f.ring.MoveToBack(e)
		f.defer1(s, 1) // its turn ends: the credit left does not cover its head
		failed++
	}
}

// skipRounds is called when every share in the round has just had a turn
// too short for its head request, which happens when requests are larger
// than quanta. It credits all of them the further rounds in which nobody
// would be served either: r-1, where r is the fewest rounds any share
// needs. That gives the order plain DRR would, in O(shares) instead of
// O(shares * slots / quantum).
func (f *fairQueue) skipRounds() {
	r := int64(math.MaxInt64)
	for e := f.ring.Front(); e != nil; e = e.Next() {
		s := e.Value.(*share)
		r = min(r, ceilDiv(head(s).Slots-s.deficit, s.quantum))
	}
	if r <= 1 {
		return
	}
	for e := f.ring.Front(); e != nil; e = e.Next() {
		s := e.Value.(*share)
		s.deficit += (r - 1) * s.quantum // < head's Slots: no overflow
		f.defer1(s, r-1)                 // the turns skipped end as the last did
	}
}

// rank computes Position (see there) in closed form rather than by
// simulating the rounds. If w's share t needs m more turns, another
// share u gets m or m-1 turns first, depending on where it is in the
// round, and is served the longest prefix of its queue whose slots its
// deficit plus those turns' quanta cover; for u that prefix is estimated
// from u's average request size, which is exact when u's requests are of
// one size. Starvation promotions are not foreseen.
func (f *fairQueue) rank(w *Waiter) int {
	t := shareOf(w.t, w.Key)
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
	// the front's turn has begun (its next one then comes last). A share
	// outside the round (capped) is placed as if it joined at the back.
	n := f.ring.Len()
	if t.ring == nil {
		n++ // t, at the back
	}
	started := f.ring.Len() > 0 && f.ring.Front().Value.(*share).started
	order := func(i int) int { // turn order of the i-th share from the front
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
	m := max(1, ceilDiv(slots-t.deficit, t.quantum)) // t's turns needed

	pos := k
	i = 0
	for e := f.ring.Front(); e != nil; e = e.Next() {
		u := e.Value.(*share)
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
		if q := u.quantum; turns <= (math.MaxInt64-max(0, u.deficit))/q {
			budget = u.deficit + turns*q
		}
		pos += prefixCount(u, budget)
	}
	return pos
}

// prefixCount estimates how many of u's queued requests, from the head,
// budget slots cover, assuming they are all of the average size.
func prefixCount(u *share, budget int64) int {
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
	f.eachShare(func(s *share) {
		for w := s.waiters.Front(); w != nil; w = w.Next() {
			fn(w.Value.(*Waiter))
		}
	})
}

package pools

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is Options.Now for tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var policies = []Policy{PolicyFIFO, PolicyPriority, PolicyFair}

// allPolicies adds lifo, which serves the newest first and so starves a
// large old request by design: the tests that promise otherwise
// (TestMultiSlotNotStarved) run over policies.
var allPolicies = append(slices.Clone(policies), PolicyLIFO)

func mustNew(t testing.TB, capacity int64, o Options) *Pool {
	t.Helper()
	p, err := NewWithOptions(capacity, o)
	if err != nil {
		t.Fatalf("NewWithOptions(%d, %+v): %v", capacity, o, err)
	}
	return p
}

// checkPolicy verifies the invariants documented on Pool, tenant and the
// policy's queue. settled is false right after a RestoreFor, which may leave
// a grantable waiter (see RestoreFor).
func checkPolicy(t testing.TB, p *Pool, settled bool) {
	t.Helper()
	if p.opts.Policy == PolicyFIFO {
		checkInvariants(t, p)
	}
	p.mu.Lock()
	defer p.mu.Unlock()

	all := []*tenant{&p.anon}
	if p.anon.name != "" {
		t.Errorf("anon tenant named %q", p.anon.name)
	}
	for name, tn := range p.tenants {
		if tn.name != name || name == "" {
			t.Errorf("tenant %q filed under %q", tn.name, name)
		}
		if tn.inUse == 0 && tn.queued == 0 {
			t.Errorf("idle tenant %q kept", name)
		}
		all = append(all, tn)
	}
	var inUse, qSlots int64
	var queued int
	for _, tn := range all {
		if tn.inUse < 0 || tn.queued < 0 || tn.queuedSlots < 0 {
			t.Errorf("tenant %q: negative counts %+v", tn.name, tn)
		}
		if c := p.opts.TenantCap; c > 0 && tn.inUse > c && settled {
			t.Errorf("tenant %q holds %d slots, cap %d", tn.name, tn.inUse, c)
		}
		inUse += tn.inUse
		queued += tn.queued
		qSlots += tn.queuedSlots
	}
	if inUse != p.inUse || queued != p.queued || qSlots != p.queuedSlots {
		t.Errorf("tenant sums in_use %d queued %d queued_slots %d; pool %d %d %d", inUse, queued, qSlots, p.inUse, p.queued, p.queuedSlots)
	}

	// Every queued waiter, counted per tenant.
	type count struct {
		n     int
		slots int64
	}
	per := map[*tenant]count{}
	n := 0
	p.q.each(func(w *Waiter) {
		n++
		if w.state != stateQueued || w.pool != p || w.t == nil || w.t != p.lookup(w.Tenant) {
			t.Errorf("queued waiter seq %d: state %d, pool ok %t, tenant ok %t", w.seq, w.state, w.pool == p, w.t != nil && w.t == p.lookup(w.Tenant))
			return
		}
		if w.Slots <= 0 || w.Slots > p.capacity || (p.opts.TenantCap > 0 && w.Slots > p.opts.TenantCap) {
			t.Errorf("queued waiter seq %d wants %d slots, capacity %d, cap %d", w.seq, w.Slots, p.capacity, p.opts.TenantCap)
		}
		c := per[w.t]
		per[w.t] = count{c.n + 1, c.slots + w.Slots}
	})
	if n != p.queued {
		t.Errorf("queue holds %d waiters, queued = %d", n, p.queued)
	}
	for _, tn := range all {
		if c := per[tn]; c.n != tn.queued || c.slots != tn.queuedSlots {
			t.Errorf("tenant %q: %d waiters of %d slots queued, counts say %d, %d", tn.name, c.n, c.slots, tn.queued, tn.queuedSlots)
		}
	}
	free := p.capacity - p.inUse

	switch q := p.q.(type) {
	case lifoQueue:
		var lastSeq uint64
		for e := p.waiters.Front(); e != nil; e = e.Next() {
			if w := e.Value.(*Waiter); w.elem != e || w.seq <= lastSeq {
				t.Errorf("lifo list broken at seq %d", w.seq)
			}
		}
		if h := q.next(); h != nil && settled && free >= h.Slots {
			t.Errorf("lifo next (%d slots) fits (free %d) but was not granted", h.Slots, free)
		}

	case *priorityQueue:
		if p.waiters.Len() != 0 {
			t.Errorf("priority pool uses the fifo list")
		}
		var prev *Waiter
		var walk func(w *Waiter) int32
		walk = func(w *Waiter) int32 {
			if w == nil {
				return 0
			}
			for _, c := range []*Waiter{w.left, w.right} {
				if c != nil && treapKey(c) > treapKey(w) {
					t.Errorf("treap heap order broken at seq %d", w.seq)
				}
			}
			s := walk(w.left)
			if prev != nil && !before(prev, w) {
				t.Errorf("treap out of order: seq %d (vt %d) after seq %d (vt %d)", w.seq, w.vt, prev.seq, prev.vt)
			}
			prev = w
			s += 1 + walk(w.right)
			if s != w.size {
				t.Errorf("treap size at seq %d = %d, counted %d", w.seq, w.size, s)
			}
			return s
		}
		if s := walk(q.root); int(s) != p.queued {
			t.Errorf("treap holds %d, queued = %d", s, p.queued)
		}
		if h := q.next(); h != nil && settled && free >= h.Slots {
			t.Errorf("priority head (%d slots) fits (free %d) but was not granted", h.Slots, free)
		}

	case *fairQueue:
		if p.waiters.Len() != 0 {
			t.Errorf("fair pool uses the fifo list")
		}
		checkFair(t, p, q, all, settled)
	}
}

// checkFair verifies the fair policy's invariants (see fairQueue).
func checkFair(t testing.TB, p *Pool, q *fairQueue, all []*tenant, settled bool) {
	t.Helper()
	inRing := map[*share]bool{}
	for e := q.ring.Front(); e != nil; e = e.Next() {
		s := e.Value.(*share)
		if s.ring != e || inRing[s] {
			t.Errorf("ring element of %q/%q inconsistent", s.t.name, s.key)
		}
		inRing[s] = true
		if s.started && e != q.ring.Front() {
			t.Errorf("share %q/%q started but not at the front", s.t.name, s.key)
		}
	}
	shares := 0
	for _, tn := range all {
		var inUse, qSlots int64
		var queued int
		for e := tn.shares.Front(); e != nil; e = e.Next() {
			s := e.Value.(*share)
			shares++
			if s.elem != e || s.t != tn || shareOf(tn, s.key) != s {
				t.Errorf("share %q/%q filed wrongly", tn.name, s.key)
			}
			if s.inUse == 0 && s.queued == 0 {
				t.Errorf("idle share %q/%q kept", tn.name, s.key)
			}
			if c := p.opts.KeyCap; c > 0 && s.inUse > c && settled {
				t.Errorf("share %q/%q holds %d slots, key cap %d", tn.name, s.key, s.inUse, c)
			}
			var lastSeq uint64
			var n int
			var slots int64
			for e := s.waiters.Front(); e != nil; e = e.Next() {
				w := e.Value.(*Waiter)
				if w.elem != e || shareOf(w.t, w.Key) != s || w.t != tn || w.Key != s.key || w.seq <= lastSeq {
					t.Errorf("share %q/%q queue broken at seq %d", tn.name, s.key, w.seq)
				}
				lastSeq = w.seq
				n++
				slots += w.Slots
			}
			if n != s.queued || slots != s.queuedSlots {
				t.Errorf("share %q/%q: %d waiters of %d slots, counts say %d, %d", tn.name, s.key, n, slots, s.queued, s.queuedSlots)
			}
			inUse += s.inUse
			queued += s.queued
			qSlots += s.queuedSlots
			want := s.queued > 0 && !q.held(tn, s, head(s).Slots)
			if want != inRing[s] || (s.ring != nil) != inRing[s] {
				t.Errorf("share %q/%q in ring %t, want %t (queued %d, in use %d)", tn.name, s.key, inRing[s], want, s.queued, s.inUse)
			}
			if !inRing[s] && (s.deficit != 0 || s.started) {
				t.Errorf("share %q/%q out of the ring keeps deficit %d, started %t", tn.name, s.key, s.deficit, s.started)
			}
			if p.opts.StarvationAge > 0 && (s.heapAt >= 0) != inRing[s] {
				t.Errorf("share %q/%q in the age heap %t, in ring %t", tn.name, s.key, s.heapAt >= 0, inRing[s])
			}
		}
		if inUse != tn.inUse || queued != tn.queued || qSlots != tn.queuedSlots {
			t.Errorf("tenant %q: shares sum to %d, %d, %d; tenant %d, %d, %d", tn.name, inUse, queued, qSlots, tn.inUse, tn.queued, tn.queuedSlots)
		}
		if (tn.own != nil) != (shareOf(tn, "") != nil) || len(tn.keyed)+btoi(tn.own != nil) != tn.shares.Len() {
			t.Errorf("tenant %q: %d shares listed, own %t, %d keyed", tn.name, tn.shares.Len(), tn.own != nil, len(tn.keyed))
		}
	}
	if len(inRing) > shares {
		t.Errorf("ring holds %d shares, %d exist", len(inRing), shares)
	}
	for i, s := range q.aged {
		if s.heapAt != i || !inRing[s] {
			t.Errorf("age heap entry %d (%q/%q) at %d, in ring %t", i, s.t.name, s.key, s.heapAt, inRing[s])
		}
		if i > 0 && head(q.aged[(i-1)/2]).seq > head(s).seq {
			t.Errorf("age heap order broken at %d", i)
		}
	}
	if p.opts.StarvationAge > 0 && len(q.aged) != len(inRing) {
		t.Errorf("age heap holds %d shares, ring %d", len(q.aged), len(inRing))
	}
	if e := q.ring.Front(); e != nil && settled {
		s := e.Value.(*share)
		h := head(s)
		if !s.started || h.Slots > s.deficit {
			t.Errorf("front %q/%q not settled: started %t, head %d, deficit %d", s.t.name, s.key, s.started, h.Slots, s.deficit)
		}
		if free := p.capacity - p.inUse; free >= h.Slots && p.opts.StarvationAge == 0 {
			t.Errorf("fair next (%q/%q, %d slots) fits (free %d) but was not granted", s.t.name, s.key, h.Slots, free)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pmodel is a naive reference implementation of every policy: a slice of
// waiters in arrival order and brute-force searches. Its fair policy plays
// deficit round robin one turn at a time, without Pool's round skipping,
// closed-form positions or heap of ages.
type pmodel struct {
	o        Options
	epoch    time.Time
	capacity int64
	inUse    int64
	held     map[string]int64
	queue    []*Waiter         // arrival order
	vt       map[*Waiter]int64 // priority keys, computed by the model
	at       map[*Waiter]time.Time

	// fair: shares are a tenant's requests of one key. order lists each
	// tenant's shares with slots held or requests queued, as they came.
	heldKey map[sid]int64
	order   map[string][]string
	ring    []sid
	deficit map[sid]int64
	started map[sid]bool

	// fair: the scheduler's counts (SchedulerStats): per share while it
	// is listed, and in total; promoted is next's last pick when that was
	// a starvation promotion.
	selected, deferred         map[sid]int64
	totSel, totDef, promotions int64
	promoted                   *Waiter
}

// sid names a share: a tenant and a key.
type sid struct{ t, k string }

func sidOf(w *Waiter) sid { return sid{w.Tenant, w.Key} }

func newModel(capacity int64, o Options) *pmodel {
	o, _ = o.normalize()
	return &pmodel{o: o, epoch: o.Now(), capacity: capacity, held: map[string]int64{}, vt: map[*Waiter]int64{}, at: map[*Waiter]time.Time{},
		heldKey: map[sid]int64{}, order: map[string][]string{}, deficit: map[sid]int64{}, started: map[sid]bool{},
		selected: map[sid]int64{}, deferred: map[sid]int64{}}
}

func (m *pmodel) weight(name string) int64 {
	if w, ok := m.o.Weights[name]; ok {
		return int64(w)
	}
	return int64(m.o.DefaultWeight)
}

// quantum is a share's credit per turn: the weight of its key, or of its
// tenant without one, times Quantum.
func (m *pmodel) quantum(id sid) int64 {
	name := id.k
	if name == "" {
		name = id.t
	}
	return m.weight(name) * m.o.Quantum
}

func (m *pmodel) vtime(prio int) int64 {
	if m.o.Policy != PolicyPriority {
		return 0
	}
	return int64(m.o.Now().Sub(m.epoch)) - int64(prio)*int64(m.o.AgingStep)
}

func (m *pmodel) shareQueue(id sid) []*Waiter {
	var out []*Waiter
	for _, w := range m.queue {
		if sidOf(w) == id {
			out = append(out, w)
		}
	}
	return out
}

// tenantQueue is every queued request of tenant tn.
func (m *pmodel) tenantQueue(tn string) []*Waiter {
	var out []*Waiter
	for _, w := range m.queue {
		if w.Tenant == tn {
			out = append(out, w)
		}
	}
	return out
}

func (m *pmodel) inRing(id sid) bool { return slices.Contains(m.ring, id) }

// capped reports whether n more slots would take share id over the key
// cap or its tenant over the tenant cap.
func (m *pmodel) capped(id sid, n int64) bool {
	return (m.o.KeyCap > 0 && m.heldKey[id]+n > m.o.KeyCap) || (m.o.TenantCap > 0 && m.held[id.t]+n > m.o.TenantCap)
}

func (m *pmodel) update(id sid) {
	q := m.shareQueue(id)
	in := len(q) > 0 && !m.capped(id, q[0].Slots)
	switch {
	case in && !m.inRing(id):
		m.ring = append(m.ring, id)
	case !in && m.inRing(id):
		m.ring = slices.DeleteFunc(m.ring, func(s sid) bool { return s == id })
		m.deficit[id], m.started[id] = 0, false
		if len(q) > 0 {
			m.deferOnce(id) // a cap holds its head back
		}
	}
}

// changed updates every share of id's tenant, in the order they came.
func (m *pmodel) changed(id sid) {
	for _, k := range m.order[id.t] {
		m.update(sid{id.t, k})
	}
}

// activate lists share id, if new; forget drops it once idle.
func (m *pmodel) activate(id sid) {
	if !slices.Contains(m.order[id.t], id.k) {
		m.order[id.t] = append(m.order[id.t], id.k)
	}
}

func (m *pmodel) forget(id sid) {
	if m.heldKey[id] == 0 && len(m.shareQueue(id)) == 0 {
		m.order[id.t] = slices.DeleteFunc(m.order[id.t], func(k string) bool { return k == id.k })
		delete(m.selected, id)
		delete(m.deferred, id)
	}
}

func (m *pmodel) deferOnce(id sid) {
	m.deferred[id]++
	m.totDef++
}

// select1 counts a grant of share id by the fair scheduler.
func (m *pmodel) select1(id sid) {
	if m.o.Policy == PolicyFair {
		m.selected[id]++
		m.totSel++
	}
}

func (m *pmodel) less(a, b *Waiter) bool {
	if m.vt[a] != m.vt[b] {
		return m.vt[a] < m.vt[b]
	}
	return a.seq < b.seq
}

func (m *pmodel) next() *Waiter {
	switch m.o.Policy {
	case PolicyFIFO:
		if len(m.queue) > 0 {
			return m.queue[0]
		}
	case PolicyLIFO:
		if len(m.queue) > 0 {
			return m.queue[len(m.queue)-1]
		}
	case PolicyPriority:
		var best *Waiter
		for _, w := range m.queue {
			if best == nil || m.less(w, best) {
				best = w
			}
		}
		return best
	case PolicyFair:
		m.promoted = nil
		w := m.settle()
		if w == nil || m.o.StarvationAge == 0 {
			return w
		}
		var oldest *Waiter
		for _, id := range m.ring {
			if h := m.shareQueue(id)[0]; oldest == nil || h.seq < oldest.seq {
				oldest = h
			}
		}
		if m.o.Now().Sub(m.at[oldest]) >= m.o.StarvationAge {
			if oldest != w {
				m.promoted = oldest
			}
			return oldest
		}
		return w
	}
	return nil
}

func (m *pmodel) settle() *Waiter {
	for range 1_000_000 {
		if len(m.ring) == 0 {
			return nil
		}
		id := m.ring[0]
		if !m.started[id] {
			m.deficit[id] += m.quantum(id)
			m.started[id] = true
		}
		if h := m.shareQueue(id)[0]; h.Slots <= m.deficit[id] {
			return h
		}
		m.started[id] = false
		m.ring = append(m.ring[1:], id)
		m.deferOnce(id)
	}
	panic("model: round robin does not terminate")
}

func (m *pmodel) first(id sid, n int64, vt int64) bool {
	switch m.o.Policy {
	case PolicyFIFO:
		return len(m.queue) == 0
	case PolicyLIFO:
		return true
	case PolicyPriority:
		h := m.next()
		return h == nil || vt < m.vt[h]
	default:
		return len(m.ring) == 0 && len(m.shareQueue(id)) == 0 && !m.capped(id, n)
	}
}

func (m *pmodel) grantable(id sid, n int64, vt int64) bool {
	return m.capacity-m.inUse >= n && m.first(id, n, vt)
}

func (m *pmodel) push(w *Waiter, vt int64) {
	m.queue = append(m.queue, w)
	m.vt[w] = vt
	m.at[w] = m.o.Now()
	if m.o.Policy == PolicyFair {
		id := sidOf(w)
		m.activate(id)
		if len(m.shareQueue(id)) == 1 {
			m.update(id)
			if !m.inRing(id) {
				m.deferOnce(id)
			}
		}
		m.next()
	}
}

func (m *pmodel) remove(w *Waiter, granted bool) {
	id := sidOf(w)
	wasHead := m.shareQueue(id)[0] == w
	m.queue = slices.DeleteFunc(m.queue, func(x *Waiter) bool { return x == w })
	delete(m.vt, w)
	delete(m.at, w)
	if m.o.Policy == PolicyFair {
		switch {
		case granted:
			m.select1(id)
			if w == m.promoted {
				m.promotions++
			}
			m.deficit[id] -= w.Slots
			m.heldKey[id] += w.Slots
			m.changed(id)
		case wasHead:
			m.update(id)
		}
		m.forget(id)
	}
}

func (m *pmodel) grant() (out []*Waiter) {
	for {
		w := m.next()
		if w == nil || m.capacity-m.inUse < w.Slots {
			return out
		}
		m.inUse += w.Slots
		m.held[w.Tenant] += w.Slots
		m.remove(w, true)
		out = append(out, w)
	}
}

// take counts n slots granted at once or restored.
func (m *pmodel) take(id sid, n int64) {
	m.inUse += n
	m.held[id.t] += n
	if m.o.Policy == PolicyFair {
		m.activate(id)
		m.heldKey[id] += n
		m.changed(id)
	}
}

func (m *pmodel) release(id sid, n int64) []*Waiter {
	m.inUse -= n
	m.held[id.t] -= n
	if m.o.Policy == PolicyFair {
		m.heldKey[id] -= n
		m.changed(id)
		m.forget(id)
	}
	return m.grant()
}

// scheduler is the model's SchedulerStats: the totals, and per share the
// counts, the rest of each KeyStats as Pool's, which the model does not
// play (Scheduler's other figures are checked in TestScheduler).
func (m *pmodel) scheduler() SchedulerStats {
	st := SchedulerStats{Selected: m.totSel, Deferred: m.totDef, StarvationPromotions: m.promotions}
	for tn, keys := range m.order {
		for _, k := range keys {
			id := sid{tn, k}
			st.Keys = append(st.Keys, KeyStats{Tenant: tn, Key: k, Selected: m.selected[id], Deferred: m.deferred[id]})
		}
	}
	slices.SortFunc(st.Keys, func(a, b KeyStats) int { return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key)) })
	return st
}

// rank is Position by brute force: fifo and priority sort; fair plays the
// rounds on a copy of the state, ignoring capacity, caps and ages.
func (m *pmodel) rank(w *Waiter) int {
	switch m.o.Policy {
	case PolicyFIFO:
		return slices.Index(m.queue, w) + 1
	case PolicyLIFO:
		return len(m.queue) - slices.Index(m.queue, w)
	case PolicyPriority:
		r := 1
		for _, x := range m.queue {
			if m.less(x, w) {
				r++
			}
		}
		return r
	}
	ring := slices.Clone(m.ring)
	if !slices.Contains(ring, sidOf(w)) {
		ring = append(ring, sidOf(w))
	}
	deficit, started := maps.Clone(m.deficit), maps.Clone(m.started)
	queues := map[sid][]*Waiter{}
	for _, id := range ring {
		queues[id] = m.shareQueue(id)
	}
	served := 0
	for len(ring) > 0 {
		id := ring[0]
		if !started[id] {
			deficit[id] += m.quantum(id)
			started[id] = true
		}
		for len(queues[id]) > 0 && queues[id][0].Slots <= deficit[id] {
			x := queues[id][0]
			queues[id] = queues[id][1:]
			deficit[id] -= x.Slots
			served++
			if x == w {
				return served
			}
		}
		started[id] = false
		ring = ring[1:]
		if len(queues[id]) > 0 {
			ring = append(ring, id)
		}
	}
	panic("model: waiter not found")
}

func (m *pmodel) stats() Stats {
	s := Stats{Capacity: m.capacity, InUse: m.inUse, Available: max(0, m.capacity-m.inUse), QueuedRequests: len(m.queue),
		MaxQueue: m.o.MaxQueue, TenantCap: m.o.TenantCap, KeyCap: m.o.KeyCap}
	if m.o.Policy != PolicyFIFO {
		s.Policy = m.o.Policy
	}
	if m.o.OnFull == OnFullDropOldest {
		s.OnFull = m.o.OnFull
	}
	s.FailFast = m.o.FailFast
	for _, w := range m.queue {
		s.QueuedSlots += w.Slots
	}
	return s
}

func (m *pmodel) tenants() []TenantStats {
	byName := map[string]*TenantStats{}
	get := func(tn string) *TenantStats {
		if byName[tn] == nil {
			byName[tn] = &TenantStats{Tenant: tn}
			if m.o.Policy == PolicyFair {
				byName[tn].Weight = int(m.weight(tn))
			}
		}
		return byName[tn]
	}
	for tn, n := range m.held {
		if n != 0 {
			get(tn).InUse = n
		}
	}
	for _, w := range m.queue {
		s := get(w.Tenant)
		s.QueuedRequests++
		s.QueuedSlots += w.Slots
	}
	out := []TenantStats{}
	for _, tn := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, *byName[tn])
	}
	return out
}

// uniform reports whether each share's queued requests are of one size,
// when the fair policy's positions are exact, and no request has aged
// past StarvationAge, which positions do not foresee.
func (m *pmodel) uniform() bool {
	size := map[sid]int64{}
	for _, w := range m.queue {
		if s, ok := size[sidOf(w)]; ok && s != w.Slots {
			return false
		}
		size[sidOf(w)] = w.Slots
	}
	return m.o.StarvationAge == 0
}

// TestRandomPolicies drives pools of every policy with random operations
// and compares every result (grants in order, rejections, errors,
// positions, stats and per-tenant counts) with the naive model, checking
// the invariants after each step.
func TestRandomPolicies(t *testing.T) {
	type config struct {
		name    string
		o       Options
		uniform bool // each share always asks for the same size
		keys    bool // requests carry fairness keys
	}
	var configs []config
	for _, pol := range allPolicies {
		configs = append(configs,
			config{name: string(pol), o: Options{Policy: pol}},
			config{name: string(pol) + "/maxqueue", o: Options{Policy: pol, MaxQueue: 6}},
			config{name: string(pol) + "/drop_oldest", o: Options{Policy: pol, MaxQueue: 4, OnFull: OnFullDropOldest}},
			config{name: string(pol) + "/fail_fast", o: Options{Policy: pol, FailFast: true}},
			config{name: string(pol) + "/uniform", o: Options{Policy: pol}, uniform: true},
		)
	}
	weights := map[string]int{"a": 3, "b": 1, "c": 2}
	configs = append(configs,
		config{name: "fair/weights", o: Options{Policy: PolicyFair, Weights: weights, DefaultWeight: 2}},
		config{name: "fair/weights/uniform", o: Options{Policy: PolicyFair, Weights: weights}, uniform: true},
		config{name: "fair/cap", o: Options{Policy: PolicyFair, Weights: weights, TenantCap: 4, MaxQueue: 10}},
		config{name: "fair/cap/uniform", o: Options{Policy: PolicyFair, TenantCap: 3}, uniform: true},
		config{name: "priority/step", o: Options{Policy: PolicyPriority, AgingStep: 3 * time.Second}},
		// Fairness keys (every policy takes them; only fair shares by them),
		// per-key caps, quanta and starvation ages.
		config{name: "fifo/keys", o: Options{Policy: PolicyFIFO}, keys: true},
		config{name: "priority/keys", o: Options{Policy: PolicyPriority}, keys: true},
		config{name: "fair/keys", o: Options{Policy: PolicyFair, Weights: map[string]int{"x": 3, "a": 2}}, keys: true},
		config{name: "fair/keys/uniform", o: Options{Policy: PolicyFair, Weights: map[string]int{"y": 2}}, keys: true, uniform: true},
		config{name: "fair/keycap", o: Options{Policy: PolicyFair, KeyCap: 3}, keys: true},
		config{name: "fair/keycap/uniform", o: Options{Policy: PolicyFair, KeyCap: 4, MaxQueue: 12}, keys: true, uniform: true},
		config{name: "fair/keycap/tenantcap", o: Options{Policy: PolicyFair, KeyCap: 2, TenantCap: 3, Weights: weights}, keys: true},
		config{name: "fair/keycap/notenantkeys", o: Options{Policy: PolicyFair, KeyCap: 2}},
		config{name: "fair/quantum", o: Options{Policy: PolicyFair, Quantum: 3, Weights: weights}, keys: true},
		config{name: "fair/quantum/uniform", o: Options{Policy: PolicyFair, Quantum: 2}, keys: true, uniform: true},
		config{name: "fair/starvation", o: Options{Policy: PolicyFair, StarvationAge: 4 * time.Second, Weights: weights}, keys: true},
		config{name: "fair/starvation/caps", o: Options{Policy: PolicyFair, StarvationAge: 2 * time.Second, KeyCap: 3, TenantCap: 4, Quantum: 2}, keys: true},
	)
	tenantNames := []string{"", "a", "b", "c", "d"}
	sizeOf := map[string]int64{"": 1, "a": 2, "b": 1, "c": 3, "d": 1}
	keyNames := []string{"", "x", "y"}
	keySize := map[string]int64{"": 0, "x": 0, "y": 1}

	for _, cf := range configs {
		t.Run(cf.name, func(t *testing.T) {
			seeds := uint64(6)
			if testing.Short() {
				seeds = 3
			}
			for seed := range seeds {
				r := rand.New(rand.NewPCG(seed, 7))
				clock := newClock()
				o := cf.o
				o.Now = clock.Now
				p := mustNew(t, 8, o)
				m := newModel(8, o)
				var held []*Waiter
				fail := func(step int, format string, args ...any) {
					t.Helper()
					t.Fatalf("seed %d step %d: %s", seed, step, fmt.Sprintf(format, args...))
				}
				settled := true // false from a RestoreFor to the next grant
				for step := range 1500 {
					switch op := r.IntN(100); {
					case op < 38:
						tn := tenantNames[r.IntN(len(tenantNames))]
						key := ""
						if cf.keys {
							key = keyNames[r.IntN(len(keyNames))]
						}
						id := sid{tn, key}
						n := 1 + r.Int64N(5)
						if cf.uniform {
							n = sizeOf[tn] + keySize[key]
						}
						req := Request{Slots: n, Tenant: tn, Key: key, Priority: r.IntN(3) - 1, Value: step}
						vt := m.vtime(req.Priority)
						invalid := n > m.capacity || (m.o.TenantCap > 0 && n > m.o.TenantCap) || (m.o.KeyCap > 0 && n > m.o.KeyCap)
						now := !invalid && m.grantable(id, n, vt)
						if r.IntN(4) == 0 {
							w, err := p.TryAcquireRequest(req)
							switch {
							case invalid:
								if !errors.Is(err, ErrExceedsCapacity) || w != nil {
									fail(step, "TryAcquireRequest(%+v) = %v, %v; want ErrExceedsCapacity", req, w, err)
								}
							case !now:
								if !errors.Is(err, ErrWouldWait) || w != nil {
									fail(step, "TryAcquireRequest(%+v) = %v, %v; want ErrWouldWait", req, w, err)
								}
							default:
								if err != nil || w == nil || !w.Granted() || w.Tenant != tn || w.Key != key {
									fail(step, "TryAcquireRequest(%+v) = %+v, %v; want granted", req, w, err)
								}
								m.take(id, n)
								m.select1(id)
								held = append(held, w)
							}
							break
						}
						var w *Waiter
						var granted bool
						var pos int
						var err error
						full := m.o.MaxQueue > 0 && len(m.queue) >= m.o.MaxQueue
						if m.o.OnFull == OnFullDropOldest || r.IntN(2) == 0 {
							// Admit: EnqueueRequest, but for a full drop_oldest queue.
							a, aerr := p.Admit(req)
							w, granted, pos, err = a.Waiter, a.Granted, a.Position, aerr
							var wantDropped *Waiter
							var wantLet []*Waiter
							if !invalid && !now && full && m.o.OnFull == OnFullDropOldest {
								wantDropped = m.queue[0] // the first to arrive
								m.remove(wantDropped, false)
								wantLet = m.grant()
								now = m.grantable(id, n, vt)
								full = false
							}
							if a.Dropped != wantDropped || !sameWaiters(a.Let, wantLet) {
								fail(step, "Admit(%+v) dropped %v, let %v; want %v, %v", req, a.Dropped, values(a.Let), wantDropped, values(wantLet))
							}
							if a.Dropped != nil && (a.Dropped.Granted() || p.Position(a.Dropped) != 0) {
								fail(step, "dropped waiter still queued or granted")
							}
							held = append(held, a.Let...)
						} else {
							w, granted, pos, err = p.EnqueueRequest(req)
						}
						switch {
						case invalid:
							if !errors.Is(err, ErrExceedsCapacity) || w != nil {
								fail(step, "EnqueueRequest(%+v) = %v, %v; want ErrExceedsCapacity", req, w, err)
							}
						case now:
							if err != nil || !granted || pos != 0 || w.Tenant != tn || w.Key != key || w.Priority != req.Priority || !w.Granted() {
								fail(step, "EnqueueRequest(%+v) = %+v, %t, %d, %v; want granted at once", req, w, granted, pos, err)
							}
							m.take(id, n)
							m.select1(id)
							held = append(held, w)
						case m.o.FailFast:
							if !errors.Is(err, ErrWouldWait) || w != nil {
								fail(step, "EnqueueRequest(%+v) = %v, %v; want ErrWouldWait (fail fast)", req, w, err)
							}
						case full:
							if !errors.Is(err, ErrQueueFull) || w != nil {
								fail(step, "EnqueueRequest(%+v) = %v, %v; want ErrQueueFull", req, w, err)
							}
						default:
							if err != nil || granted || w.Tenant != tn || w.Key != key || w.Priority != req.Priority || w.Granted() {
								fail(step, "EnqueueRequest(%+v) = %+v, %t, %d, %v; want queued", req, w, granted, pos, err)
							}
							m.push(w, vt)
							if m.o.Policy != PolicyFair || m.uniform() {
								if want := m.rank(w); pos != want {
									fail(step, "EnqueueRequest(%+v) position %d, want %d\n%s", req, pos, want, dumpFair(p))
								}
							} else if pos < 1 || pos > len(m.queue) {
								fail(step, "EnqueueRequest(%+v) position %d of %d", req, pos, len(m.queue))
							}
						}
					case op < 65:
						if len(held) == 0 {
							continue
						}
						i := r.IntN(len(held))
						w := held[i]
						held = slices.Delete(held, i, i+1)
						got := p.ReleaseKey(w.Tenant, w.Key, w.Slots)
						want := m.release(sidOf(w), w.Slots)
						settled = true
						if !sameWaiters(got, want) {
							fail(step, "ReleaseKey(%q, %q, %d) granted %v, want %v\n%s", w.Tenant, w.Key, w.Slots, values(got), values(want), dumpFair(p))
						}
						held = append(held, got...)
					case op < 78:
						if len(m.queue) == 0 {
							continue
						}
						w := m.queue[r.IntN(len(m.queue))]
						removed, got := p.Cancel(w)
						m.remove(w, false)
						want := m.grant()
						settled = settled || m.o.Policy != PolicyFIFO
						if !removed || !sameWaiters(got, want) {
							fail(step, "Cancel = %t, %v; want true, %v", removed, values(got), values(want))
						}
						held = append(held, got...)
						if again, _ := p.Cancel(w); again {
							fail(step, "second Cancel removed")
						}
					case op < 86:
						if len(m.queue) == 0 {
							continue
						}
						w := m.queue[r.IntN(len(m.queue))]
						got := p.Position(w)
						if m.o.Policy != PolicyFair || m.uniform() {
							if want := m.rank(w); got != want {
								fail(step, "Position = %d, want %d\n%s", got, want, dumpFair(p))
							}
						} else if got < 1 || got > len(m.queue) {
							fail(step, "Position = %d of %d", got, len(m.queue))
						}
					case op < 90:
						c := 3 + r.Int64N(8)
						got, gotRej := p.SetCapacity(c)
						m.capacity = c
						var wantRej []*Waiter
						for _, w := range slices.Clone(m.queue) {
							if w.Slots > c {
								wantRej = append(wantRej, w)
								m.remove(w, false)
							}
						}
						want := m.grant()
						settled = true
						if !sameWaiters(got, want) || !sameWaiters(gotRej, wantRej) {
							fail(step, "SetCapacity(%d) = %v, %v; want %v, %v", c, values(got), values(gotRej), values(want), values(wantRej))
						}
						held = append(held, got...)
					case op < 93:
						tn := tenantNames[r.IntN(len(tenantNames))]
						key := ""
						if cf.keys {
							key = keyNames[r.IntN(len(keyNames))]
						}
						n := 1 + r.Int64N(2)
						if m.capped(sid{tn, key}, n) {
							continue
						}
						p.RestoreKey(tn, key, n)
						m.take(sid{tn, key}, n)
						held = append(held, &Waiter{Slots: n, Tenant: tn, Key: key})
						settled = false
					default:
						clock.Advance(time.Duration(r.IntN(5000)) * time.Millisecond)
					}
					if got, want := p.Stats(), m.stats(); got != want {
						fail(step, "Stats = %+v, want %+v", got, want)
					}
					if got, want := p.Tenants(), m.tenants(); !slices.Equal(got, want) {
						fail(step, "Tenants = %+v, want %+v", got, want)
					}
					if m.o.Policy == PolicyFair {
						got, want := *p.Scheduler(1000), m.scheduler()
						keys := make([]KeyStats, len(got.Keys))
						for i, k := range got.Keys {
							keys[i] = KeyStats{Tenant: k.Tenant, Key: k.Key, Selected: k.Selected, Deferred: k.Deferred}
						}
						if got.Selected != want.Selected || got.Deferred != want.Deferred ||
							got.StarvationPromotions != want.StarvationPromotions || !slices.Equal(keys, want.Keys) {
							fail(step, "Scheduler counts = %d/%d/%d %+v, want %d/%d/%d %+v", got.Selected, got.Deferred, got.StarvationPromotions, keys,
								want.Selected, want.Deferred, want.StarvationPromotions, want.Keys)
						}
					}
					checkPolicy(t, p, settled)
					if t.Failed() {
						fail(step, "invariants broken")
					}
				}
			}
		})
	}
}

// dumpFair describes a fair pool's round and queues, for failure messages.
func dumpFair(p *Pool) string {
	f, ok := p.q.(*fairQueue)
	if !ok {
		return ""
	}
	s := fmt.Sprintf("capacity %d, in use %d, tenant cap %d, key cap %d\nround:", p.capacity, p.inUse, p.opts.TenantCap, p.opts.KeyCap)
	for e := f.ring.Front(); e != nil; e = e.Next() {
		sh := e.Value.(*share)
		s += fmt.Sprintf(" %q/%q(quantum %d, deficit %d, started %t)", sh.t.name, sh.key, sh.quantum, sh.deficit, sh.started)
	}
	all := []*tenant{&p.anon}
	for _, name := range slices.Sorted(maps.Keys(p.tenants)) {
		all = append(all, p.tenants[name])
	}
	for _, t := range all {
		s += fmt.Sprintf("\n  %q in use %d", t.name, t.inUse)
		for e := t.shares.Front(); e != nil; e = e.Next() {
			sh := e.Value.(*share)
			s += fmt.Sprintf("\n    key %q in use %d, queued:", sh.key, sh.inUse)
			for e := sh.waiters.Front(); e != nil; e = e.Next() {
				s += fmt.Sprintf(" %d", e.Value.(*Waiter).Slots)
			}
		}
	}
	return s
}

package pools

import (
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
		inRing := map[*tenant]bool{}
		for e := q.ring.Front(); e != nil; e = e.Next() {
			tn := e.Value.(*tenant)
			if tn.ring != e || inRing[tn] {
				t.Errorf("ring element of %q inconsistent", tn.name)
			}
			inRing[tn] = true
			if tn.started && e != q.ring.Front() {
				t.Errorf("tenant %q started but not at the front", tn.name)
			}
		}
		for _, tn := range all {
			var lastSeq uint64
			for e := tn.waiters.Front(); e != nil; e = e.Next() {
				w := e.Value.(*Waiter)
				if w.elem != e || w.t != tn || w.seq <= lastSeq {
					t.Errorf("tenant %q queue broken at seq %d", tn.name, w.seq)
				}
				lastSeq = w.seq
			}
			want := tn.queued > 0 && !q.capped(tn)
			if want != inRing[tn] || (tn.ring != nil) != inRing[tn] {
				t.Errorf("tenant %q in ring %t, want %t (queued %d, in use %d)", tn.name, inRing[tn], want, tn.queued, tn.inUse)
			}
			if !inRing[tn] && (tn.deficit != 0 || tn.started) {
				t.Errorf("tenant %q out of the ring keeps deficit %d, started %t", tn.name, tn.deficit, tn.started)
			}
		}
		if e := q.ring.Front(); e != nil && settled {
			tn := e.Value.(*tenant)
			h := head(tn)
			if !tn.started || h.Slots > tn.deficit {
				t.Errorf("front %q not settled: started %t, head %d, deficit %d", tn.name, tn.started, h.Slots, tn.deficit)
			}
			if free >= h.Slots {
				t.Errorf("fair next (%q, %d slots) fits (free %d) but was not granted", tn.name, h.Slots, free)
			}
		}
	}
}

// pmodel is a naive reference implementation of every policy: a slice of
// waiters in arrival order and brute-force searches. Its fair policy plays
// deficit round robin one turn at a time, without Pool's round skipping
// or closed-form positions.
type pmodel struct {
	o        Options
	epoch    time.Time
	capacity int64
	inUse    int64
	held     map[string]int64
	queue    []*Waiter         // arrival order
	vt       map[*Waiter]int64 // priority keys, computed by the model

	ring    []string // fair
	deficit map[string]int64
	started map[string]bool
}

func newModel(capacity int64, o Options) *pmodel {
	o, _ = o.normalize()
	return &pmodel{o: o, epoch: o.Now(), capacity: capacity, held: map[string]int64{}, vt: map[*Waiter]int64{},
		deficit: map[string]int64{}, started: map[string]bool{}}
}

func (m *pmodel) weight(tn string) int64 {
	if w, ok := m.o.Weights[tn]; ok {
		return int64(w)
	}
	return int64(m.o.DefaultWeight)
}

func (m *pmodel) vtime(prio int) int64 {
	if m.o.Policy != PolicyPriority {
		return 0
	}
	return int64(m.o.Now().Sub(m.epoch)) - int64(prio)*int64(m.o.AgingStep)
}

func (m *pmodel) tenantQueue(tn string) []*Waiter {
	var out []*Waiter
	for _, w := range m.queue {
		if w.Tenant == tn {
			out = append(out, w)
		}
	}
	return out
}

func (m *pmodel) inRing(tn string) bool { return slices.Contains(m.ring, tn) }

func (m *pmodel) update(tn string) {
	q := m.tenantQueue(tn)
	in := len(q) > 0 && (m.o.TenantCap == 0 || m.held[tn]+q[0].Slots <= m.o.TenantCap)
	switch {
	case in && !m.inRing(tn):
		m.ring = append(m.ring, tn)
	case !in && m.inRing(tn):
		m.ring = slices.DeleteFunc(m.ring, func(s string) bool { return s == tn })
		m.deficit[tn], m.started[tn] = 0, false
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
		for range 1_000_000 {
			if len(m.ring) == 0 {
				return nil
			}
			tn := m.ring[0]
			if !m.started[tn] {
				m.deficit[tn] += m.weight(tn)
				m.started[tn] = true
			}
			if h := m.tenantQueue(tn)[0]; h.Slots <= m.deficit[tn] {
				return h
			}
			m.started[tn] = false
			m.ring = append(m.ring[1:], tn)
		}
		panic("model: round robin does not terminate")
	}
	return nil
}

func (m *pmodel) first(tn string, n int64, vt int64) bool {
	switch m.o.Policy {
	case PolicyFIFO:
		return len(m.queue) == 0
	case PolicyLIFO:
		return true
	case PolicyPriority:
		h := m.next()
		return h == nil || vt < m.vt[h]
	default:
		return len(m.ring) == 0 && len(m.tenantQueue(tn)) == 0 && (m.o.TenantCap == 0 || m.held[tn]+n <= m.o.TenantCap)
	}
}

func (m *pmodel) grantable(tn string, n int64, vt int64) bool {
	return m.capacity-m.inUse >= n && m.first(tn, n, vt)
}

func (m *pmodel) push(w *Waiter, vt int64) {
	m.queue = append(m.queue, w)
	m.vt[w] = vt
	if m.o.Policy == PolicyFair {
		if len(m.tenantQueue(w.Tenant)) == 1 {
			m.update(w.Tenant)
		}
		m.next()
	}
}

func (m *pmodel) remove(w *Waiter, granted bool) {
	wasHead := m.tenantQueue(w.Tenant)[0] == w
	m.queue = slices.DeleteFunc(m.queue, func(x *Waiter) bool { return x == w })
	delete(m.vt, w)
	if m.o.Policy == PolicyFair {
		if granted {
			m.deficit[w.Tenant] -= w.Slots
		}
		if wasHead {
			m.update(w.Tenant)
		}
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

func (m *pmodel) release(tn string, n int64) []*Waiter {
	m.inUse -= n
	m.held[tn] -= n
	if m.o.Policy == PolicyFair && len(m.tenantQueue(tn)) > 0 {
		m.update(tn)
	}
	return m.grant()
}

// rank is Position by brute force: fifo and priority sort; fair plays the
// rounds on a copy of the state, ignoring capacity and caps.
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
	if !slices.Contains(ring, w.Tenant) {
		ring = append(ring, w.Tenant)
	}
	deficit, started := maps.Clone(m.deficit), maps.Clone(m.started)
	queues := map[string][]*Waiter{}
	for _, tn := range ring {
		queues[tn] = m.tenantQueue(tn)
	}
	served := 0
	for len(ring) > 0 {
		tn := ring[0]
		if !started[tn] {
			deficit[tn] += m.weight(tn)
			started[tn] = true
		}
		for len(queues[tn]) > 0 && queues[tn][0].Slots <= deficit[tn] {
			x := queues[tn][0]
			queues[tn] = queues[tn][1:]
			deficit[tn] -= x.Slots
			served++
			if x == w {
				return served
			}
		}
		started[tn] = false
		ring = ring[1:]
		if len(queues[tn]) > 0 {
			ring = append(ring, tn)
		}
	}
	panic("model: waiter not found")
}

func (m *pmodel) stats() Stats {
	s := Stats{Capacity: m.capacity, InUse: m.inUse, Available: max(0, m.capacity-m.inUse), QueuedRequests: len(m.queue),
		MaxQueue: m.o.MaxQueue, TenantCap: m.o.TenantCap}
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

// uniform reports whether each tenant's queued requests are of one size,
// when the fair policy's positions are exact.
func (m *pmodel) uniform() bool {
	size := map[string]int64{}
	for _, w := range m.queue {
		if s, ok := size[w.Tenant]; ok && s != w.Slots {
			return false
		}
		size[w.Tenant] = w.Slots
	}
	return true
}

// TestRandomPolicies drives pools of every policy with random operations
// and compares every result (grants in order, rejections, errors,
// positions, stats and per-tenant counts) with the naive model, checking
// the invariants after each step.
func TestRandomPolicies(t *testing.T) {
	type config struct {
		name    string
		o       Options
		uniform bool // each tenant always asks for the same size
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
	)
	tenantNames := []string{"", "a", "b", "c", "d"}
	sizeOf := map[string]int64{"": 1, "a": 2, "b": 1, "c": 3, "d": 1}

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
						n := 1 + r.Int64N(5)
						if cf.uniform {
							n = sizeOf[tn]
						}
						req := Request{Slots: n, Tenant: tn, Priority: r.IntN(3) - 1, Value: step}
						vt := m.vtime(req.Priority)
						invalid := n > m.capacity || (m.o.TenantCap > 0 && n > m.o.TenantCap)
						now := !invalid && m.grantable(tn, n, vt)
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
								if err != nil || w == nil || !w.Granted() || w.Tenant != tn {
									fail(step, "TryAcquireRequest(%+v) = %+v, %v; want granted", req, w, err)
								}
								m.inUse += n
								m.held[tn] += n
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
								now = m.grantable(tn, n, vt)
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
							if err != nil || !granted || pos != 0 || w.Tenant != tn || w.Priority != req.Priority || !w.Granted() {
								fail(step, "EnqueueRequest(%+v) = %+v, %t, %d, %v; want granted at once", req, w, granted, pos, err)
							}
							m.inUse += n
							m.held[tn] += n
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
							if err != nil || granted || w.Tenant != tn || w.Priority != req.Priority || w.Granted() {
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
						got := p.ReleaseFor(w.Tenant, w.Slots)
						want := m.release(w.Tenant, w.Slots)
						settled = true
						if !sameWaiters(got, want) {
							fail(step, "ReleaseFor(%q, %d) granted %v, want %v", w.Tenant, w.Slots, values(got), values(want))
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
						n := 1 + r.Int64N(2)
						if c := m.o.TenantCap; c > 0 && m.held[tn]+n > c {
							continue
						}
						p.RestoreFor(tn, n)
						m.inUse += n
						m.held[tn] += n
						if m.o.Policy == PolicyFair && len(m.tenantQueue(tn)) > 0 {
							m.update(tn)
						}
						held = append(held, &Waiter{Slots: n, Tenant: tn})
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
	s := fmt.Sprintf("capacity %d, in use %d, tenant cap %d\nround:", p.capacity, p.inUse, p.opts.TenantCap)
	for e := f.ring.Front(); e != nil; e = e.Next() {
		t := e.Value.(*tenant)
		s += fmt.Sprintf(" %q(weight %d, deficit %d, started %t)", t.name, t.weight, t.deficit, t.started)
	}
	all := []*tenant{&p.anon}
	for _, name := range slices.Sorted(maps.Keys(p.tenants)) {
		all = append(all, p.tenants[name])
	}
	for _, t := range all {
		s += fmt.Sprintf("\n  %q in use %d, queued:", t.name, t.inUse)
		for e := t.waiters.Front(); e != nil; e = e.Next() {
			s += fmt.Sprintf(" %d", e.Value.(*Waiter).Slots)
		}
	}
	return s
}

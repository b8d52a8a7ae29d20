package manager

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
)

// Runtime resize: pools can be resized, added and removed without a
// restart. The changes are kept as a delta against the configured pools
// (POOL_CAPACITIES), stored under the node's key in the pool bucket, and
// applied on top of the configured pools at every start, so a changed
// POOL_CAPACITIES still takes effect for pools no resize touched.

// poolDelta is the stored runtime change against the configured pools.
type poolDelta struct {
	Set     map[string]int64             `json:"set,omitempty"`
	Rates   map[string]lease.RateSetting `json:"rates,omitempty"` // Rate is never ""
	Removed []string                     `json:"removed,omitempty"`
}

// empty reports whether d changes nothing.
func (d poolDelta) empty() bool { return len(d.Set) == 0 && len(d.Rates) == 0 && len(d.Removed) == 0 }

func (d poolDelta) clone() poolDelta {
	return poolDelta{Set: maps.Clone(d.Set), Rates: maps.Clone(d.Rates), Removed: slices.Clone(d.Removed)}
}

// poolShape is what a resize can change of a pool.
type poolShape struct {
	Capacity int64
	Rate     pools.Rate
	Burst    int64 // with its default filled in
}

func (s poolShape) String() string {
	if s.Rate == (pools.Rate{}) {
		return fmt.Sprintf("capacity %d", s.Capacity)
	}
	return fmt.Sprintf("capacity %d, rate %s", s.Capacity, s.rate())
}

func (s poolShape) rate() string {
	if s.Rate == (pools.Rate{}) {
		return lease.RateOff
	}
	return fmt.Sprintf("%v burst %d", s.Rate, s.Burst)
}

// change says what changed from s to t, as resized events do:
// "capacity 1 -> 2", "rate off -> 60/m burst 1", or both, comma-separated.
func (s poolShape) change(t poolShape) string {
	var out []string
	if s.Capacity != t.Capacity {
		out = append(out, fmt.Sprintf("capacity %d -> %d", s.Capacity, t.Capacity))
	}
	if s.rate() != t.rate() {
		out = append(out, fmt.Sprintf("rate %s -> %s", s.rate(), t.rate()))
	}
	return strings.Join(out, ", ")
}

// effective applies d to the configured pools. A stored rate that no
// longer parses (written by another version) is skipped.
func (d poolDelta) effective(base []PoolConfig) map[string]poolShape {
	out := make(map[string]poolShape, len(base)+len(d.Set))
	for _, p := range base {
		out[p.Name] = shapeOf(p)
	}
	for _, name := range d.Removed {
		delete(out, name)
	}
	for name, c := range d.Set {
		s, ok := out[name]
		if !ok {
			s = configured(base, name)
		}
		s.Capacity = c
		out[name] = s
	}
	for name, rs := range d.Rates {
		s, ok := out[name]
		if !ok {
			s = configured(base, name)
			if s.Capacity == 0 {
				s.Capacity = pools.MaxCapacity // a pool with only a rate
			}
		}
		r, burst, err := parseRateSetting(rs)
		if err != nil {
			continue
		}
		s.Rate, s.Burst = r, burst
		out[name] = s
	}
	return out
}

// configured is a configured pool's shape, or the zero shape.
func configured(base []PoolConfig, name string) poolShape {
	for _, p := range base {
		if p.Name == name {
			return shapeOf(p)
		}
	}
	return poolShape{}
}

// shapeOf is a configured pool's shape, its burst's default filled in (the
// Manager checked its options when it made the pool).
func shapeOf(p PoolConfig) poolShape {
	burst, _ := pools.CheckRate(p.Options.Rate, p.Options.Burst)
	return poolShape{Capacity: p.Capacity, Rate: p.Options.Rate, Burst: burst}
}

// parse turns a setting with a Rate into a rate and its burst.
func parseRateSetting(rs lease.RateSetting) (pools.Rate, int64, error) {
	if rs.Rate == lease.RateOff {
		if rs.Burst != 0 {
			return pools.Rate{}, 0, fmt.Errorf("a burst without a rate (rate %q)", lease.RateOff)
		}
		return pools.Rate{}, 0, nil
	}
	r, err := rules.ParseRate(rs.Rate)
	if err != nil {
		return pools.Rate{}, 0, err
	}
	if rs.Burst < 0 || rs.Burst > pools.MaxCapacity {
		return pools.Rate{}, 0, fmt.Errorf("burst must be between 1 and %d, got %d", int64(pools.MaxCapacity), rs.Burst)
	}
	burst, err := pools.CheckRate(r, rs.Burst) // 0: the default; refuses what the bucket cannot hold
	return r, burst, err
}

func (m *Manager) handleResize(msg *nats.Msg) {
	var req lease.ResizeRequest
	if e := decodeResize(msg.Data, &req); e != nil {
		m.disc.respondResize(msg.Reply, errReply(e))
		return
	}
	if e := validateResize(&req); e != nil {
		m.disc.respondResize(msg.Reply, errReply(e))
		return
	}
	// Resizes are rare: holding the lock across the store write keeps the
	// check, the stored delta and the applied change one step.
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		m.disc.respondResize(msg.Reply, errReply(closingError(m.cfg.Node)))
		return
	}
	d := m.delta.clone()
	if req.Reset {
		d = poolDelta{}
	}
	for name, c := range req.Set {
		if d.Set == nil {
			d.Set = map[string]int64{}
		}
		d.Set[name] = c
		d.Removed = slices.DeleteFunc(d.Removed, func(n string) bool { return n == name })
	}
	for _, name := range slices.Sorted(maps.Keys(req.Rates)) {
		rs := req.Rates[name]
		if rs.Rate == "" {
			// The burst alone: keep the rate the pool has by now.
			cur := d.effective(m.cfg.Pools)[name]
			if cur.Rate == (pools.Rate{}) {
				m.disc.respondResize(msg.Reply, errReply(errorf(lease.CodeBadRequest, "rates: pool %q has no rate whose burst to change: give the rate too", name)))
				return
			}
			rs.Rate = cur.Rate.String()
			if _, _, err := parseRateSetting(rs); err != nil {
				m.disc.respondResize(msg.Reply, errReply(errorf(lease.CodeBadRequest, "rates: pool %q: %v", name, err)))
				return
			}
		}
		if d.Rates == nil {
			d.Rates = map[string]lease.RateSetting{}
		}
		d.Rates[name] = rs
		d.Removed = slices.DeleteFunc(d.Removed, func(n string) bool { return n == name })
	}
	for _, name := range req.Remove {
		if m.pools[name] == nil {
			m.disc.respondResize(msg.Reply, errReply(errorf(lease.CodeUnknownPool, "node %s has no pool %q to remove", m.cfg.Node, name)))
			return
		}
		delete(d.Set, name)
		delete(d.Rates, name)
		if slices.ContainsFunc(m.cfg.Pools, func(p PoolConfig) bool { return p.Name == name }) && !slices.Contains(d.Removed, name) {
			d.Removed = append(d.Removed, name)
		}
	}
	target := d.effective(m.cfg.Pools)
	if !req.Force {
		var busy []string
		for name, p := range m.pools {
			if _, keep := target[name]; keep {
				continue
			}
			if s := p.p.Stats(); s.InUse > 0 || s.QueuedRequests > 0 {
				busy = append(busy, fmt.Sprintf("%s (%d in use, %d queued)", name, s.InUse, s.QueuedRequests))
			}
		}
		if len(busy) > 0 {
			sort.Strings(busy)
			m.disc.respondResize(msg.Reply, errReply(errorf(lease.CodePoolBusy, "cannot remove pools with holders or waiters without force: %s", strings.Join(busy, ", "))))
			return
		}
	}
	if m.deltas != nil {
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
		err := m.deltas.put(ctx, d)
		cancel()
		if err != nil {
			m.disc.respondResize(msg.Reply, errReply(errorf(lease.CodeUnavailable, "storing the pool change failed, nothing changed: %v", err)))
			return
		}
	}
	m.delta = d
	m.applyLocked(target, false)
	m.disc.respondResize(msg.Reply, lease.Reply{Status: lease.StatusOK, Node: m.cfg.Node, Pools: poolStats(m.pools, m.tally)})
}

func validateResize(req *lease.ResizeRequest) *lease.Error {
	if len(req.Set) == 0 && len(req.Rates) == 0 && len(req.Remove) == 0 && !req.Reset {
		return errorf(lease.CodeBadRequest, "nothing to change: give set, rates, remove or reset")
	}
	for _, name := range slices.Sorted(maps.Keys(req.Rates)) {
		rs := req.Rates[name]
		if err := rules.ValidToken(name); err != nil {
			return errorf(lease.CodeBadRequest, "rates: pool %q: %v", name, err)
		}
		if rs.Burst < 0 || rs.Burst > pools.MaxCapacity {
			return errorf(lease.CodeBadRequest, "rates: pool %q: burst must be between 1 and %d, got %d", name, int64(pools.MaxCapacity), rs.Burst)
		}
		if rs.Rate == "" {
			if rs.Burst == 0 {
				return errorf(lease.CodeBadRequest, "rates: pool %q: give a rate (e.g. 60/m, or %q), a burst, or both", name, lease.RateOff)
			}
			continue // the burst alone; checked against the pool's rate
		}
		if _, _, err := parseRateSetting(rs); err != nil {
			return errorf(lease.CodeBadRequest, "rates: pool %q: %v", name, err)
		}
		if slices.Contains(req.Remove, name) {
			return errorf(lease.CodeBadRequest, "pool %q is both given a rate and removed", name)
		}
	}
	for name, c := range req.Set {
		if err := rules.ValidToken(name); err != nil {
			return errorf(lease.CodeBadRequest, "set: pool %q: %v", name, err)
		}
		if c <= 0 || c > pools.MaxCapacity {
			return errorf(lease.CodeBadRequest, "set: pool %q: capacity must be between 1 and %d, got %d", name, int64(pools.MaxCapacity), c)
		}
	}
	for _, name := range req.Remove {
		if _, both := req.Set[name]; both {
			return errorf(lease.CodeBadRequest, "pool %q is both set and removed", name)
		}
	}
	return nil
}

// applyLocked makes the pools match target: removes, resizes, changes
// rates and adds, answering waiters that can no longer be served. quiet
// skips events (at start, before anyone listens for this manager).
func (m *Manager) applyLocked(target map[string]poolShape, quiet bool) {
	names := slices.Sorted(maps.Keys(m.pools))
	for _, name := range names {
		p := m.pools[name]
		want, keep := target[name]
		if !keep {
			m.removePoolLocked(p, quiet)
			continue
		}
		o := p.p.Options()
		old := poolShape{Capacity: p.p.Stats().Capacity, Rate: o.Rate, Burst: o.Burst}
		if want == old {
			continue
		}
		if want.Capacity != old.Capacity {
			granted, rejected := p.p.SetCapacity(want.Capacity)
			m.refuseResizedLocked(p, rejected, fmt.Sprintf("pool %q was resized to capacity %d", p.name, want.Capacity))
			m.startGrantsLocked(p, granted)
		}
		if want.Rate != old.Rate || want.Burst != old.Burst {
			granted, rejected, err := p.p.SetRate(want.Rate, want.Burst)
			if err != nil {
				// Validated before it was stored; a stored change another
				// version wrote may still be refused here.
				m.log.Error("changing a pool's rate", "pool", name, "err", err)
			}
			m.refuseResizedLocked(p, rejected, fmt.Sprintf("pool %q's rate %v starts at most %d at once", p.name, want.Rate, want.Burst))
			m.startGrantsLocked(p, granted)
		}
		if !quiet {
			m.out.emit(p, lease.Event{Kind: lease.EventResized, Message: old.change(want)})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(target)) {
		if m.pools[name] == nil {
			// A configured pool that comes back keeps its configured policy.
			var o pools.Options
			for _, pc := range m.cfg.Pools {
				if pc.Name == name {
					o = pc.Options
				}
			}
			want := target[name]
			o.Rate, o.Burst = want.Rate, want.Burst
			p, err := newPool(name, want.Capacity, o)
			if err != nil {
				m.log.Error("adding a pool", "pool", name, "err", err)
				continue
			}
			m.pools[name] = p
			delete(m.removed, name)
			if !quiet {
				m.out.emit(p, lease.Event{Kind: lease.EventResized, Message: fmt.Sprintf("added with %v", want)})
			}
		}
	}
}

// refuseResizedLocked answers the waiters a resize left asking for more
// than the pool can ever grant at once.
func (m *Manager) refuseResizedLocked(p *pool, rejected []*pools.Waiter, why string) {
	for _, w := range rejected {
		r := w.Value.(*request)
		m.endLocked(r, errorf(lease.CodeExceedsCapacity, "%d slots requested, %s", r.slots, why), lease.EventRejected)
	}
}

// removePoolLocked removes a pool: its waiters are refused and its leases
// revoked (their holders' renewals fail, so they stop).
func (m *Manager) removePoolLocked(p *pool, quiet bool) {
	delete(m.pools, p.name)
	if m.removed == nil {
		m.removed = map[string]bool{}
	}
	m.removed[p.name] = true
	m.rates.removeLocked(p)
	for _, r := range p.waiting {
		if r.state != queued {
			r.state = grantCancelled // the grant in flight is given back once stored
			continue
		}
		p.p.Cancel(r.w)
		m.endLocked(r, errorf(lease.CodeUnknownPool, "pool %q was removed from node %s (leasemgr resize --remove --force)", p.name, m.cfg.Node), "")
	}
	for _, h := range m.leases.byKey {
		if h.pool == p && !h.releasing {
			m.startReleaseLocked(h, lease.EventReleased)
		}
	}
	if !quiet {
		m.out.emit(p, lease.Event{Kind: lease.EventResized, Message: "removed"})
	}
}

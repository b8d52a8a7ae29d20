package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/pools"
)

// Runtime resize: pools can be resized, added and removed without a
// restart. The changes are kept as a delta against the configured pools
// (POOL_CAPACITIES), stored under the node's key in the pool bucket, and
// applied on top of the configured pools at every start, so a changed
// POOL_CAPACITIES still takes effect for pools no resize touched.

// ResizeRequest changes a node's pools. Set adds a pool or changes its
// capacity; Remove removes pools; Reset drops every runtime change (back to
// the configured pools) before Set and Remove apply. Removing a pool that
// has holders or waiters is refused with pool_busy unless Force: then its
// waiters are refused and its leases revoked.
type ResizeRequest struct {
	Set    map[string]int64 `json:"set,omitempty"`
	Remove []string         `json:"remove,omitempty"`
	Reset  bool             `json:"reset,omitempty"`
	Force  bool             `json:"force,omitempty"`
}

// poolDelta is the stored runtime change against the configured pools.
type poolDelta struct {
	Set     map[string]int64 `json:"set,omitempty"`
	Removed []string         `json:"removed,omitempty"`
}

func (d poolDelta) clone() poolDelta {
	return poolDelta{Set: maps.Clone(d.Set), Removed: slices.Clone(d.Removed)}
}

// effective applies d to the configured pools.
func (d poolDelta) effective(base []PoolConfig) map[string]int64 {
	out := make(map[string]int64, len(base)+len(d.Set))
	for _, p := range base {
		out[p.Name] = p.Capacity
	}
	for _, name := range d.Removed {
		delete(out, name)
	}
	for name, c := range d.Set {
		out[name] = c
	}
	return out
}

// ResizeSubject is where a node's manager takes resize requests:
// <prefix>.<node>.resize.
func ResizeSubject(prefix, node string) string {
	return prefix + "." + node + ".resize"
}

// EventResized is published for every pool a resize added, changed or removed.
const EventResized EventKind = "resized"

// loadDelta reads the stored runtime changes and applies them before the
// lease records are counted.
func (m *Manager) loadDelta(ctx context.Context) error {
	if m.cfg.PoolStore == nil {
		return nil
	}
	data, _, err := m.cfg.PoolStore.Get(ctx, m.cfg.Node)
	if errors.Is(err, ErrStoreNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lease: reading runtime pool changes: %w", err)
	}
	var d poolDelta
	if err := json.Unmarshal(data, &d); err != nil {
		m.log.Error("unreadable runtime pool changes; ignoring them", "err", err)
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.delta = d
	m.applyLocked(d.effective(m.cfg.Pools), true)
	m.log.Info("runtime pool changes applied over the configured pools", "set", d.Set, "removed", d.Removed)
	return nil
}

func (m *Manager) handleResize(msg *nats.Msg) {
	var req ResizeRequest
	if e := decode(msg.Data, &req); e != nil {
		m.respondResize(msg.Reply, errReply(e))
		return
	}
	if e := validateResize(&req); e != nil {
		m.respondResize(msg.Reply, errReply(e))
		return
	}
	// Resizes are rare: holding the lock across the store write keeps the
	// check, the stored delta and the applied change one step.
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		m.respondResize(msg.Reply, errReply(m.closingError()))
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
	for _, name := range req.Remove {
		if m.pools[name] == nil {
			m.respondResize(msg.Reply, errReply(errorf(CodeUnknownPool, "node %s has no pool %q to remove", m.cfg.Node, name)))
			return
		}
		delete(d.Set, name)
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
			m.respondResize(msg.Reply, errReply(errorf(CodePoolBusy, "cannot remove pools with holders or waiters without force: %s", strings.Join(busy, ", "))))
			return
		}
	}
	if m.cfg.PoolStore != nil {
		data, err := json.Marshal(d)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
			_, err = m.cfg.PoolStore.Put(ctx, m.cfg.Node, data)
			cancel()
		}
		if err != nil {
			m.respondResize(msg.Reply, errReply(errorf(CodeUnavailable, "storing the pool change failed, nothing changed: %v", err)))
			return
		}
	}
	m.delta = d
	m.applyLocked(target, false)
	m.respondResize(msg.Reply, Reply{Status: StatusOK, Node: m.cfg.Node, Pools: m.statsLocked()})
}

func validateResize(req *ResizeRequest) *Error {
	if len(req.Set) == 0 && len(req.Remove) == 0 && !req.Reset {
		return errorf(CodeBadRequest, "nothing to change: give set, remove or reset")
	}
	for name, c := range req.Set {
		if err := config.ValidToken(name); err != nil {
			return errorf(CodeBadRequest, "set: pool %q: %v", name, err)
		}
		if c <= 0 || c > pools.MaxCapacity {
			return errorf(CodeBadRequest, "set: pool %q: capacity must be between 1 and %d, got %d", name, int64(pools.MaxCapacity), c)
		}
	}
	for _, name := range req.Remove {
		if _, both := req.Set[name]; both {
			return errorf(CodeBadRequest, "pool %q is both set and removed", name)
		}
	}
	return nil
}

// applyLocked makes the pools match target: removes, resizes and adds,
// answering waiters that can no longer be served. quiet skips events (at
// start, before anyone listens for this manager).
func (m *Manager) applyLocked(target map[string]int64, quiet bool) {
	names := slices.Sorted(maps.Keys(m.pools))
	for _, name := range names {
		p := m.pools[name]
		c, keep := target[name]
		if !keep {
			m.removePoolLocked(p, quiet)
			continue
		}
		old := p.p.Stats().Capacity
		if c == old {
			continue
		}
		granted, rejected := p.p.SetCapacity(c)
		for _, w := range rejected {
			r := w.Value.(*request)
			delete(p.waiting, r.id)
			m.stopTimer(r)
			m.journal.dropLocked(r)
			e := errorf(CodeExceedsCapacity, "%d slots requested, pool %q was resized to capacity %d", r.slots, p.name, c)
			m.respond(r.reply, errReply(e))
			m.emit(p, Event{Kind: EventRejected, RequestID: r.id, Holder: r.holder, Slots: r.slots, Code: e.Code, Message: e.Message})
		}
		m.startGrantsLocked(granted)
		if !quiet {
			m.emit(p, Event{Kind: EventResized, Message: fmt.Sprintf("capacity %d -> %d", old, c)})
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
			p, err := newPool(name, target[name], o)
			if err != nil {
				m.log.Error("adding a pool", "pool", name, "err", err)
				continue
			}
			m.pools[name] = p
			if !quiet {
				m.emit(p, Event{Kind: EventResized, Message: fmt.Sprintf("added with capacity %d", target[name])})
			}
		}
	}
}

// removePoolLocked removes a pool: its waiters are refused and its leases
// revoked (their holders' renewals fail, so they stop).
func (m *Manager) removePoolLocked(p *pool, quiet bool) {
	delete(m.pools, p.name)
	for _, r := range p.waiting {
		if r.state != queued {
			r.state = grantCancelled // the grant in flight is given back once stored
			continue
		}
		p.p.Cancel(r.w)
		delete(p.waiting, r.id)
		m.stopTimer(r)
		m.journal.dropLocked(r)
		m.respond(r.reply, errReply(errorf(CodeUnknownPool, "pool %q was removed from node %s", p.name, m.cfg.Node)))
	}
	for _, h := range m.leases {
		if h.pool == p && !h.releasing {
			m.startReleaseLocked(h, EventReleased)
		}
	}
	if !quiet {
		m.emit(p, Event{Kind: EventResized, Message: "removed"})
	}
}

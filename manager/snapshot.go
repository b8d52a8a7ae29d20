package manager

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/lease"
)

// maxRankedWaiters is the queue depth up to which a snapshot asks the pool
// for each waiter's place in grant order (a walk per waiter, under the
// lock). Deeper queues are listed in arrival order, without positions.
const maxRankedWaiters = 256

// Snapshot returns every pool of the node, sorted by name, with its
// holders and waiters; with its history if history is set (kept from
// Start on: call it after Start).
func (m *Manager) Snapshot(history bool) lease.NodeSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	history = history && m.disc != nil
	now := time.Now().UTC()
	holders := make(map[*pool][]lease.HolderView, len(m.pools))
	for _, h := range m.leases.byKey {
		if h.pool != nil {
			holders[h.pool] = append(holders[h.pool], holderView(h.rec))
		}
	}
	snap := lease.NodeSnapshot{Node: m.cfg.Node, Time: now, Pools: make([]lease.PoolSnapshot, 0, len(m.pools))}
	for _, st := range poolStats(m.pools, m.tally) {
		p := m.pools[st.Name]
		ps := lease.PoolSnapshot{PoolStats: st}
		hs := holders[p]
		slices.SortFunc(hs, func(a, b lease.HolderView) int {
			return cmp.Or(a.GrantedAt.Compare(b.GrantedAt), cmp.Compare(a.Token, b.Token))
		})
		ps.Holders, ps.HoldersMore = clipList(hs)
		ps.Waiters, ps.WaitersMore = clipList(waitersLocked(p))
		if history {
			ps.History = append(m.disc.hist.points(p.name), pointOf(now, p))
		}
		snap.Pools = append(snap.Pools, ps)
	}
	return snap
}

func holderView(r lease.Record) lease.HolderView {
	return lease.HolderView{ID: r.ID, Holder: r.Holder, Slots: r.Slots, Token: r.Token, Tenant: r.Tenant,
		Priority: r.Priority, GrantedAt: r.GrantedAt, ExpiresAt: r.ExpiresAt}
}

// waitersLocked lists p's queued requests in grant order.
func waitersLocked(p *pool) []lease.WaiterView {
	var waiting []*request
	for _, r := range p.waiting {
		if r.state == queued {
			waiting = append(waiting, r)
		}
	}
	ranked := len(waiting) <= maxRankedWaiters
	out := make([]lease.WaiterView, 0, len(waiting))
	for _, r := range waiting {
		w := lease.WaiterView{ID: r.id, Holder: r.holder, Slots: r.slots, Tenant: r.tenant, Priority: r.priority, Since: r.since.UTC()}
		if ranked {
			w.Position = p.p.Position(r.w)
		}
		out = append(out, w)
	}
	if ranked {
		slices.SortFunc(out, func(a, b lease.WaiterView) int { return cmp.Compare(a.Position, b.Position) })
	} else {
		slices.SortFunc(out, func(a, b lease.WaiterView) int { return a.Since.Compare(b.Since) })
	}
	return out
}

func clipList[T any](s []T) ([]T, int) {
	if s == nil {
		s = []T{} // "[]", not "null"
	}
	if len(s) > lease.MaxSnapshotList {
		return s[:lease.MaxSnapshotList], len(s) - lease.MaxSnapshotList
	}
	return s, 0
}

// handleSnapshot answers a snapshot request, through the reply rule like
// every answer (guard).
func (d *discovery) handleSnapshot(msg *nats.Msg) {
	var req lease.SnapshotRequest
	if body := bytes.TrimSpace(msg.Data); len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			d.out.endpointAnswer(d.snapshot, msg.Reply, errReply(errorf(lease.CodeBadRequest, "snapshot request: want {} or {\"history\":true}: %s", err.Error())))
			return
		}
	}
	data, err := json.Marshal(d.admin.Snapshot(req.History))
	if err == nil && req.History && int64(len(data)) > d.out.conn.MaxPayload() {
		// About 30 pools with full lists and an hour each: send the
		// figures, holders and waiters without the history.
		snap := d.admin.Snapshot(false)
		snap.HistoryLeftOut = true
		data, err = json.Marshal(snap)
	}
	if err != nil {
		d.out.log.Error("encoding a snapshot", "err", err)
		return
	}
	d.out.answer(msg, data)
}

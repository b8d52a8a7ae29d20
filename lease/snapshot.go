package lease

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// SnapshotSubject is where a node's manager answers snapshot requests:
// <prefix>.<node>.snapshot. Readers may ask it (docs/security.md).
func SnapshotSubject(prefix, node string) string {
	return prefix + "." + node + ".snapshot"
}

// MaxSnapshotList bounds the holders and the waiters listed per pool in a
// snapshot; HoldersMore and WaitersMore count the ones left off.
const MaxSnapshotList = 50

// maxRankedWaiters is the queue depth up to which a snapshot asks the pool
// for each waiter's place in grant order (a walk per waiter, under the
// lock). Deeper queues are listed in arrival order, without positions.
const maxRankedWaiters = 256

// SnapshotRequest is the body of a snapshot request; empty means {}.
type SnapshotRequest struct {
	// History asks for every pool's utilisation history (the last hour,
	// HistoryStep apart), the bulk of the answer.
	History bool `json:"history,omitempty"`
}

// NodeSnapshot is a node's pools with their holders and waiters: what the
// operator's page shows. It carries no secrets.
type NodeSnapshot struct {
	Node  string         `json:"node"`
	Time  time.Time      `json:"time"`
	Pools []PoolSnapshot `json:"pools"`
	// HistoryLeftOut is set when history was asked for but left out: with
	// it the answer would not fit in one NATS message (many pools).
	HistoryLeftOut bool `json:"history_left_out,omitempty"`
}

// PoolSnapshot is one pool: its figures, holders (oldest grant first) and
// waiters in grant order.
type PoolSnapshot struct {
	PoolStats
	Holders     []HolderView `json:"holders"`
	HoldersMore int          `json:"holders_more,omitempty"`
	Waiters     []WaiterView `json:"waiters"`
	WaitersMore int          `json:"waiters_more,omitempty"`
	// History is [unix seconds, in_use, capacity, queued] per sample,
	// oldest first, ending with the figures at Time; only if asked.
	History []HistoryPoint `json:"history,omitempty"`
}

// HolderView is a lease as the operator sees it: never its secret.
type HolderView struct {
	ID        string    `json:"id"`
	Holder    string    `json:"holder"`
	Slots     int64     `json:"slots"`
	Token     uint64    `json:"token"`
	Tenant    string    `json:"tenant,omitempty"`
	Priority  int       `json:"priority,omitempty"`
	GrantedAt time.Time `json:"granted_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// WaiterView is a queued request. Position is its place in grant order
// (1 is next), 0 when the queue is too deep to rank (then the list is in
// arrival order).
type WaiterView struct {
	Position int       `json:"position,omitempty"`
	ID       string    `json:"id"`
	Holder   string    `json:"holder"`
	Slots    int64     `json:"slots"`
	Tenant   string    `json:"tenant,omitempty"`
	Priority int       `json:"priority,omitempty"`
	Since    time.Time `json:"since"`
}

// Snapshot returns every pool of the node, sorted by name, with its
// holders and waiters; with its history if history is set (kept from
// Start on: call it after Start).
func (m *Manager) Snapshot(history bool) NodeSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	history = history && m.disc != nil
	now := time.Now().UTC()
	holders := make(map[*pool][]HolderView, len(m.pools))
	for _, h := range m.leases {
		if h.pool != nil {
			holders[h.pool] = append(holders[h.pool], holderView(h.rec))
		}
	}
	snap := NodeSnapshot{Node: m.cfg.Node, Time: now, Pools: make([]PoolSnapshot, 0, len(m.pools))}
	for _, st := range m.statsLocked() {
		p := m.pools[st.Name]
		ps := PoolSnapshot{PoolStats: st}
		hs := holders[p]
		slices.SortFunc(hs, func(a, b HolderView) int {
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

func holderView(r Record) HolderView {
	return HolderView{ID: r.ID, Holder: r.Holder, Slots: r.Slots, Token: r.Token, Tenant: r.Tenant,
		Priority: r.Priority, GrantedAt: r.GrantedAt, ExpiresAt: r.ExpiresAt}
}

// waitersLocked lists p's queued requests in grant order.
func waitersLocked(p *pool) []WaiterView {
	var waiting []*request
	for _, r := range p.waiting {
		if r.state == queued {
			waiting = append(waiting, r)
		}
	}
	ranked := len(waiting) <= maxRankedWaiters
	out := make([]WaiterView, 0, len(waiting))
	for _, r := range waiting {
		w := WaiterView{ID: r.id, Holder: r.holder, Slots: r.slots, Tenant: r.tenant, Priority: r.priority, Since: r.since.UTC()}
		if ranked {
			w.Position = p.p.Position(r.w)
		}
		out = append(out, w)
	}
	if ranked {
		slices.SortFunc(out, func(a, b WaiterView) int { return cmp.Compare(a.Position, b.Position) })
	} else {
		slices.SortFunc(out, func(a, b WaiterView) int { return a.Since.Compare(b.Since) })
	}
	return out
}

func clipList[T any](s []T) ([]T, int) {
	if s == nil {
		s = []T{} // "[]", not "null"
	}
	if len(s) > MaxSnapshotList {
		return s[:MaxSnapshotList], len(s) - MaxSnapshotList
	}
	return s, 0
}

// handleSnapshot answers a snapshot request, through the reply rule like
// every answer (guard).
func (m *Manager) handleSnapshot(msg *nats.Msg) {
	var req SnapshotRequest
	if body := bytes.TrimSpace(msg.Data); len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			m.disc.snapshot.failed("400", "bad snapshot request")
			m.respond(msg.Reply, Reply{Status: StatusError, Error: errorf(CodeBadRequest, "snapshot request: want {} or {\"history\":true}: %s", clip(err.Error()))})
			return
		}
	}
	data, err := json.Marshal(m.Snapshot(req.History))
	if err == nil && req.History && int64(len(data)) > m.cfg.Conn.MaxPayload() {
		// About 30 pools with full lists and an hour each: send the
		// figures, holders and waiters without the history.
		snap := m.Snapshot(false)
		snap.HistoryLeftOut = true
		data, err = json.Marshal(snap)
	}
	if err != nil {
		m.log.Error("encoding a snapshot", "err", err)
		return
	}
	m.answer(msg, data)
}

// RequestSnapshot asks node's manager for its snapshot (with history if
// asked) and waits for the answer until ctx ends.
func RequestSnapshot(ctx context.Context, nc *nats.Conn, prefix, node string, history bool) (NodeSnapshot, error) {
	body, err := json.Marshal(SnapshotRequest{History: history})
	if err != nil {
		return NodeSnapshot{}, err
	}
	msg, err := nc.RequestWithContext(ctx, SnapshotSubject(prefix, node), body)
	if err != nil {
		return NodeSnapshot{}, fmt.Errorf("snapshot of node %q: %w", node, err)
	}
	var r struct {
		Status string `json:"status"`
		Error  *Error `json:"error"`
		NodeSnapshot
	}
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return NodeSnapshot{}, fmt.Errorf("snapshot of node %q: %w", node, err)
	}
	if r.Error != nil {
		return NodeSnapshot{}, fmt.Errorf("snapshot of node %q: %w", node, r.Error)
	}
	if r.Node != node {
		return NodeSnapshot{}, errors.New("snapshot of node " + node + ": answered for node " + clip(r.Node))
	}
	return r.NodeSnapshot, nil
}

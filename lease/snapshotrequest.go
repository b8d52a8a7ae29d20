package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/internal/echo"
)

// History resolution and length: the last hour of every pool at 5 s
// resolution, 720 points per pool, kept in the manager process so the
// operator's page has its sparklines filled from the first second.
const (
	HistoryStep   = 5 * time.Second
	HistoryPoints = 720
)

// HistoryPoint is one sample of a pool: unix seconds, slots in use,
// capacity, queued requests. Encoded as a 4-element JSON array, so an hour
// of 720 points stays small.
type HistoryPoint [4]int64

// SnapshotSubject is where a node's manager answers snapshot requests:
// <prefix>.<node>.snapshot. Readers may ask it (docs/security.md).
func SnapshotSubject(prefix, node string) string {
	return prefix + "." + node + ".snapshot"
}

// MaxSnapshotList bounds the holders and the waiters listed per pool in a
// snapshot; HoldersMore and WaitersMore count the ones left off.
const MaxSnapshotList = 50

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
		return NodeSnapshot{}, errors.New("snapshot of node " + node + ": answered for node " + echo.Clip(r.Node))
	}
	return r.NodeSnapshot, nil
}

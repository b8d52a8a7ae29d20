package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
)

// ClusterSource is what the cluster page reads besides Source: every node
// serving the prefix, their holders, waiters and history, and every node's
// events. A Source that also implements it gets the /v1/cluster endpoints;
// NATSSource does.
type ClusterSource interface {
	Prefix() string
	// Discover returns the nodes whose managers answer now.
	Discover(ctx context.Context) ([]string, error)
	// Snapshots asks each node for its snapshot; one result per node.
	Snapshots(ctx context.Context, nodes []string, history bool) []NodeResult
	// RecentEvents returns the last limit events of every node, oldest
	// first, from before the caller asked.
	RecentEvents(ctx context.Context, limit int) ([]lease.Event, error)
	// SubscribeClusterEvents is SubscribeEvents for every node.
	SubscribeClusterEvents(ctx context.Context) (<-chan lease.Event, error)
}

// NodeResult is one node's answer to a snapshot request.
type NodeResult struct {
	Node     string
	Snapshot lease.NodeSnapshot
	Err      error
}

// Cluster is the body of /v1/cluster.
type Cluster struct {
	Prefix string        `json:"prefix"`
	Time   time.Time     `json:"time"`
	Nodes  []ClusterNode `json:"nodes"` // the serving node first, the others sorted by node
}

// ClusterNode is one node of the cluster. A node that answered before but
// not now is kept, marked stale, with the pools it last showed, until
// staleFor has passed.
type ClusterNode struct {
	Node     string               `json:"node"`
	Stale    bool                 `json:"stale,omitempty"`
	Reason   string               `json:"reason,omitempty"` // why it is stale
	LastSeen time.Time            `json:"last_seen"`
	Pools    []lease.PoolSnapshot `json:"pools"`
}

// Bounds of the cluster endpoints: how long a silent node is still listed
// as stale, how many silent nodes are remembered, and how many events the
// page may ask for.
const (
	staleFor       = time.Hour
	maxKnownNodes  = 1024
	maxEventReplay = 500
	defEventReplay = 100
)

// cluster remembers the nodes seen, so one that stops answering is marked
// stale rather than dropped.
type cluster struct {
	mu    sync.Mutex
	known map[string]ClusterNode // without history
}

func (h *Handler) clusterSource(w http.ResponseWriter) ClusterSource {
	cs, ok := h.src.(ClusterSource)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "this server has no cluster view")
	}
	return cs
}

// maxClusterReads bounds the cluster reads under way at once: the HTTP
// endpoint has no authentication, and each read asks every node for a
// snapshot or makes a consumer on the event stream.
const maxClusterReads = 4

// clusterRead returns the cluster source and a slot among the reads under
// way (release it when done), or writes the error and returns nil.
func (h *Handler) clusterRead(w http.ResponseWriter) (ClusterSource, func()) {
	cs := h.clusterSource(w)
	if cs == nil {
		return nil, nil
	}
	select {
	case h.clusterReads <- struct{}{}:
		return cs, func() { <-h.clusterReads }
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "busy", fmt.Sprintf("%d cluster reads are under way; try again in a second", maxClusterReads))
		return nil, nil
	}
}

// clusterView serves /v1/cluster: every node (discovered, or ?node=<id> for
// one), with history if ?history=1.
func (h *Handler) clusterView(w http.ResponseWriter, r *http.Request) {
	cs, done := h.clusterRead(w)
	if cs == nil {
		return
	}
	defer done()
	q := r.URL.Query()
	history, err := boolParam(q.Get("history"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "history: "+err.Error())
		return
	}
	var nodes []string
	if n := q.Get("node"); n != "" {
		if err := config.ValidToken(n); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "node: "+err.Error())
			return
		}
		nodes = []string{n}
	} else if nodes, err = cs.Discover(r.Context()); err != nil {
		h.sourceError(w, err)
		return
	}
	// A node id is a subject token: one that is not (from a ping answer
	// nobody should have sent) is not asked.
	nodes = slices.DeleteFunc(nodes, func(n string) bool { return config.ValidToken(n) != nil })
	res := cs.Snapshots(r.Context(), nodes, history)
	out := h.cl.merge(res, q.Get("node") == "", time.Now())
	// The node serving the page first, the others by name.
	if i := slices.IndexFunc(out, func(n ClusterNode) bool { return n.Node == h.src.Node() }); i > 0 {
		self := out[i]
		copy(out[1:i+1], out[:i])
		out[0] = self
	}
	writeJSON(w, http.StatusOK, Cluster{Prefix: cs.Prefix(), Time: time.Now().UTC(), Nodes: out})
}

// merge records the answers and returns them with the stale nodes (all of
// them if all is set: the answers came from discovery), sorted by node.
func (c *cluster) merge(res []NodeResult, all bool, now time.Time) []ClusterNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == nil {
		c.known = make(map[string]ClusterNode)
	}
	out := make([]ClusterNode, 0, len(res)+len(c.known))
	answered := make(map[string]bool, len(res))
	for _, r := range res {
		answered[r.Node] = true
		if r.Err != nil {
			cn, ok := c.known[r.Node]
			if !ok {
				cn = ClusterNode{Node: r.Node, Pools: []lease.PoolSnapshot{}}
			}
			cn.Stale, cn.Reason = true, r.Err.Error()
			out = append(out, cn)
			continue
		}
		cn := ClusterNode{Node: r.Node, LastSeen: now.UTC(), Pools: r.Snapshot.Pools}
		out = append(out, cn)
		cn.Pools = withoutHistory(cn.Pools)
		c.known[r.Node] = cn
	}
	for name, cn := range c.known {
		switch {
		case now.Sub(cn.LastSeen) > staleFor:
			delete(c.known, name)
		case all && !answered[name]:
			cn.Stale, cn.Reason = true, "its manager did not answer discovery"
			out = append(out, cn)
		}
	}
	c.forgetOldestLocked()
	slices.SortFunc(out, func(a, b ClusterNode) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// forgetOldestLocked keeps at most maxKnownNodes, dropping those seen
// longest ago.
func (c *cluster) forgetOldestLocked() {
	for len(c.known) > maxKnownNodes {
		oldest := ""
		for name, cn := range c.known {
			if oldest == "" || cn.LastSeen.Before(c.known[oldest].LastSeen) {
				oldest = name
			}
		}
		delete(c.known, oldest)
	}
}

func withoutHistory(ps []lease.PoolSnapshot) []lease.PoolSnapshot {
	out := slices.Clone(ps)
	for i := range out {
		out[i].History = nil
	}
	return out
}

func boolParam(s string) (bool, error) {
	switch s {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, errors.New("want 1, true, 0 or false")
}

// clusterEvents serves /v1/cluster/events: the last ?limit= (default
// defEventReplay, at most maxEventReplay) events of every node, oldest
// first, replayed from the event stream.
func (h *Handler) clusterEvents(w http.ResponseWriter, r *http.Request) {
	cs, done := h.clusterRead(w)
	if cs == nil {
		return
	}
	defer done()
	limit := defEventReplay
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxEventReplay {
			writeError(w, http.StatusBadRequest, "bad_request", "limit: want a whole number from 1 to "+strconv.Itoa(maxEventReplay))
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	evs, err := cs.RecentEvents(ctx, limit)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "replaying events: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, evs)
}

// clusterStream serves /v1/cluster/stream: every node's events, live.
func (h *Handler) clusterStream(w http.ResponseWriter, r *http.Request) {
	cs := h.clusterSource(w)
	if cs == nil {
		return
	}
	h.stream(w, r, cs.SubscribeClusterEvents, nil)
}

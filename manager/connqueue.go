package manager

import (
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/rules"
)

// Bounded cost per client. Every waiting request costs the manager memory
// and a queue entry in the store, so one client connection may have at
// most Config.MaxQueuedPerConn requests waiting on a node, over all
// its pools (and every pool holds at most its MaxQueue). Beyond that, a
// request that cannot be granted at once gets queue_full; one that can is
// granted, since it costs no waiting.
//
// A connection is the requester the server vouches for, where it does
// (requester.go); where the holders share the managers' account, the
// request's own conn_server and conn_id stand in, which a client can vary
// to get around the bound.

// waiters counts the requests waiting on this node by the connection that
// sent them, and puts requests into and out of their pools' waiting maps.
// Guarded by Manager.mu: it changes with the pools, in the same step.
// Invariant: byConn[o] is the number of requests with owner o in the
// pools' waiting maps.
type waiters struct {
	max    int // Config.MaxQueuedPerConn, or its default
	node   string
	ttl    time.Duration
	byConn map[string]int
}

func newWaiters(cfg Config) waiters {
	max := cfg.MaxQueuedPerConn
	if max <= 0 {
		max = rules.DefaultMaxQueuedPerConnection
	}
	return waiters{max: max, node: cfg.Node, ttl: cfg.TTL, byConn: make(map[string]int)}
}

// connFull reports whether owner may not have one more request wait.
func (ws *waiters) connFull(owner string) bool {
	return owner != "" && ws.byConn[owner] >= ws.max
}

// add puts r into its pool's waiting requests, counted against its
// connection.
func (ws *waiters) add(r *request) {
	r.pool.waiting[r.id] = r
	if r.owner != "" {
		ws.byConn[r.owner]++
	}
}

// drop takes r out of its pool's waiting requests.
func (ws *waiters) drop(r *request) {
	if r.pool.waiting[r.id] != r {
		return
	}
	delete(r.pool.waiting, r.id)
	if r.owner == "" {
		return
	}
	if n := ws.byConn[r.owner] - 1; n > 0 {
		ws.byConn[r.owner] = n
	} else {
		delete(ws.byConn, r.owner)
	}
}

// connFullError answers a request its connection may not queue.
func (ws *waiters) connFullError(p *pool) *lease.Error {
	e := errorf(lease.CodeQueueFull, "this connection already has %d requests waiting on node %s, its limit (MAX_QUEUED_PER_CONNECTION): wait for one to end",
		ws.max, ws.node)
	e.RetryAfterMs = queueFullRetryMs(p, ws.ttl)
	return e
}

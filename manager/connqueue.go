package manager

import (
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/rules"
)

// Bounded cost per client. Every waiting request costs the manager memory
// and a queue entry in the store, so one client connection may have at
// most Config.MaxQueuedPerConn requests waiting on a node, over all
// its pools, one credential (every connection of one user together) at
// most Config.MaxQueuedPerCredential, and every pool holds at most its
// MaxQueue. Beyond that, a request that cannot be granted at once gets
// queue_full; one that can is granted, since it costs no waiting. The
// credential's bound is what makes reconnecting useless: before it, ten
// short connections of 1,000 requests each filled a pool's queue of
// 10,000, and the fake requests were granted one by one, each holding the
// pool's slot for a TTL.
//
// A connection and a credential are what the server vouches for, where it
// does (requester.go); where the holders share the managers' account, the
// request's own conn_server and conn_id stand in for the connection, which
// a client can vary to get around the bound, and no credential is known.

// waiters counts the requests waiting on this node by the connection and
// the credential that sent them, and puts requests into and out of their
// pools' waiting maps. Guarded by Manager.mu: it changes with the pools,
// in the same step. Invariant: byConn[o] is the number of requests with
// owner o, byCred[c] of those with cred c, in the pools' waiting maps.
type waiters struct {
	max, maxCred int // Config.MaxQueuedPerConn and MaxQueuedPerCredential, or their defaults
	node         string
	ttl          time.Duration
	byConn       map[string]int
	byCred       map[string]int
}

func newWaiters(cfg Config) waiters {
	max := cfg.MaxQueuedPerConn
	if max <= 0 {
		max = rules.DefaultMaxQueuedPerConnection
	}
	maxCred := cfg.MaxQueuedPerCredential
	if maxCred <= 0 {
		maxCred = rules.DefaultMaxQueuedPerCredential
	}
	return waiters{max: max, maxCred: maxCred, node: cfg.Node, ttl: cfg.TTL, byConn: make(map[string]int), byCred: make(map[string]int)}
}

// full says why r may not have one more request wait: its connection or
// its credential has as many as it may; nil if it may.
func (ws *waiters) full(r *request) *lease.Error {
	switch {
	case r.owner != "" && ws.byConn[r.owner] >= ws.max:
		return errorf(lease.CodeQueueFull, "this connection already has %d requests waiting on node %s, its limit (MAX_QUEUED_PER_CONNECTION): wait for one to end",
			ws.max, ws.node)
	case r.cred != "" && ws.byCred[r.cred] >= ws.maxCred:
		return errorf(lease.CodeQueueFull, "this credential already has %d requests waiting on node %s over all its connections, its limit (MAX_QUEUED_PER_CREDENTIAL): wait for one to end",
			ws.maxCred, ws.node)
	}
	return nil
}

// add puts r into its pool's waiting requests, counted against its
// connection and credential.
func (ws *waiters) add(r *request) {
	r.pool.waiting[r.id] = r
	if r.owner != "" {
		ws.byConn[r.owner]++
	}
	if r.cred != "" {
		ws.byCred[r.cred]++
	}
}

// drop takes r out of its pool's waiting requests.
func (ws *waiters) drop(r *request) {
	if r.pool.waiting[r.id] != r {
		return
	}
	delete(r.pool.waiting, r.id)
	uncount(ws.byConn, r.owner)
	uncount(ws.byCred, r.cred)
}

// uncount takes one from counts[k], dropping the key at zero.
func uncount(counts map[string]int, k string) {
	if k == "" {
		return
	}
	if n := counts[k] - 1; n > 0 {
		counts[k] = n
	} else {
		delete(counts, k)
	}
}

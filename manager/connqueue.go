package manager

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
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
// A connection is known by what the server says of it: a request that
// crossed a service import carries the requester's account, server and
// client id in its Nats-Request-Info header, set by the server over
// whatever the client sent (jetstream/accounts.go imports the acquire
// with share). Where the holders share the managers' account there is no
// import and no such header the server vouches for; the request's own
// conn_server and conn_id (or a header it sent) stand in, which a client
// can vary to get around the bound.

// clientInfoHeader is the server's Nats-Request-Info header.
const clientInfoHeader = "Nats-Request-Info"

// maxClientInfo bounds the header decoded: the server's is a few hundred
// bytes (more with a JWT).
const maxClientInfo = 16 << 10

// ownerOf names the connection msg came on, "" if nothing does.
func ownerOf(msg *nats.Msg, req *lease.AcquireRequest) string {
	if h := msg.Header.Get(clientInfoHeader); h != "" && len(h) <= maxClientInfo {
		var ci struct {
			Account string `json:"acc"`
			Server  string `json:"server"`
			ID      uint64 `json:"id"`
		}
		if json.Unmarshal([]byte(h), &ci) == nil && ci.ID != 0 {
			return ci.Account + " " + ci.Server + " " + strconv.FormatUint(ci.ID, 10)
		}
	}
	if req.ConnServer != "" {
		return "conn " + req.ConnServer + " " + strconv.FormatUint(req.ConnID, 10)
	}
	return ""
}

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

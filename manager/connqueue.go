package manager

import (
	"encoding/json"
	"strconv"

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

// maxQueuedPerConn is the configured bound, or its default.
func (m *Manager) maxQueuedPerConn() int {
	if m.cfg.MaxQueuedPerConn > 0 {
		return m.cfg.MaxQueuedPerConn
	}
	return rules.DefaultMaxQueuedPerConnection
}

// connFullLocked reports whether owner may not have one more request wait.
func (m *Manager) connFullLocked(owner string) bool {
	return owner != "" && m.queuedBy[owner] >= m.maxQueuedPerConn()
}

// addWaitingLocked puts r into its pool's waiting requests, counted
// against its connection.
func (m *Manager) addWaitingLocked(r *request) {
	r.pool.waiting[r.id] = r
	if r.owner != "" {
		m.queuedBy[r.owner]++
	}
}

// dropWaitingLocked takes r out of its pool's waiting requests.
func (m *Manager) dropWaitingLocked(r *request) {
	if r.pool.waiting[r.id] != r {
		return
	}
	delete(r.pool.waiting, r.id)
	if r.owner == "" {
		return
	}
	if n := m.queuedBy[r.owner] - 1; n > 0 {
		m.queuedBy[r.owner] = n
	} else {
		delete(m.queuedBy, r.owner)
	}
}

// connFullError answers a request its connection may not queue.
func (m *Manager) connFullError(p *pool) *lease.Error {
	e := errorf(lease.CodeQueueFull, "this connection already has %d requests waiting on node %s, its limit (MAX_QUEUED_PER_CONNECTION): wait for one to end",
		m.maxQueuedPerConn(), m.cfg.Node)
	e.RetryAfterMs = (m.cfg.TTL / 3).Milliseconds()
	if d, ok := p.p.NextGrant(); ok {
		e.RetryAfterMs = max(1, retryAfterMs(d))
	}
	return e
}

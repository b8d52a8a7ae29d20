package manager

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
)

// Fast release. A holder names its NATS connection in every acquire and
// renewal (conn_server, conn_id), and the lease is bound to it. The NATS
// server publishes an advisory when a client connection closes; a manager
// that hears them (Config.DisconnectEvents) asks the connection's
// server to confirm the close (closecheck.go: an advisory can be forged),
// and frees a lease bound to it DisconnectGrace after the confirmation,
// unless the holder moved the lease to a new connection first (a renewal
// sent on it). So a holder that crashed, was killed or lost its host gives
// its slots back in under a second instead of a TTL.
//
// Only a close made at the holder's end frees anything: the server must
// have recorded "Client Closed" (the holder's host closed the socket: its
// process exited, or its client closed the connection), "Read Error" or
// "Write Error" (the holder's end reset it). A connection the server
// closed itself (it is shutting down, kicked the client, found it stale or
// too slow, or its credentials expired) says nothing about the holder,
// which may be working and about to reconnect: such a lease is left to its
// holder's renewals and to the TTL. That is what lets work outlive a
// restart or a stall of the NATS server (docs/guarantees.md, "Fast
// release").
//
// It never frees slots whose holder may still be working, because the
// holder keeps its own clock (liveness.go): a live holder's end closes a
// connection only when its own client does, which it sees at once; it then
// has 3/4 of the grace from the last PING the server answered on the
// connection to move its leases to a new one, or it stops its work. The
// server answered that PING before it saw the close, and the manager hears
// of the close after that, so the holder stops at least a quarter of the
// grace before the manager frees its slots. A holder that did not say which
// connection it uses, or a record written without the grace, is not freed
// this way: the TTL alone ends it.

// holderClosed reports whether reason, the server's record of why it
// closed a client connection, says the client's end closed it: EOF from
// the client ("Client Closed"), or a read or write that failed on the
// connection ("Read Error", "Write Error": the client's end reset it).
// Every other reason is the server's own doing.
func holderClosed(reason string) bool {
	switch reason {
	case "Client Closed", "Read Error", "Write Error":
		return true
	}
	return false
}

// disconnectAdvisoryType is the type of the server's client disconnect
// advisory (server.DisconnectEventMsgType).
const disconnectAdvisoryType = "io.nats.server.advisory.v1.client_disconnect"

// maxAdvisory bounds the advisory the manager decodes: one carries a
// client's JWT at most, a few kilobytes.
const maxAdvisory = 64 << 10

// checkConn validates a request's connection fields.
func checkConn(server string, id uint64) *lease.Error {
	if server == "" && id == 0 {
		return nil
	}
	if server == "" || id == 0 {
		return errorf(lease.CodeBadRequest, "conn_server and conn_id go together")
	}
	for _, c := range []byte(server) {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return errorf(lease.CodeBadRequest, "conn_server must be a NATS server id: upper-case letters and digits only")
		}
	}
	return nil
}

// disconnects is the manager's fast-release state. Guarded by Manager.mu.
type disconnects struct {
	// heard holds the connections an advisory named, with when, until
	// their server confirms the close or not (closecheck.go).
	heard map[conn]time.Time
	// checking holds the connections whose server is being asked.
	checking map[conn]struct{}
	// closed holds the connections whose close was confirmed recently,
	// with when: a grant or renewal for one of them, which raced the
	// advisory, is freed as if it had been bound before.
	closed map[conn]time.Time
	pruned time.Time // when heard and closed were last pruned
	// timers are the pending frees; Close stops them.
	timers map[*time.Timer]struct{}
}

func newDisconnects() disconnects {
	return disconnects{heard: make(map[conn]time.Time), checking: make(map[conn]struct{}),
		closed: make(map[conn]time.Time), timers: make(map[*time.Timer]struct{})}
}

// closedMemory is how long a closed connection is remembered: far longer
// than a request can be in flight behind its connection's advisory.
const closedMemory = 30 * time.Second

// subscribeDisconnects starts listening to the advisories, if configured.
func (m *Manager) subscribeDisconnects() error {
	if m.cfg.DisconnectEvents == "" {
		return nil
	}
	sub, err := m.out.subscribe(m.cfg.DisconnectEvents, m.out.protect(m.handleDisconnect))
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(1<<16, 1<<28)
	return nil
}

// handleDisconnect notes the connection an advisory says closed and, if
// a lease or a queued request is bound to it, asks its server to confirm.
func (m *Manager) handleDisconnect(msg *nats.Msg) {
	if len(msg.Data) > maxAdvisory {
		return
	}
	var adv struct {
		Type   string `json:"type"`
		Server struct {
			ID string `json:"id"`
		} `json:"server"`
		Client struct {
			ID uint64 `json:"id"`
		} `json:"client"`
	}
	if err := json.Unmarshal(msg.Data, &adv); err != nil || adv.Type != disconnectAdvisoryType || adv.Server.ID == "" || adv.Client.ID == 0 {
		m.log.Debug("ignoring a message on the disconnect advisory subject that is not one", "subject", echo.Clip(msg.Subject))
		return
	}
	c := conn{adv.Server.ID, adv.Client.ID}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if now.Sub(m.gone.pruned) > time.Second { // not on every advisory: churn
		m.gone.pruned = now
		for _, memory := range []map[conn]time.Time{m.gone.closed, m.gone.heard} {
			for k, t := range memory {
				if now.Sub(t) > closedMemory {
					delete(memory, k)
				}
			}
		}
	}
	if _, ok := m.gone.closed[c]; ok {
		return
	}
	if len(m.gone.heard) < maxHeard {
		m.gone.heard[c] = now
	}
	if m.boundLocked(c) {
		m.checkCloseLocked(c)
	}
}

// boundLocked reports whether a lease or a queued request is bound to c.
func (m *Manager) boundLocked(c conn) bool {
	for _, h := range m.leases {
		if recordConn(&h.rec) == c {
			return true
		}
	}
	for _, p := range m.pools {
		for _, r := range p.waiting {
			if r.conn == c {
				return true
			}
		}
	}
	return false
}

// closedLocked records that c's server confirmed its close, and frees
// what is bound to it after the grace.
func (m *Manager) closedLocked(c conn, now time.Time) {
	if m.stop.announced {
		return // it told its holders it frees nothing more (stop.go)
	}
	m.gone.closed[c] = now
	for _, h := range m.leases {
		if recordConn(&h.rec) == c {
			m.freeOnCloseLocked(h)
		}
	}
	for _, p := range m.pools {
		for _, r := range p.waiting {
			if r.conn == c {
				m.dropOnCloseLocked(r)
			}
		}
	}
}

// knownClosedLocked reports whether c's close was confirmed recently. Called
// as something is bound to c: if a close was heard but not confirmed yet,
// it asks c's server, whose answer frees what is bound by then.
func (m *Manager) knownClosedLocked(c conn) bool {
	if !c.known() {
		return false
	}
	if _, ok := m.gone.closed[c]; ok {
		return true
	}
	if _, ok := m.gone.heard[c]; ok {
		m.checkCloseLocked(c)
	}
	return false
}

// afterGraceLocked runs f with the lock held, d from now, unless the
// manager closes first.
func (m *Manager) afterGraceLocked(d time.Duration, f func()) {
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.gone.timers, t)
		if !m.closed && !m.stop.announced {
			f()
		}
	})
	m.gone.timers[t] = struct{}{}
}

// stopDisconnectTimersLocked stops the pending frees (Close, a clean stop).
func (m *Manager) stopDisconnectTimersLocked() {
	for t := range m.gone.timers {
		t.Stop()
	}
	clear(m.gone.timers)
}

// freeOnCloseLocked frees h after its grace, unless it has been moved to
// another connection by then. A lease whose record carries no grace was
// granted without fast release: its holder keeps no clock, so only the
// TTL may end it.
func (m *Manager) freeOnCloseLocked(h *held) {
	if h.rec.DisconnectGraceMs <= 0 || h.releasing {
		return
	}
	c := recordConn(&h.rec)
	// The record's grace, if a predecessor granted it with a longer one:
	// that is what its holder was told.
	grace := max(m.cfg.DisconnectGrace, time.Duration(h.rec.DisconnectGraceMs)*time.Millisecond)
	m.afterGraceLocked(grace, func() {
		if m.leases[h.key] != h || h.releasing || recordConn(&h.rec) != c {
			return // gone already, or moved to a live connection
		}
		m.log.Info("freeing a lease whose holder's connection closed", "key", h.key, "grace", grace)
		h.releaseCode = lease.CodeHolderDisconnected
		m.startReleaseLocked(h, lease.EventReleased)
	})
}

// dropOnCloseLocked ends queued r after the grace, unless it was re-sent
// on another connection by then: nobody would hear of its grant.
func (m *Manager) dropOnCloseLocked(r *request) {
	c := r.conn
	m.afterGraceLocked(m.cfg.DisconnectGrace, func() {
		if !r.waiting() || r.conn != c {
			return
		}
		m.leaveQueueLocked(r, errorf(lease.CodeHolderDisconnected, "the requester's connection closed while it waited"), lease.EventRejected)
	})
}

// rebindLocked moves h to the connection a renewal came on, if it has fast
// release and that is another one: the holder reconnected. The holder hears
// "bound" at once, so it can count its new connection without waiting for
// the renewal's write (a store stall after a server stop would otherwise
// outlast its liveness deadline); the write stores the binding. Only this
// manager's memory decides a free (freeOnCloseLocked), so the in-memory
// binding is what protects the lease.
func (m *Manager) rebindLocked(h *held, reply, server string, id uint64) *lease.Error {
	if e := checkConn(server, id); e != nil {
		return e
	}
	c := conn{server, id}
	if !c.known() || h.rec.DisconnectGraceMs <= 0 || c == recordConn(&h.rec) {
		return nil
	}
	h.rec.ConnServer, h.rec.ConnID = c.server, c.id
	if m.knownClosedLocked(c) {
		m.freeOnCloseLocked(h)
	}
	rec := h.rec
	m.out.respond(reply, lease.Reply{Status: lease.StatusBound, Lease: &rec})
	return nil
}

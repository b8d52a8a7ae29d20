package manager

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
)

// dropAbandonedLocked ends r, whose turn came after its client stopped
// re-sending it, instead of granting it slots nobody would use until the
// TTL lapsed. A client that is alive after all hears "unavailable" (or, on
// its next re-send, nothing of r) and queues again at the tail. It returns
// the waiters granted the slots r had been given.
func (m *Manager) dropAbandonedLocked(r *request, now int64) []*pools.Waiter {
	p := r.pool
	m.waiters.drop(r)
	r.stopTimer()
	m.journal.dropLocked(r)
	r.trace.EndQueued("abandoned")
	e := errorf(lease.CodeUnavailable, "abandoned: not re-sent for %v while queued (poll_ms %d); acquire again to queue at the tail",
		time.Duration(now-r.lastSeen).Round(time.Millisecond), r.pollMs)
	m.out.respond(r.reply, errReply(e))
	// The slots back first, so the event carries the figures after the
	// drop: no other event may follow it.
	granted := p.p.ReleaseKey(r.tenant, r.key, r.slots)
	m.out.emit(p, lease.Event{Kind: lease.EventRejected, RequestID: r.id, Holder: r.holder, Slots: r.slots, Code: e.Code, Message: e.Message})
	return granted
}

// waitExpired ends a request whose wait deadline passed while it was queued.
func (m *Manager) waitExpired(r *request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || !r.waiting() {
		return
	}
	m.leaveQueueLocked(r, errorf(lease.CodeWaitExpired, "not granted within the wait deadline (waited %s)", time.Since(r.since).Round(time.Millisecond)), lease.EventRejected)
}

// leaveQueueLocked takes queued r out of its pool's queue without a grant:
// its holder hears e, watchers an event of kind, and the waiters behind it
// may be granted.
func (m *Manager) leaveQueueLocked(r *request, e *lease.Error, kind lease.EventKind) {
	r.stopTimer()
	p := r.pool
	removed, granted := p.p.Cancel(r.w)
	if !removed {
		return
	}
	m.waiters.drop(r)
	m.journal.dropLocked(r)
	r.trace.EndQueued(string(e.Code))
	m.out.respond(r.reply, errReply(e))
	m.out.emit(p, lease.Event{Kind: kind, RequestID: r.id, Holder: r.holder, Slots: r.slots, Code: e.Code, Message: e.Message})
	m.startGrantsLocked(p, granted)
}

func (m *Manager) handleCancel(msg *nats.Msg) {
	var req lease.CancelRequest
	if e := decode(msg.Data, &req); e != nil {
		m.out.respond(msg.Reply, errReply(e))
		return
	}
	if err := rules.ValidRequestID(req.RequestID); err != nil {
		m.out.respond(msg.Reply, errReply(errorf(lease.CodeBadRequest, "%v", err)))
		return
	}
	if req.Holder == "" {
		m.out.respond(msg.Reply, errReply(errorf(lease.CodeBadRequest, "holder is required")))
		return
	}
	poolName := poolToken(msg.Subject)
	who := requesterOf(msg, "", 0)
	m.mu.Lock()
	defer m.mu.Unlock()
	p, e := m.poolLocked(poolName)
	if e != nil {
		m.out.respond(msg.Reply, errReply(e))
		return
	}
	if r := p.waiting[req.RequestID]; r != nil {
		if e := m.cancellerLocked(who, req, r.holder, r.secret); e != nil {
			m.out.respond(msg.Reply, errReply(e))
			return
		}
		if r.state != queued {
			r.state = grantCancelled
			m.out.respond(msg.Reply, lease.Reply{Status: lease.StatusCancelled})
			return
		}
		m.leaveQueueLocked(r, errorf(lease.CodeCancelled, "cancelled by the holder"), lease.EventCancelled)
		m.out.respond(msg.Reply, lease.Reply{Status: lease.StatusCancelled})
		return
	}
	if h := m.leases[lease.RecordKey(m.cfg.Node, p.name, req.RequestID)]; h != nil {
		if e := m.cancellerLocked(who, req, h.rec.Holder, h.rec.Secret); e != nil {
			m.out.respond(msg.Reply, errReply(e))
			return
		}
		if !h.releasing {
			m.startReleaseLocked(h, lease.EventCancelled)
		}
		m.out.respond(msg.Reply, lease.Reply{Status: lease.StatusReleased})
		return
	}
	// Nothing to cancel: already ended. Cancel is idempotent.
	m.out.respond(msg.Reply, lease.Reply{Status: lease.StatusCancelled})
}

// cancellerLocked checks that a cancel of who names the holder and secret
// of the request or lease it cancels (the secret only once who may try
// one: guesses.go).
func (m *Manager) cancellerLocked(who requester, req lease.CancelRequest, holder, secret string) *lease.Error {
	now := time.Now()
	if e := m.guesses.admitLocked(who, now); e != nil {
		return e
	}
	conflict := errorf(lease.CodeConflict, "request id %q belongs to another holder", req.RequestID)
	if holder != req.Holder {
		return conflict
	}
	if !secretMatches(secret, req.Secret) {
		return m.guesses.wrongLocked(who, conflict, now)
	}
	return nil
}

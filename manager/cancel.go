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
	granted := p.p.ReleaseFor(r.tenant, r.slots)
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
	removed, granted := r.pool.p.Cancel(r.w)
	if !removed {
		return
	}
	m.leftQueueLocked(r, e, kind)
	m.startGrantsLocked(r.pool, granted)
}

// leftQueueLocked ends r, which its pool no longer queues: its holder
// hears e, watchers an event of kind, and its queue entry goes.
func (m *Manager) leftQueueLocked(r *request, e *lease.Error, kind lease.EventKind) {
	r.stopTimer()
	m.waiters.drop(r)
	m.journal.dropLocked(r)
	r.trace.EndQueued(string(e.Code))
	m.out.respond(r.reply, errReply(e))
	m.out.emit(r.pool, lease.Event{Kind: kind, RequestID: r.id, Holder: r.holder, Slots: r.slots, Code: e.Code, Message: e.Message})
}

// handleCancel withdraws a queued request, or gives back the lease it was
// granted, and answers at once. A cancel of what has already ended is
// answered "cancelled": it is idempotent.
func (m *Manager) handleCancel(msg *nats.Msg) lease.Reply {
	var req lease.CancelRequest
	e := decode(msg.Data, &req)
	if e == nil {
		e = validateCancel(req)
	}
	if e != nil {
		return errReply(e)
	}
	who := requesterOf(msg, "", 0)
	m.mu.Lock()
	defer m.mu.Unlock()
	p, e := m.poolLocked(poolToken(msg.Subject))
	if e != nil {
		return errReply(e)
	}
	if r := p.waiting[req.RequestID]; r != nil {
		if e := m.guesses.cancellerLocked(who, req, r.holder, r.secret); e != nil {
			return errReply(e)
		}
		if r.state != queued {
			r.state = grantCancelled // given back once stored
		} else {
			m.leaveQueueLocked(r, errorf(lease.CodeCancelled, "cancelled by the holder"), lease.EventCancelled)
		}
		return lease.Reply{Status: lease.StatusCancelled}
	}
	if h := m.leases[lease.RecordKey(m.cfg.Node, p.name, req.RequestID)]; h != nil {
		if e := m.guesses.cancellerLocked(who, req, h.rec.Holder, h.rec.Secret); e != nil {
			return errReply(e)
		}
		if !h.releasing {
			m.startReleaseLocked(h, lease.EventCancelled)
		}
		return lease.Reply{Status: lease.StatusReleased}
	}
	return lease.Reply{Status: lease.StatusCancelled} // already ended
}

// validateCancel checks what a cancel request says of itself.
func validateCancel(req lease.CancelRequest) *lease.Error {
	if err := rules.ValidRequestID(req.RequestID); err != nil {
		return errorf(lease.CodeBadRequest, "%v", err)
	}
	if req.Holder == "" {
		return errorf(lease.CodeBadRequest, "holder is required")
	}
	return nil
}

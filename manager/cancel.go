package manager

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/rules"
)

// abandonedError is what r, whose turn came after its client stopped
// re-sending it, is told instead of being granted slots nobody would use
// until the TTL lapsed. A client that is alive after all hears
// "unavailable" (or, on its next re-send, nothing of r) and queues again
// at the tail.
func abandonedError(r *request, now int64) *lease.Error {
	return errorf(lease.CodeUnavailable, "abandoned: not re-sent for %v while queued (poll_ms %d); acquire again to queue at the tail",
		time.Duration(now-r.lastSeen).Round(time.Millisecond), r.pollMs)
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
	m.endLocked(r, e, kind)
	m.startGrantsLocked(r.pool, granted)
}

// handleCancel withdraws a queued request, or gives back the lease it was
// granted, and answers at once. A cancel of what has already ended is
// answered "cancelled": it is idempotent.
func (m *Manager) handleCancel(msg *nats.Msg) lease.Reply {
	var req lease.CancelRequest
	e := decodeCancel(msg.Data, &req)
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
			m.ended.add(p.name, r.id, r.holder, r.secret, cancelledError(), time.Now())
		} else {
			m.leaveQueueLocked(r, cancelledError(), lease.EventCancelled)
		}
		return lease.Reply{Status: lease.StatusCancelled}
	}
	if h := m.leases.byID(p.name, req.RequestID); h != nil {
		if e := m.guesses.cancellerLocked(who, req, h.rec.Holder, h.rec.Secret); e != nil {
			return errReply(e)
		}
		if !h.releasing {
			m.startReleaseLocked(h, lease.EventCancelled)
		}
		m.ended.add(p.name, h.rec.ID, h.rec.Holder, h.rec.Secret, cancelledError(), time.Now())
		return lease.Reply{Status: lease.StatusReleased}
	}
	return lease.Reply{Status: lease.StatusCancelled} // already ended
}

// cancelledError is what a cancelled request's holder is told.
func cancelledError() *lease.Error { return errorf(lease.CodeCancelled, "cancelled by the holder") }

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

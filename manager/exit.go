package manager

import (
	"time"

	"github.com/slotlease/slotlease/lease"
)

// The exits of a request's life. An answer a handler returns leaves
// through the outbox's serve (respond.go); every later answer leaves
// through here: a grant stored, a request told it waits, a request that
// ends without a lease, a renewal stored or refused.

// endLocked ends r, a request that leaves without a lease: out of the
// waiting requests and its connection's and credential's counts, its wait
// deadline stopped, its queue entry deleted, its queued span ended, its
// holder told e, and watchers an event of kind (none if kind is empty: the
// pool's name came from a stored entry of a pool that is gone). Slots it
// was given are the caller's to give back first, so that the event
// carries the pool's figures after it.
func (m *Manager) endLocked(r *request, e *lease.Error, kind lease.EventKind) {
	r.stopTimer()
	m.waiters.drop(r)
	m.journal.dropLocked(r)
	r.trace.EndQueued(string(e.Code))
	if endsForGood(e.Code) {
		m.ended.add(r.pool.name, r.id, r.holder, r.secret, e, time.Now())
	}
	m.out.respond(r.reply, errReply(e))
	if kind != "" {
		m.out.emit(r.pool, lease.Event{Kind: kind, RequestID: r.id, Holder: r.holder, Slots: r.slots, Key: r.key, Group: r.group, Code: e.Code, Message: e.Message})
	}
}

// granted tells r's holder of its stored lease, and watchers.
func (o *outbox) granted(r *request, rec lease.Record, waitMs int64) {
	o.respond(r.reply, lease.Reply{Status: lease.StatusGranted, Lease: &rec})
	o.emit(r.pool, withShadow(lease.Event{Kind: lease.EventGranted, RequestID: r.id, LeaseID: rec.ID, Holder: r.holder, Slots: r.slots, Tenant: r.tenant, Key: r.key, Group: r.group,
		Token: rec.Token, WaitMs: waitMs, Units: rec.Units}, r))
}

// tellQueued tells r's holder it waits at position, and watchers.
func (o *outbox) tellQueued(r *request, position int) {
	o.respond(r.reply, lease.Reply{Status: lease.StatusQueued, Position: position})
	o.emit(r.pool, lease.Event{Kind: lease.EventQueued, RequestID: r.id, Holder: r.holder, Slots: r.slots, Key: r.key, Position: position})
}

// answerLater sends an answer that does not come back from its handler: a
// renewal's, once stored or refused (and the "bound" before it), or a
// grant's that cannot be given.
func (o *outbox) answerLater(reply string, r lease.Reply) { o.respond(reply, r) }

// endsForGood reports whether a request refused with code is over for its
// client, which does not re-send it: a late re-send is told so (ended.go).
// Other ends (unavailable, holder_disconnected) are retried by a client
// still waiting, whose re-send queues the request anew.
func endsForGood(code lease.Code) bool {
	switch code {
	case lease.CodeCancelled, lease.CodeWaitExpired, lease.CodeDropped, lease.CodeSuperseded:
		return true
	}
	return false
}

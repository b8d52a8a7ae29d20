package manager

import (
	"slices"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// nextOrderLocked returns the enqueue order of a new request: the wall clock
// in nanoseconds, made strictly increasing, so a successor on another host
// (whose clock roughly agrees) orders its new requests after restored ones.
func (m *Manager) nextOrderLocked() int64 {
	n := time.Now().UnixNano()
	if n <= m.lastOrder {
		n = m.lastOrder + 1
	}
	m.lastOrder = n
	return n
}

// persistQueuedLocked writes r's queue entry, so that a successor restores
// it in order.
//
// A request that waits only for slots whose release is already in flight is
// not written: it is granted as soon as those deletes are stored, one store
// write later, like a grant in flight. Should this manager fail in between,
// its client's next poll queues it again. Once the releases in flight no
// longer cover the queue (more requests came, or another request took the
// slots), or as soon as one of those deletes fails, the ones still waiting
// are written after all.
func (m *Manager) persistQueuedLocked(r *request) {
	p := r.pool
	if !coveredLocked(p) {
		m.persistUncoveredLocked(p) // those queued before r first
		m.journal.addLocked(r)
		return
	}
	if n := len(p.unpersisted); n >= 64 && n >= 2*p.p.Stats().QueuedRequests {
		p.unpersisted = slices.DeleteFunc(p.unpersisted, func(q *request) bool { return !waitingUnpersisted(q) })
	}
	p.unpersisted = append(p.unpersisted, r)
}

// coveredLocked reports whether the slots being released cover every
// queued slot of p.
func coveredLocked(p *pool) bool {
	return p.releasing > 0 && p.p.Stats().QueuedSlots <= p.releasing
}

// persistUncoveredLocked writes the entries of unpersisted requests still
// queued once the releases in flight no longer cover the queue.
func (m *Manager) persistUncoveredLocked(p *pool) {
	if !coveredLocked(p) {
		m.persistUnpersistedLocked(p)
	}
}

// persistUnpersistedLocked writes the entries of the unpersisted requests
// still queued, and tells their holders they wait.
func (m *Manager) persistUnpersistedLocked(p *pool) {
	for _, r := range p.unpersisted {
		if waitingUnpersisted(r) {
			m.journal.addLocked(r)
			m.out.respond(r.reply, lease.Reply{Status: lease.StatusQueued, Position: positionLocked(r)})
		}
	}
	p.unpersisted = p.unpersisted[:0]
}

// waitingUnpersisted reports whether r is still queued without an entry.
func waitingUnpersisted(r *request) bool {
	return r.waiting() && !r.entry.has
}

// entryLocked is what the journal stores for r, and for how long, if r
// still waits.
func (m *Manager) entryLocked(r *request) (storedValue, time.Duration, bool) {
	if !r.waiting() {
		return storedValue{}, 0, false
	}
	v := storedValue{
		Record: lease.Record{ID: r.id, Node: m.cfg.Node, Pool: r.pool.name, Slots: r.slots, Holder: r.holder, Term: m.lead.term(), Manager: m.cfg.Instance,
			Secret: r.secret, Tenant: r.tenant, Priority: r.priority},
		queueEntry: queueEntry{Queued: true, ReplyTo: r.reply, QueuedAt: r.order, WaitUntil: unixTime(r.waitUntil), PollMs: r.pollMs},
	}
	return v, m.entryTTL(r), true
}

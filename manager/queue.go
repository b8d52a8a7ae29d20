package manager

import (
	"slices"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// Which queued requests get a stored queue entry, when, and what it
// holds: the journal's methods that run with m.mu held (journal.go writes
// and deletes the entries).

// nextOrderLocked returns the enqueue order of a new request: the wall clock
// in nanoseconds, made strictly increasing, so a successor on another host
// (whose clock roughly agrees) orders its new requests after restored ones.
func (j *journal) nextOrderLocked() int64 {
	n := time.Now().UnixNano()
	if n <= j.lastOrder {
		n = j.lastOrder + 1
	}
	j.lastOrder = n
	return n
}

// restoredLocked notes the order of a restored entry, so that new
// requests come after it.
func (j *journal) restoredLocked(order int64) { j.lastOrder = max(j.lastOrder, order) }

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
func (j *journal) persistQueuedLocked(r *request) {
	p := r.pool
	if !coveredLocked(p) {
		j.persistUncoveredLocked(p) // those queued before r first
		j.addLocked(r)
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
func (j *journal) persistUncoveredLocked(p *pool) {
	if !coveredLocked(p) {
		j.persistUnpersistedLocked(p)
	}
}

// persistUnpersistedLocked writes the entries of the unpersisted requests
// still queued, and tells their holders they wait.
func (j *journal) persistUnpersistedLocked(p *pool) {
	for _, r := range p.unpersisted {
		if waitingUnpersisted(r) {
			j.addLocked(r)
			j.out.respond(r.reply, lease.Reply{Status: lease.StatusQueued, Position: positionLocked(r)})
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
func (j *journal) entryLocked(r *request) (storedValue, time.Duration, bool) {
	if !r.waiting() {
		return storedValue{}, 0, false
	}
	v := storedValue{
		Record: lease.Record{ID: r.id, Node: j.node, Pool: r.pool.name, Slots: r.slots, Holder: r.holder, Term: j.lead.term(), Manager: j.lead.instance,
			Secret: r.secret, Tenant: r.tenant, Key: r.key, Priority: r.priority},
		queueEntry: queueEntry{Queued: true, ReplyTo: r.reply, QueuedAt: r.order, WaitUntil: unixTime(r.waitUntil), PollMs: r.pollMs},
	}
	return v, j.entryTTL(r), true
}

// QueueEntryTTL is the TTL of a queue entry without a wait deadline. A
// request queued longer than this keeps its place in this manager's memory,
// but a successor no longer restores it: its client's next poll queues it
// again, at the tail.
const QueueEntryTTL = 24 * time.Hour

// queueEntryTTL is QueueEntryTTL; tests shorten it (export_test.go).
var queueEntryTTL = QueueEntryTTL

// entryTTL is the TTL of r's queue entry: until its wait deadline and one
// lease TTL more (time for the grant to replace it), or QueueEntryTTL.
// Whole seconds, as the store keeps them.
func (j *journal) entryTTL(r *request) time.Duration {
	d := queueEntryTTL
	if r.waitUntil != 0 {
		d = min(time.Until(time.Unix(0, r.waitUntil))+j.ttl, queueEntryTTL)
	}
	return max(d.Truncate(time.Second)+time.Second, time.Second)
}

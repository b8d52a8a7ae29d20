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

// QueueEntryDelay is how long a queued request waits before its holder
// is told it waits, a queued event goes out and its queue entry is
// written. Under contention most requests are granted sooner (64 clients
// on 4 slots wait about 15 ms each here): their answer, event and entry
// would cost five messages a cycle and tell nobody anything they act on.
// A manager that fails within this time of a request's arrival loses its
// place: its client's next poll queues it again, at the tail.
const QueueEntryDelay = 50 * time.Millisecond

// persistQueuedLocked has r told it waits, and its queue entry written so
// that a successor restores it in order, once it has waited
// j.delay (see tellDueLocked).
func (j *journal) persistQueuedLocked(r *request) {
	p := r.pool
	if n := len(p.unpersisted); n >= 64 && n >= 2*p.p.Stats().QueuedRequests {
		p.unpersisted = slices.DeleteFunc(p.unpersisted, func(q *request) bool { return !waitingUnpersisted(q) })
	}
	p.unpersisted = append(p.unpersisted, r)
	j.armLocked(p)
}

// armLocked arms p's timer for its oldest unpersisted request, unless it
// is armed or there is none.
func (j *journal) armLocked(p *pool) {
	if p.entryTimer != nil || len(p.unpersisted) == 0 {
		return
	}
	d := time.Until(p.unpersisted[0].since.Add(j.delay))
	p.entryTimer = time.AfterFunc(max(d, 0), func() { j.due(p) })
}

// tellDueLocked tells the requests of p that have waited j.delay that
// they wait, and has their entries written; then arms the timer for the
// next one. p's timer runs it (due) with the Manager's lock held.
func (j *journal) tellDueLocked(p *pool) {
	p.entryTimer = nil
	if j.ctx.Err() != nil {
		return // closing: nothing more is written or told
	}
	now := time.Now()
	n := 0
	for _, r := range p.unpersisted {
		if now.Sub(r.since) < j.delay {
			break
		}
		n++
		if waitingUnpersisted(r) {
			j.persistLocked(r)
		}
	}
	clear(p.unpersisted[:n])
	p.unpersisted = p.unpersisted[n:]
	j.armLocked(p)
}

// persistUnpersistedLocked writes the entries of the unpersisted requests
// still queued, and tells their holders they wait, however short their
// wait so far: a release of p failed, so they may wait a while.
func (j *journal) persistUnpersistedLocked(p *pool) {
	for _, r := range p.unpersisted {
		if waitingUnpersisted(r) {
			j.persistLocked(r)
		}
	}
	clear(p.unpersisted)
	p.unpersisted = p.unpersisted[:0]
}

// persistLocked has r's entry written and tells its holder it waits.
func (j *journal) persistLocked(r *request) {
	j.addLocked(r)
	j.tellLocked(r)
}

// tellLocked tells r's holder it waits, and emits its queued event.
func (j *journal) tellLocked(r *request) { j.out.tellQueued(r, positionLocked(r)) }

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
			Secret: r.secret, Tenant: r.tenant, Key: r.key, Priority: r.priority, Units: r.units, Group: r.group, GroupOwner: r.groupOwner},
		queueEntry: queueEntry{Queued: true, ReplyTo: r.reply, QueuedAt: r.order, WaitUntil: unixTime(r.waitUntil), PollMs: r.pollMs, OnGroup: r.onGroup},
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

package manager

import (
	"errors"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// A holder's release hands its slots to the next request in one store
// write where it can: the next request's record replaces the holder's,
// at the holder's key, conditional on the holder's revision. The store
// never holds both, nor neither while the slots are taken, so one write
// per turn of a slot does what a delete and then a create did (issue
// 40: two store round trips per turn made a lease cycle under
// contention slower than a naive lease service's).
//
// It is tried only where nothing else must be stored with the release: a
// pool without a usage budget (whose settlement is stored before the
// delete, budget.go), and a lease with no renewal in flight (whose write
// would race the handover's compare-and-set).

// errHandOverUnseen is why a handover was not taken as stored.
var errHandOverUnseen = errors.New("handover not seen stored")

// releaseLocked starts the release h's holder asked for.
func (m *Manager) releaseLocked(h *held) {
	ew, ok := m.cfg.Store.(EchoWriter)
	if !ok || h.pool == nil || h.pool.p.HasBudget() || m.closed || !h.renewal.tryLock() {
		m.startReleaseLocked(h, lease.EventReleased)
		return
	}
	granted := h.pool.p.HandOver(h.rec.Tenant, h.rec.Key, h.rec.Slots)
	if granted == nil {
		// Nobody to hand them to: they stay taken until the delete.
		h.renewal.unlock()
		m.startReleaseLocked(h, lease.EventReleased)
		return
	}
	h.handedOver = true
	next, others := successor(h, granted)
	if next == nil {
		// Each of them needs the slots h frees: they wait for its delete.
		h.renewal.unlock()
		h.next = granted
		m.startReleaseLocked(h, lease.EventReleased)
		return
	}
	// The others fit in slots that were free before: they go now.
	m.startGrantsLocked(h.pool, others)
	m.handOverLocked(ew, h, next)
}

// successor picks, among the requests granted h's slots, the one whose
// record can replace h's: as many slots as h (so the store counts the
// same), and a client still there. Every other request granted fits in
// slots free before h's release.
func successor(h *held, granted []*pools.Waiter) (*request, []*pools.Waiter) {
	now := time.Now().UnixNano()
	for i, w := range granted {
		r := w.Value.(*request)
		if r.slots == h.rec.Slots && !abandoned(r, now) {
			return r, append(granted[:i:i], granted[i+1:]...)
		}
	}
	return nil, granted
}

// handOverLocked sends r's record over h's and settles the outcome when
// the watch shows it stored (h ends, r is granted), or once it did not
// within echoWait and the store does not have it either
// (handOverFailedLocked). h's renewal lock is held until then.
func (m *Manager) handOverLocked(ew EchoWriter, h *held, r *request) {
	h.releasing, h.releaseKind, h.gone = true, lease.EventReleased, make(chan struct{})
	r.granting()
	_, span := r.trace.StartGrant(natstrace.Node(m.cfg.Node), natstrace.Pool(r.pool.name), natstrace.LeaseID(r.id), natstrace.Slots(r.slots))
	rec := m.grants.recordLocked(r)
	data := appendRecord(make([]byte, 0, 384), &rec)
	m.ops.Add(1)
	sent := time.Now()
	done := func(rev uint64, stored bool) {
		defer m.ops.Done()
		defer span.End()
		if !stored && m.ctx.Err() == nil {
			// Not seen: stored unseen (the watch was being set up
			// again), refused, or still on its way. The store tells;
			// a later arrival is refused once anything else is stored
			// at the key, as the delete that follows expects the same
			// revision. (Closing, the records stay as they are for the
			// successor, and r's holder hears nothing.)
			var err error
			rev, err = m.grants.resolve(h.key, r.id, sent, errHandOverUnseen)
			stored = err == nil
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		h.renewal.unlock()
		if stored {
			// h's record is replaced: it ends, and r's lease begins. r's
			// queue entry, if it has one, is deleted: a successor that
			// finds it anyway drops it, as r's lease is counted first
			// (restoreQueue).
			m.freeLocked(h, lease.EventReleased, h.releaseCode)
			m.journal.dropLocked(r)
			m.grantStoredLocked(r, rec, h.key, rev, span)
		} else {
			m.handOverFailedLocked(h, r)
		}
	}
	withdraw := m.grants.echoes.notify(h.key, data, echoWait, done)
	if err := ew.SendRenew(h.key, data, m.cfg.TTL, h.rev); err != nil && withdraw() {
		defer m.ops.Done()
		defer span.End()
		h.renewal.unlock()
		if fencedOut(err) {
			// The term is over: nothing was sent. h's record stays, and
			// the successor counts it; r's holder hears nothing and
			// retries with the successor.
			m.waiters.drop(r)
			m.log.Warn("handover not stored: this manager's leadership term is over", "key", h.key)
			natstrace.Fail(span, string(lease.CodeUnavailable), err.Error())
			return
		}
		m.handOverFailedLocked(h, r)
	}
}

// handOverFailedLocked deletes h's record the usual way, when the handover
// was not seen stored: refused (h's record changed or expired first) or
// lost. r is granted once the record is gone, in its own write. A
// handover stored unseen is deleted with it: r's holder was told nothing.
func (m *Manager) handOverFailedLocked(h *held, r *request) {
	if m.leases.byKey[h.key] != h {
		// Already gone (expired, or freed): r's slots are free.
		m.startGrantsLocked(r.pool, []*pools.Waiter{r.w})
		return
	}
	h.next = append(h.next, r.w)
	m.ops.Add(1)
	go m.release(h, h.releaseKind)
}

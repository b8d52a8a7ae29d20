package manager

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// observeGone frees the lease whose record expired, or was deleted: its
// slots are free in the store, so they are here. A lease this manager is
// releasing is freed as its release says (its delete's echo, or an expiry
// that came first).
func (m *Manager) observeGone(ch Change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.restored, ch.Key)
	h := m.leases.byKey[ch.Key]
	if h == nil || ch.Rev <= h.rev {
		return
	}
	if h.releasing {
		m.freeLocked(h, h.releaseKind, h.releaseCode)
		return
	}
	kind := lease.EventExpired
	if ch.Op == ChangeDelete {
		kind = lease.EventReleased
	} else {
		_, span := telemetry.StartSpan(context.Background(), natstrace.SpanExpire, natstrace.Node(m.cfg.Node),
			natstrace.Pool(h.rec.Pool), natstrace.LeaseID(h.rec.ID), natstrace.Token(h.rec.Token), natstrace.Slots(h.rec.Slots))
		span.End()
	}
	m.freeLocked(h, kind, "")
}

// observePut counts every stored lease while rebuilding. After that, an
// unknown put is either this manager's own write for a lease it has already
// let go (ignored), or a grant a previous instance stored after this one
// took over (counted, so it cannot be granted twice).
func (m *Manager) observePut(ch Change, rebuilt bool) {
	m.grants.echoes.seen(ch) // a grant waiting for this write, if any
	m.mu.Lock()
	defer m.mu.Unlock()
	stored, ok := m.records.accept(ch, rebuilt, func(key string) bool { return knownKey(m.cfg.Node, m.leases.byKey, m.pools, key) })
	if !ok {
		return
	}
	if h := m.leases.byKey[ch.Key]; h != nil {
		if ch.Rev > h.rev {
			h.rev = ch.Rev
		}
		m.lead.checkWrite(ch)
		return
	}
	if rebuilt && m.lead.wrote(ch.Value) {
		// This instance's own write (a grant whose acknowledgement is on
		// its way, or a queue entry), as decoding would show below, but
		// without the cost on every write of a busy manager.
		return
	}
	if stored == nil { // recognised as this instance's without decoding
		return
	}
	rec := *stored
	if m.lead.later(ch.Key, rec.Term) {
		return // deposed
	}
	if rec.Queued {
		// A queue entry: restored in order once the rebuild is complete.
		// Later ones are this manager's own, or a predecessor's last words
		// whose clients will poll again.
		if !rebuilt {
			m.restored[ch.Key] = restoredReq{entry: rec, rev: ch.Rev}
		}
		return
	}
	if rebuilt {
		if m.closed || !m.lead.mayDelete(ch.Key, rec.Record) {
			// Closing (maybe deposed): the records a successor writes are
			// not ours to judge. Or our own write, or not provably older.
			return
		}
		// A grant another instance stored after this one took over: its
		// write was delayed past that instance's leadership deadline, and
		// that instance, past its deadline, told nobody of it (see grant).
		// Its slots may already be granted here, so it must not count:
		// delete it.
		m.log.Warn("deleting a grant another manager instance stored after this one took over", "key", ch.Key, "manager", rec.Manager)
		m.ops.Add(1)
		go func() {
			defer m.ops.Done()
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
			defer cancel()
			if err := m.cfg.Store.Delete(ctx, ch.Key, ch.Rev); err != nil && !errors.Is(err, ErrStoreNotFound) && !errors.Is(err, ErrStoreRevision) {
				m.log.Warn("deleting a late grant failed; it expires with its TTL", "key", ch.Key, "err", err)
			}
		}()
		return
	}
	if rec.Token == 0 {
		rec.Token = ch.Rev
	}
	delete(m.restored, ch.Key)
	h := &held{key: ch.Key, rec: rec.Record, rev: ch.Rev, pool: m.pools[rec.Pool], restored: true}
	m.leases.add(h)
	if h.pool == nil {
		m.log.Warn("stored lease names a pool this node does not have; it is not counted and cannot be renewed", "key", ch.Key, "pool", rec.Pool)
		return
	}
	h.pool.p.RestoreKey(rec.Tenant, rec.Key, rec.Slots)
	h.pool.p.RestoreUnits(rec.Units) // its estimate stays reserved
}

// restoreQueue queues the stored entries found while rebuilding, in their
// original order, after the restored leases were counted.
func (m *Manager) restoreQueue() {
	m.mu.Lock()
	defer m.mu.Unlock()
	entries := make([]restoredReq, 0, len(m.restored))
	for _, e := range m.restored {
		entries = append(entries, e)
	}
	m.restored = nil
	slices.SortFunc(entries, func(a, b restoredReq) int {
		return cmp.Or(cmp.Compare(a.entry.QueuedAt, b.entry.QueuedAt), cmp.Compare(a.rev, b.rev))
	})
	for _, e := range entries {
		v := e.entry
		p := m.pools[v.Pool]
		r := &request{
			id: v.ID, holder: v.Holder, secret: v.Secret, tenant: v.Tenant, key: v.Key, priority: v.Priority, slots: v.Slots, units: v.Units, pool: p, reply: v.ReplyTo,
			since: time.Unix(0, v.QueuedAt), order: v.QueuedAt, waitUntil: unixNano(v.WaitUntil),
			entry: entry{has: true, rev: e.rev},
			// Its client has had no manager to re-send to: count from now.
			pollMs: v.PollMs, lastSeen: time.Now().UnixNano(),
			group: v.Group, groupOwner: v.GroupOwner, onGroup: v.OnGroup,
		}
		if p != nil && m.leases.byID(p.name, v.ID) != nil {
			// Granted at another key (a slot handed over to it) before
			// its entry's delete was stored: the entry goes.
			m.journal.dropLocked(r)
			continue
		}
		if p == nil {
			// The pool was removed meanwhile: refuse the request, drop its entry.
			r.pool = &pool{name: v.Pool}
			m.endLocked(r, errorf(lease.CodeUnknownPool, "pool %q was removed from node %s", v.Pool, m.cfg.Node), "")
			continue
		}
		m.journal.restoredLocked(v.QueuedAt)
		e := exceeds(p, v.Slots)
		if e == nil {
			e = overBudget(p, v.Units)
		}
		if e == nil && r.waitUntil != 0 && time.Now().UnixNano() > r.waitUntil {
			e = errorf(lease.CodeWaitExpired, "not granted within the wait deadline")
		}
		var w *pools.Waiter
		var granted bool
		if e == nil {
			var err error
			if w, granted, _, err = p.p.EnqueueRequest(r.poolRequest()); err != nil {
				// A tenant cap or a queue limit lowered since it queued: its
				// client hears why, and the entry goes.
				e = enqueueError(p, v.Slots, err, m.cfg.TTL)
			}
		}
		if e != nil {
			m.endLocked(r, e, lease.EventRejected)
			continue
		}
		r.w = w
		m.waiters.add(r)
		m.groups.restoredLocked(r)
		if granted {
			m.startGrantLocked(r)
		} else {
			m.journal.tellLocked(r)
			m.waitLocked(r)
		}
	}
	if len(entries) > 0 {
		m.log.Info("restored queued requests", "count", len(entries))
	}
}

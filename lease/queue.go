package lease

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A request that has to wait is stored as a queue entry under the key its
// lease will have. The grant then replaces the entry (conditional on its
// revision), and a cancel or an expired wait deletes it. A manager that
// starts, after a restart or taking over from another instance, finds the
// entries while rebuilding and queues them again in their original order,
// so queued requests survive a failover in FIFO order; their grants go to
// the reply subjects stored with them, and a client's next poll (same
// request id) finds its request where it was.
//
// The entry is written asynchronously: the holder is told it is queued at
// once. A manager that dies before the write is stored loses that one
// entry; the client's next poll queues it again, at the tail.

// queueEntry is what a stored queue entry adds to the Record fields.
type queueEntry struct {
	Queued    bool      `json:"queued,omitempty"`
	ReplyTo   string    `json:"reply_to,omitempty"`
	QueuedAt  int64     `json:"queued_at,omitempty"` // enqueue order: unix ns, strictly increasing per manager
	WaitUntil time.Time `json:"wait_until,omitzero"`
	PollMs    int64     `json:"poll_ms,omitempty"` // the client's re-send promise
}

// storedValue is any value of the lease bucket: a lease record, or a queue
// entry when Queued is set.
type storedValue struct {
	Record
	queueEntry
}

type restoredReq struct {
	entry storedValue
	rev   uint64
}

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
		m.startPersistLocked(r)
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
			m.startPersistLocked(r)
			m.respond(r.reply, Reply{Status: StatusQueued, Position: positionLocked(r)})
		}
	}
	p.unpersisted = p.unpersisted[:0]
}

// waitingUnpersisted reports whether r is still queued without an entry.
func waitingUnpersisted(r *request) bool {
	return r.pool.waiting[r.id] == r && !r.granting && !r.cancelled && !r.hasEntry
}

// maxEntryWriters bounds the queue entry writes in flight. A burst of
// queued requests waits in Manager.entryQueue, a pointer each, rather than
// in a goroutine each: the runtime keeps a goroutine's descriptor for good
// once it has existed, so 100k goroutines at once leave ~40 MB behind.
const maxEntryWriters = 32

// startPersistLocked has r's queue entry written in the background; a grant
// waits for it (awaitPersisted) and writes over it.
func (m *Manager) startPersistLocked(r *request) {
	r.hasEntry = true
	r.writing.Add(1)
	m.ops.Add(1)
	m.entryQueue = append(m.entryQueue, r)
	if m.entryWriters < maxEntryWriters {
		m.entryWriters++
		go m.writeEntries()
	}
}

// writeEntries writes the entries in entryQueue, in order, until none is
// left. An entry whose request stopped waiting before its turn (granted,
// cancelled, expired) or that comes up while the manager is closing is not
// written: its grant then creates the record, and there is nothing to drop.
func (m *Manager) writeEntries() {
	for {
		m.mu.Lock()
		if len(m.entryQueue) == 0 {
			m.entryWriters--
			m.entryQueue = nil // let a burst's backing array go
			m.mu.Unlock()
			return
		}
		r := m.entryQueue[0]
		m.entryQueue[0] = nil
		m.entryQueue = m.entryQueue[1:]
		if r.pool.waiting[r.id] != r || r.granting || r.cancelled || m.ctx.Err() != nil {
			m.mu.Unlock()
			r.writing.Done()
			m.ops.Done()
			continue
		}
		v := storedValue{
			Record: Record{ID: r.id, Node: m.cfg.Node, Pool: r.pool.name, Slots: r.slots, Holder: r.holder, Term: m.term(), Manager: m.cfg.Instance,
				Secret: r.secret, Tenant: r.tenant, Priority: r.priority},
			queueEntry: queueEntry{Queued: true, ReplyTo: r.reply, QueuedAt: r.order, WaitUntil: unixTime(r.waitUntil), PollMs: r.pollMs},
		}
		ttl := m.entryTTL(r)
		m.mu.Unlock()
		m.persist(r, v, ttl)
	}
}

// persist writes r's queue entry with a TTL: a record without one would
// be refused by the next manager (see acceptRecord).
func (m *Manager) persist(r *request, v storedValue, ttl time.Duration) {
	defer m.ops.Done()
	defer r.writing.Done()
	data, err := json.Marshal(v)
	if err != nil {
		m.log.Error("encoding a queue entry", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
	defer cancel()
	key := RecordKey(m.cfg.Node, r.pool.name, r.id)
	rev, err := m.cfg.Store.Create(ctx, key, data, ttl)
	if errors.Is(err, ErrStoreExists) {
		// A queue entry left by an earlier attempt: take it over.
		rev, err = m.staleEntry(ctx, key)
	}
	if err != nil {
		// The request still waits in memory; only a failover would lose
		// its place, and its client re-sends it then.
		m.log.Warn("storing a queued request failed", "request", r.id, "err", err)
		return
	}
	r.entryRev = rev // published to readers by r.writing.Done
}

// staleEntry returns the revision of a stored queue entry at key, left by
// an earlier attempt whose write or delete failed.
func (m *Manager) staleEntry(ctx context.Context, key string) (uint64, error) {
	data, rev, err := m.cfg.Store.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	var v storedValue
	if err := json.Unmarshal(data, &v); err != nil || !v.Queued {
		return 0, fmt.Errorf("%w: %s holds a record that is not a queue entry", ErrStoreExists, key)
	}
	return rev, nil
}

// writeGrant stores a grant: over its queue entry (conditional on the
// entry's revision) when the request was queued, else as a new key.
func (m *Manager) writeGrant(key string, data []byte, entryRev uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
	defer cancel()
	if entryRev == 0 {
		rev, err := m.cfg.Store.Create(ctx, key, data, m.cfg.TTL)
		if !errors.Is(err, ErrStoreExists) {
			return rev, err
		}
		if entryRev, err = m.staleEntry(ctx, key); err != nil {
			return 0, err
		}
	}
	rev, err := m.cfg.Store.Renew(ctx, key, data, m.cfg.TTL, entryRev)
	if errors.Is(err, ErrStoreRevision) {
		// The entry expired (its TTL, QueueEntryTTL, lapsed while the
		// request waited) or was replaced. Create writes over an expiry
		// marker and refuses anything live, so this never writes over
		// another grant.
		return m.cfg.Store.Create(ctx, key, data, m.cfg.TTL)
	}
	return rev, err
}

// awaitPersisted waits until the queue entry write, if any, has ended and
// returns the entry's revision (0 if none was stored).
func (r *request) awaitPersisted() uint64 {
	if !r.hasEntry {
		return 0
	}
	r.writing.Wait()
	return r.entryRev
}

// startDropLocked deletes the queue entry of a request that left the queue
// without a grant.
func (m *Manager) startDropLocked(r *request) {
	if !r.hasEntry {
		return
	}
	key := RecordKey(m.cfg.Node, r.pool.name, r.id)
	m.ops.Add(1)
	go func() {
		defer m.ops.Done()
		rev := r.awaitPersisted()
		if rev == 0 {
			return
		}
		// Retry until the delete is stored: a left-over entry would come
		// back as a phantom waiter under the next manager.
		backoff := 50 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
			err := m.cfg.Store.Delete(ctx, key, rev)
			cancel()
			if err == nil || errors.Is(err, ErrStoreNotFound) || errors.Is(err, ErrStoreRevision) {
				return // gone, or replaced by a newer write of this key
			}
			if fencedOut(err) {
				return // the term is over: the successor restores or drops it
			}
			m.log.Warn("deleting a queue entry failed; retrying", "key", key, "err", err)
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
		}
	}()
}

// unixTime and unixNano convert a deadline kept as unix ns (0: none) to and
// from the zero-or-time form of the stored entry.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
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
			id: v.ID, holder: v.Holder, secret: v.Secret, tenant: v.Tenant, priority: v.Priority, slots: v.Slots, pool: p, reply: v.ReplyTo,
			since: time.Unix(0, v.QueuedAt), order: v.QueuedAt, waitUntil: unixNano(v.WaitUntil),
			hasEntry: true, entryRev: e.rev,
			// Its client has had no manager to re-send to: count from now.
			pollMs: v.PollMs, lastSeen: time.Now().UnixNano(),
		}
		if p == nil {
			// The pool was removed meanwhile: refuse the request, drop its entry.
			r.pool = &pool{name: v.Pool}
			m.respond(r.reply, errReply(errorf(CodeUnknownPool, "pool %q was removed from node %s", v.Pool, m.cfg.Node)))
			m.startDropLocked(r)
			continue
		}
		m.lastOrder = max(m.lastOrder, v.QueuedAt)
		var e *Error
		switch {
		case v.Slots > p.p.Stats().Capacity:
			e = errorf(CodeExceedsCapacity, "%d slots requested, pool %q has capacity %d", v.Slots, p.name, p.p.Stats().Capacity)
		case r.waitUntil != 0 && time.Now().UnixNano() > r.waitUntil:
			e = errorf(CodeWaitExpired, "not granted within the wait deadline")
		}
		if e != nil {
			m.respond(r.reply, errReply(e))
			m.emit(p, Event{Kind: EventRejected, RequestID: r.id, Holder: r.holder, Slots: r.slots, Code: e.Code, Message: e.Message})
			m.startDropLocked(r)
			continue
		}
		w, granted, position, err := p.p.EnqueueRequest(r.poolRequest())
		if err != nil {
			m.log.Error("restoring a queued request", "request", r.id, "err", err)
			continue
		}
		r.w = w
		p.waiting[r.id] = r
		if granted {
			m.startGrantLocked(r)
		} else {
			m.queuedLocked(r, position, true)
		}
	}
	if len(entries) > 0 {
		m.log.Info("restored queued requests", "count", len(entries))
	}
}

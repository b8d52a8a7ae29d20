package manager

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"go.opentelemetry.io/otel/trace"
)

// startGrantLocked writes the lease record of a request whose slots were
// granted in memory. The holder hears of the grant only once the write is
// acknowledged.
func (m *Manager) startGrantLocked(r *request) {
	r.granting()
	m.ops.Add(1)
	go m.grant(r)
}

// granting marks r granted in memory, its record not yet stored.
func (r *request) granting() {
	r.state = granting
	r.grantedAt = time.Now()
	if s := r.w.Started; !s.IsZero() {
		r.grantedAt = s // when the pool's rate counted it (pools.Waiter)
	}
	r.stopTimer()
}

// startGrantsLocked starts the grants of waiters p just granted, except
// those whose client abandoned them: their slots go to the next. Then it
// arms p's rate timer for the waiter after them.
func (m *Manager) startGrantsLocked(p *pool, rs []*pools.Waiter) {
	defer m.rates.armLocked(p, m.closed)
	for len(rs) > 0 {
		var next []*pools.Waiter
		now := time.Now().UnixNano()
		for _, w := range rs {
			r := w.Value.(*request)
			if abandoned(r, now) {
				// The slots back first, so the event carries the
				// figures after the drop.
				next = append(next, p.p.ReleaseKey(r.tenant, r.key, r.slots)...)
				m.endLocked(r, abandonedError(r, now), lease.EventRejected)
				continue
			}
			m.startGrantLocked(r)
		}
		rs = next
	}
}

func (m *Manager) grant(r *request) {
	defer m.ops.Done()
	_, span := r.trace.StartGrant(natstrace.Node(m.cfg.Node), natstrace.Pool(r.pool.name), natstrace.LeaseID(r.id), natstrace.Slots(r.slots))
	defer span.End()
	m.mu.Lock()
	rec := m.grants.recordLocked(r)
	key, own := m.leases.storeKey(r)
	m.mu.Unlock()
	data := appendRecord(make([]byte, 0, 384), &rec)
	var rev uint64
	var err error
	if m.ctx.Err() != nil {
		// Closing, perhaps because leadership is about to lapse: write
		// nothing new, so a successor's count stays complete.
		err = errors.New("lease manager is shutting down")
	}
	if err == nil {
		var entryRev uint64 // its queue entry's, written over: only at its own key
		if own {
			entryRev = r.entry.await()
		}
		rev, err = m.grants.put(key, r.id, data, entryRev)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	p := r.pool
	m.waiters.drop(r)
	if fencedOut(err) {
		// The term is over: nothing was sent. The holder hears nothing
		// and retries with the successor, which restores its queue entry
		// if it has one. The slots stay taken here: this manager grants
		// nothing more.
		m.log.Warn("grant not stored: this manager's leadership term is over", "key", key)
		natstrace.Fail(span, string(lease.CodeUnavailable), err.Error())
		return
	}
	if err != nil {
		// Nothing was stored: the slots go back, the holder may retry
		// (anew, so its queue entry goes too).
		m.log.Warn("storing a grant failed", "key", key, "err", err)
		granted := p.p.ReleaseKey(r.tenant, r.key, r.slots)
		e := errorf(lease.CodeUnavailable, "storing the lease failed: %v", err)
		natstrace.Fail(span, string(e.Code), e.Message)
		if m.closed {
			// Its queue entry, if any, stays for the successor to restore.
			m.out.answerLater(r.reply, errReply(e))
			return
		}
		m.startGrantsLocked(p, granted)
		m.endLocked(r, e, lease.EventRejected)
		return
	}
	m.grantStoredLocked(r, rec, key, rev, span)
}

// grantStoredLocked counts r's grant, whose record is stored at key with
// revision rev, and tells its holder: the step after a grant's write,
// whichever write stored it (grant, or handover over a released record).
func (m *Manager) grantStoredLocked(r *request, rec lease.Record, key string, rev uint64, span trace.Span) {
	m.waiters.drop(r)
	if m.ctx.Err() != nil {
		// Stored, but this manager is closing, perhaps past its leadership
		// deadline: a successor may not have counted this record and will
		// delete it. Tell the holder nothing but to retry; after a restart
		// of this same manager the retry finds the record.
		e := closingError(m.cfg.Node)
		natstrace.Fail(span, string(e.Code), e.Message)
		m.out.answerLater(r.reply, errReply(e))
		return
	}
	rec.Token = rev
	h := &held{key: key, rec: rec, rev: rev, pool: r.pool}
	m.leases.add(h)
	natstrace.SetAttributes(span, natstrace.Token(rev))
	if m.cfg.GrantLatency != nil {
		m.cfg.GrantLatency(r.pool.name, time.Since(r.since))
	}
	if m.gone.knownClosedLocked(r.conn) {
		m.freeOnCloseLocked(h) // its connection closed while the record was written
	}
	if r.state == grantCancelled {
		// The holder gave up while the write was in flight: give it back.
		m.startReleaseLocked(h, lease.EventCancelled)
		return
	}
	m.out.granted(r, rec, time.Since(r.since).Milliseconds())
	m.groups.grantedLocked(r, h)
}

// recordLocked is the lease record r's grant stores. granted_at is when
// the slots were taken, not when the write got to run: under load that
// came seconds later and out of order, and a rate's windows measured on
// the records then showed bursts the bucket never allowed. expires_at
// estimates the write's TTL.
func (gs *grantStore) recordLocked(r *request) lease.Record {
	rec := lease.Record{
		ID: r.id, Node: gs.node, Pool: r.pool.name, Slots: r.slots, Holder: r.holder,
		TTLMs: gs.ttl.Milliseconds(), GrantedAt: r.grantedAt.UTC(), ExpiresAt: time.Now().Add(gs.ttl).UTC(),
		Term: gs.lead.term(), Manager: gs.instance, Secret: r.secret, Tenant: r.tenant, Key: r.key, Priority: r.priority, Units: r.units,
		Group: r.group, GroupOwner: r.groupOwner,
	}
	if c := r.conn; c.known() && gs.grace > 0 {
		// Fast release: the lease is bound to the connection the request
		// came on, and the holder is told the grace it must keep.
		rec.ConnServer, rec.ConnID, rec.DisconnectGraceMs = c.server, c.id, gs.grace.Milliseconds()
	}
	return rec
}

// grantStore stores grants in the lease bucket: over the request's queue
// entry, conditional on its revision, or as a new key; and it finds out
// whether a write that failed ambiguously was stored. It holds no state and
// takes no lock: the grant goroutine calls it between its two steps under
// m.mu, and every store call is bounded by the store timeout.
type grantStore struct {
	store    Store
	journal  *journal // takes over a queue entry an earlier attempt left
	ttl      time.Duration
	timeout  time.Duration
	node     string
	instance string
	lead     *leadership   // the term a record names
	grace    time.Duration // DisconnectGrace with fast release, else 0
	log      *slog.Logger
	echoes   echoes // the writes sent without an acknowledgement
}

// put stores a grant and returns its revision. It sends the write
// without waiting for the acknowledgement, and waits for the watch to show
// it stored (echoes), when the Store can; with no echo within echoWait (the
// write was refused, or lost, or the watch is being set up again) it finds
// out from the stream leader whether the write is stored, and writes with
// an acknowledgement if it is not. An acknowledged write that failed
// ambiguously is resolved the same way: the slots stay taken until the
// store says.
func (gs *grantStore) put(key, id string, data []byte, entryRev uint64) (uint64, error) {
	started := time.Now()
	if ew, ok := gs.store.(EchoWriter); ok {
		w, err := gs.send(ew, key, data, entryRev)
		if fencedOut(err) {
			return 0, err
		}
		if w != nil {
			if rev, ok := gs.echoes.wait(key, w, echoWait); ok {
				return rev, nil
			}
			// Not seen: stored unseen, refused, or still on its way. A
			// later arrival is refused once anything else is stored at
			// key, as both writes expect the same revision.
			if rev, err := gs.resolve(key, id, started, ErrStoreNotFound); err == nil {
				return rev, nil
			}
		}
	}
	rev, err := gs.write(key, data, entryRev)
	if err != nil && !fencedOut(err) {
		// Ambiguous, or a write that lost to one of its own (the one sent
		// without an acknowledgement came in the end).
		rev, err = gs.resolve(key, id, started, err)
	}
	return rev, err
}

// send sends the grant's write without an acknowledgement and returns
// its expected echo; nil if it was not sent (errNoEcho, or fenced: err).
func (gs *grantStore) send(ew EchoWriter, key string, data []byte, entryRev uint64) (*awaited, error) {
	w := gs.echoes.expect(key, data)
	var err error
	if entryRev == 0 {
		err = ew.SendCreate(key, data, gs.ttl)
	} else {
		err = ew.SendRenew(key, data, gs.ttl, entryRev)
	}
	if err != nil {
		gs.echoes.forget(key, w)
		return nil, err
	}
	return w, nil
}

// resolve finds out whether a grant write that failed ambiguously was
// stored: it reads the key until the store answers, or until the record,
// had it been stored, would have expired. It returns the grant's revision if
// the record is this grant, else writeErr.
func (gs *grantStore) resolve(key, id string, started time.Time, writeErr error) (uint64, error) {
	backoff := 50 * time.Millisecond
	for time.Since(started) < gs.ttl+time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), gs.timeout)
		data, rev, err := gs.store.Get(ctx, key)
		cancel()
		if errors.Is(err, ErrStoreNotFound) {
			return 0, writeErr
		}
		if err == nil {
			var v storedValue
			if json.Unmarshal(data, &v) == nil && !v.Queued && v.ID == id && v.Manager == gs.instance && v.Token == 0 {
				gs.log.Info("a grant whose acknowledgement was lost is stored; keeping it", "key", key)
				return rev, nil
			}
			return 0, writeErr // the queue entry is still there, or another record
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
	return 0, writeErr
}

// write stores a grant: over its queue entry (conditional on the entry's
// revision) when the request was queued, else as a new key.
func (gs *grantStore) write(key string, data []byte, entryRev uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), gs.timeout)
	defer cancel()
	if entryRev == 0 {
		rev, err := gs.store.Create(ctx, key, data, gs.ttl)
		if !errors.Is(err, ErrStoreExists) {
			return rev, err
		}
		if entryRev, err = gs.journal.stale(ctx, key); err != nil {
			return 0, err
		}
	}
	rev, err := gs.store.Renew(ctx, key, data, gs.ttl, entryRev)
	if errors.Is(err, ErrStoreRevision) {
		// The entry expired (its TTL, QueueEntryTTL, lapsed while the
		// request waited) or was replaced. Create writes over an expiry
		// marker and refuses anything live, so this never writes over
		// another grant.
		return gs.store.Create(ctx, key, data, gs.ttl)
	}
	return rev, err
}

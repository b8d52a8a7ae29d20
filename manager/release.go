package manager

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// handleRelease answers a release at once: the holder need not wait for
// the delete, since until it is stored the slots stay busy, which costs a
// little capacity and never over-grants.
func (m *Manager) handleRelease(msg *nats.Msg) lease.Reply {
	_, span := telemetry.StartServerSpan(msg.Header, natstrace.SpanRelease, natstrace.Node(m.cfg.Node), natstrace.Pool(poolToken(msg.Subject)))
	defer span.End()
	var req lease.ReleaseRequest
	e := decodeRelease(msg.Data, &req)
	if e == nil {
		natstrace.SetAttributes(span, natstrace.LeaseID(echo.Clip(req.LeaseID)), natstrace.Token(req.Token))
		m.mu.Lock()
		var h *held
		if h, e = m.lookupLocked(requesterOf(msg, "", 0), msg.Subject, req.LeaseID, req.Token, req.Secret); e == nil {
			e = checkSettle(req.Units)
		}
		if e == nil {
			h.settle = req.Units
			m.releaseLocked(h)
			m.ended.add(h.rec.Pool, h.rec.ID, h.rec.Holder, h.rec.Secret, nil, time.Now())
		}
		m.mu.Unlock()
	}
	if e != nil {
		natstrace.Fail(span, string(e.Code), e.Message)
		return errReply(e)
	}
	return lease.Reply{Status: lease.StatusReleased}
}

// startReleaseLocked deletes h's record; its slots stay busy until that is
// stored.
func (m *Manager) startReleaseLocked(h *held, kind lease.EventKind) {
	h.releasing = true
	h.releaseKind = kind
	h.gone = make(chan struct{})
	m.budgets.startLocked(h)
	m.ops.Add(1)
	go m.release(h, kind)
}

// echoWait is how long a delete sent without an acknowledgement waits for
// the watch to show it stored, before it is sent again with one.
const echoWait = time.Second

// release deletes the record, conditional on its revision, and frees the
// slots once the Store confirms the record is gone: through the watch, which
// shows the delete stored (observeGone), when the Store can send it without
// an acknowledgement; otherwise, or with no echo within echoWait (the
// delete was refused or lost, or the watch is being set up again), once the
// Store acknowledges it. It retries until then: freeing earlier could let
// the next grant overlap a record still stored.
func (m *Manager) release(h *held, kind lease.EventKind) {
	defer m.ops.Done()
	if !m.budgets.storeSettled(m.ctx, h) {
		return // fenced out or closing: the record stays, its estimate counted
	}
	m.mu.Lock()
	rev := h.rev
	m.mu.Unlock()
	if ew, ok := m.cfg.Store.(EchoWriter); ok && ew.SendDelete(h.key, rev) == nil {
		select {
		case <-h.gone:
			return
		case <-time.After(echoWait):
		case <-m.ctx.Done():
		}
	}
	backoff := 50 * time.Millisecond
	for {
		m.mu.Lock()
		rev := h.rev
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
		err := m.cfg.Store.Delete(ctx, h.key, rev)
		if errors.Is(err, ErrStoreRevision) {
			// Renewed meanwhile (retry with the newer revision) or expired.
			var newRev uint64
			_, newRev, err = m.cfg.Store.Get(ctx, h.key)
			if err == nil {
				m.mu.Lock()
				if newRev > h.rev {
					h.rev = newRev
				}
				m.mu.Unlock()
				cancel()
				continue
			}
		}
		cancel()
		if err == nil || errors.Is(err, ErrStoreNotFound) {
			m.mu.Lock()
			m.freeLocked(h, kind, h.releaseCode)
			m.mu.Unlock()
			return
		}
		if fencedOut(err) {
			// The term is over: the record stays, the successor counts it
			// until the holder's retried release or its TTL ends it.
			m.log.Warn("lease record not deleted: this manager's leadership term is over", "key", h.key)
			return
		}
		m.log.Warn("deleting a lease record failed; retrying", "key", h.key, "err", err)
		m.mu.Lock()
		if h.pool != nil && !m.closed {
			// The requests waiting only for these slots may wait a while
			// longer: store their queue entries after all.
			m.journal.persistUnpersistedLocked(h.pool)
		}
		m.mu.Unlock()
		select {
		case <-m.ctx.Done():
			// Shutting down: the record stays until its TTL lapses, and the
			// next manager for this node counts it until then.
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// freeLocked returns a gone lease's slots to its pool and grants waiters.
func (m *Manager) freeLocked(h *held, kind lease.EventKind, code lease.Code) {
	if m.leases.byKey[h.key] != h {
		return
	}
	m.leases.drop(h)
	if h.gone != nil {
		close(h.gone)
	}
	m.stop.renewedLocked(h)
	if h.pool == nil {
		return
	}
	var granted []*pools.Waiter
	var settled *int64
	if h.handedOver {
		granted, h.next = h.next, nil // its slots went back at its release (handover.go)
	} else {
		granted, settled = m.budgets.settleLocked(h, m.closed)
	}
	m.out.emit(h.pool, lease.Event{Kind: kind, RequestID: h.rec.ID, LeaseID: h.rec.ID, Holder: h.rec.Holder, Slots: h.rec.Slots, Key: h.rec.Key, Token: h.rec.Token, Code: code, Settled: settled})
	if !m.closed {
		m.startGrantsLocked(h.pool, granted)
	}
}

package manager

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

func (m *Manager) handleRelease(msg *nats.Msg) {
	_, span := telemetry.StartServerSpan(msg.Header, natstrace.SpanRelease, natstrace.Node(m.cfg.Node), natstrace.Pool(poolToken(msg.Subject)))
	defer span.End()
	var req lease.ReleaseRequest
	if e := decode(msg.Data, &req); e != nil {
		natstrace.Fail(span, string(e.Code), e.Message)
		m.out.respond(msg.Reply, errReply(e))
		return
	}
	natstrace.SetAttributes(span, natstrace.LeaseID(echo.Clip(req.LeaseID)), natstrace.Token(req.Token))
	who := requesterOf(msg, "", 0)
	m.mu.Lock()
	defer m.mu.Unlock()
	h, e := m.lookupLocked(who, msg.Subject, req.LeaseID, req.Token, req.Secret)
	if e != nil {
		natstrace.Fail(span, string(e.Code), e.Message)
		m.out.respond(msg.Reply, errReply(e))
		return
	}
	// The holder need not wait for the delete: until it is stored the slots
	// stay busy, which costs a little capacity and never over-grants.
	m.out.respond(msg.Reply, lease.Reply{Status: lease.StatusReleased})
	m.startReleaseLocked(h, lease.EventReleased)
}

// startReleaseLocked deletes h's record; its slots stay busy until that is
// stored.
func (m *Manager) startReleaseLocked(h *held, kind lease.EventKind) {
	h.releasing = true
	if h.pool != nil {
		h.pool.releasing += h.rec.Slots
	}
	m.ops.Add(1)
	go m.release(h, kind)
}

// release deletes the record, conditional on its revision, and frees the
// slots once the Store confirms the record is gone. It retries until then:
// freeing earlier could let the next grant overlap a record still stored.
func (m *Manager) release(h *held, kind lease.EventKind) {
	defer m.ops.Done()
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
	if m.leases[h.key] != h {
		return
	}
	delete(m.leases, h.key)
	m.stop.renewedLocked(h)
	if h.pool == nil {
		return
	}
	if h.releasing {
		h.pool.releasing -= h.rec.Slots
	}
	granted := h.pool.p.ReleaseKey(h.rec.Tenant, h.rec.Key, h.rec.Slots)
	m.out.emit(h.pool, lease.Event{Kind: kind, RequestID: h.rec.ID, LeaseID: h.rec.ID, Holder: h.rec.Holder, Slots: h.rec.Slots, Token: h.rec.Token, Code: code})
	if !m.closed {
		m.startGrantsLocked(h.pool, granted)
		m.journal.persistUncoveredLocked(h.pool)
	}
}

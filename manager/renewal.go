package manager

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/rules"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"go.opentelemetry.io/otel/trace"
)

// poolLocked returns the pool a request names, or the error to answer it
// with: the manager is closing, or has no such pool.
func (m *Manager) poolLocked(name string) (*pool, *lease.Error) {
	if m.closed {
		return nil, closingError(m.cfg.Node)
	}
	if p := m.pools[name]; p != nil {
		return p, nil
	}
	if m.removed[name] {
		return nil, errorf(lease.CodeUnknownPool, "pool %q was removed from node %s (leasemgr resize --remove): its leases are revoked", name, m.cfg.Node)
	}
	names := slices.Sorted(maps.Keys(m.pools))
	if m.cfg.ClusterPools != nil && m.cfg.Node != lease.ClusterNode {
		if cluster := m.cfg.ClusterPools(); cluster != nil {
			return nil, errorf(lease.CodeUnknownPool, "node %s has no pool %q (its pools: %s; cluster pools: %s)", m.cfg.Node, name, echo.List(names), echo.List(cluster))
		}
	}
	return nil, errorf(lease.CodeUnknownPool, "node %s has no pool %q (its pools: %s)", m.cfg.Node, name, echo.List(names))
}

// closingError answers requests to node's manager that arrive once Close
// has begun.
func closingError(node string) *lease.Error {
	return errorf(lease.CodeUnavailable, "lease manager for node %s is shutting down; retry", node)
}

// lookupLocked finds the lease a renew or release of who names and checks
// its token and secret: the secret only once who may try one (guesses.go).
func (m *Manager) lookupLocked(who requester, subject string, leaseID string, token uint64, secret string) (*held, *lease.Error) {
	poolName := poolToken(subject)
	if _, e := m.poolLocked(poolName); e != nil {
		return nil, e
	}
	if leaseID == "" {
		return nil, errorf(lease.CodeBadRequest, "lease_id is required")
	}
	if err := rules.ValidRequestID(leaseID); err != nil {
		return nil, errorf(lease.CodeBadRequest, "lease_id: %v", strings.TrimPrefix(err.Error(), "request_id "))
	}
	h := m.leases.byID(poolName, leaseID)
	if h == nil || h.releasing {
		return nil, errorf(lease.CodeLeaseNotFound, "no live lease %q in pool %q on node %s", leaseID, poolName, m.cfg.Node)
	}
	now := time.Now()
	if e := m.guesses.admitLocked(who, now); e != nil {
		return nil, e
	}
	if h.rec.Token != token {
		return nil, errorf(lease.CodeTokenMismatch, "lease %q has a different fencing token than %d", leaseID, token)
	}
	if !secretMatches(h.rec.Secret, secret) {
		return nil, m.guesses.wrongLocked(who, errorf(lease.CodeTokenMismatch, "lease %q was acquired with a different secret", leaseID), now)
	}
	return h, nil
}

// secretMatches compares in constant time, so timing tells nothing.
func secretMatches(want, got string) bool {
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// handleRenew starts a renewal, whose answer comes once it is stored
// (renew); it answers at once only an error. A lease that moved to the
// connection the renewal came on is told "bound" first (held.rebind),
// before the renewal can answer.
func (m *Manager) handleRenew(msg *nats.Msg) lease.Reply {
	_, span := telemetry.StartServerSpan(msg.Header, natstrace.SpanRenew, natstrace.Node(m.cfg.Node), natstrace.Pool(poolToken(msg.Subject)))
	var req lease.RenewRequest
	e := decodeRenew(msg.Data, &req)
	if e == nil {
		natstrace.SetAttributes(span, natstrace.LeaseID(echo.Clip(req.LeaseID)), natstrace.Token(req.Token))
		m.mu.Lock()
		var h *held
		var bound lease.Reply
		h, e = m.lookupLocked(requesterOf(msg, req.ConnServer, req.ConnID), msg.Subject, req.LeaseID, req.Token, req.Secret)
		if e == nil {
			e = m.groups.refusedLocked(h) // group.go
		}
		if e == nil {
			bound, e = h.rebind(req.ConnServer, req.ConnID, req.LameDuck)
		}
		if bound.Status != "" && m.gone.knownClosedLocked(recordConn(&h.rec)) {
			m.freeOnCloseLocked(h) // moved to a connection already closed
		}
		if e == nil {
			if bound.Status != "" {
				m.out.answerLater(msg.Reply, bound)
			}
			m.ops.Add(1)
			go m.renew(msg.Reply, h, time.Now(), span) // answers once stored
		}
		m.mu.Unlock()
	}
	if e != nil {
		natstrace.Fail(span, string(e.Code), e.Message)
		span.End()
		return errReply(e)
	}
	return lease.Reply{} // the renewal answers
}

// renew rewrites the record with a fresh TTL, conditional on the revision we
// know: a record that expired meanwhile is never brought back. received is
// when the request arrived; renewals of one lease run one at a time
// (renewSeq).
func (m *Manager) renew(reply string, h *held, received time.Time, span trace.Span) {
	defer m.ops.Done()
	defer span.End()
	fail := func(e *lease.Error) {
		natstrace.Fail(span, string(e.Code), e.Message)
		m.out.answerLater(reply, errReply(e))
	}
	h.renewal.lock()
	defer h.renewal.unlock()
	if rec, ok := h.renewal.since(received); ok {
		m.mu.Lock()
		m.stop.renewedLocked(h)
		stop := h.stop
		m.mu.Unlock()
		m.out.answerLater(reply, lease.Reply{Status: lease.StatusRenewed, Lease: &rec, Stop: stop})
		return
	}
	started := time.Now()
	for attempt := 0; ; attempt++ {
		m.mu.Lock()
		rec, rev := h.rec, h.rev
		m.mu.Unlock()
		rec.ExpiresAt = time.Now().Add(m.cfg.TTL).UTC()
		data := appendRecord(make([]byte, 0, 384), &rec)
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StoreTimeout)
		newRev, err := m.cfg.Store.Renew(ctx, h.key, data, m.cfg.TTL, rev)
		cancel()
		switch {
		case err == nil:
			m.mu.Lock()
			// >=: the store's watch (rebuild.go) usually reports this very
			// write before its acknowledgement gets here, and has already
			// taken its revision. Renewals of a lease run one at a time, so
			// nothing newer of this renewal's kind can be in h.rev.
			if newRev >= h.rev {
				h.rev = newRev
				h.rec.ExpiresAt = rec.ExpiresAt
			}
			m.stop.renewedLocked(h)
			stop := h.stop
			m.mu.Unlock()
			h.renewal.stored(started, rec)
			m.out.answerLater(reply, lease.Reply{Status: lease.StatusRenewed, Lease: &rec, Stop: stop})
			return
		case errors.Is(err, ErrStoreRevision):
			// Either an earlier renewal moved the revision (one whose
			// acknowledgement was lost, or a concurrent one) or the record
			// is gone: expired or released. Only the store can tell.
			if attempt < maxRenewRereads {
				if rev, ok := m.grants.holds(h.key, h.rec.ID, h.rec.Token); ok {
					m.mu.Lock()
					ok = m.leases.adopt(h, rev)
					m.mu.Unlock()
					if ok {
						continue
					}
				}
			}
			fail(errorf(lease.CodeLeaseNotFound, "lease %q expired before the renewal", h.rec.ID))
			return
		default:
			fail(errorf(lease.CodeUnavailable, "storing the renewal failed: %v", err))
			return
		}
	}
}

// holds reads key and reports whether it still holds the lease id whose
// fencing token is token, with the revision it is stored at: a renewal
// refused on its revision asks, since an earlier renewal may have moved
// it. An expired lease is never brought back: its key is gone or holds
// another record.
func (gs *grantStore) holds(key, id string, token uint64) (uint64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), gs.timeout)
	defer cancel()
	data, rev, err := gs.store.Get(ctx, key)
	if err != nil {
		return 0, false
	}
	var v storedValue
	if json.Unmarshal(data, &v) != nil || v.Queued || v.ID != id || (v.Token != 0 && v.Token != token) || (v.Token == 0 && rev != token) {
		return 0, false
	}
	return rev, true
}

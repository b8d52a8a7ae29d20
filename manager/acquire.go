package manager

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"go.opentelemetry.io/otel/trace"
)

// An acquire goes through three stages, each answering with an error
// where it stops: admission (handleAcquire: decode and validate, the pool,
// a retry answered from what is known; newRequestLocked: the request's
// size and connection), commit (enqueueLocked: its connection's and
// credential's bounds, then the pool grants or queues it; a grant's record
// is written by grant.go, a queued request's entry by the journal), and
// its answer: the one the handler returns, which the outbox sends, or for
// a request granted or queued, the grant's answer or endLocked (exit.go).

// handleAcquire admits an acquire and returns its answer: a zero Reply
// when the answer comes later (a grant being stored, or a queued request).
func (m *Manager) handleAcquire(msg *nats.Msg) lease.Reply {
	poolName := poolToken(msg.Subject)
	ctx, span := telemetry.StartServerSpan(msg.Header, natstrace.SpanAcquire, natstrace.Node(m.cfg.Node), natstrace.Pool(poolName))
	defer span.End()
	var req lease.AcquireRequest
	e := decodeAcquire(msg.Data, &req)
	if e == nil {
		natstrace.SetAttributes(span, natstrace.RequestID(echo.Clip(req.RequestID)), natstrace.Holder(echo.Clip(req.Holder)), natstrace.Slots(req.Slots))
		e = validateAcquire(&req)
	}
	who := requesterOf(msg, req.ConnServer, req.ConnID)
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pools[poolName] // for the rejected event of a request it cannot read
	if e == nil {
		// Closing (start no store operation Close would not wait for), or
		// no such pool: no event, as the name is the network's.
		p, e = m.poolLocked(poolName)
	}
	if e != nil {
		return m.out.reject(span, p, poolName, req, e)
	}
	if h, r := m.leases.byID(p.name, req.RequestID), p.waiting[req.RequestID]; h != nil || r != nil {
		return retried(span, m.guesses, who, p, req, msg.Reply, h, r)
	}
	if req.Resend {
		if answer, ok := m.ended.recall(p.name, &req, time.Now()); ok {
			natstrace.Fail(span, string(answer.Error.Code), answer.Error.Message)
			return answer // sent before its request ended, handled after
		}
	}
	r, e := m.newRequestLocked(ctx, p, req, who, msg.Reply)
	if e == nil {
		e = m.enqueueLocked(ctx, r, req)
	}
	if e != nil {
		return m.out.reject(span, p, poolName, req, e)
	}
	m.groups.arrivedLocked(r, func(q *request, e *lease.Error) { m.leaveQueueLocked(q, e, lease.EventSuperseded) })
	return lease.Reply{} // granted or queued: answered later
}

// retried answers a retried acquire from what is known: the lease h it
// was granted, or the request r not yet stored as one. It never grants
// twice. The caller holds m.mu (for g and r).
func retried(span trace.Span, g *guesses, who requester, p *pool, req lease.AcquireRequest, reply string, h *held, r *request) lease.Reply {
	var answer lease.Reply
	if h != nil {
		answer = retriedLease(p, h, g.sameRequestLocked(who, req, h.rec.Holder, h.rec.Secret, h.rec.Slots))
	} else {
		answer = r.retried(req, who, reply, g.sameRequestLocked(who, req, r.holder, r.secret, r.slots))
	}
	if answer.Error != nil {
		natstrace.Fail(span, string(answer.Error.Code), answer.Error.Message)
	}
	return answer
}

// retriedLease answers a retry of the request whose lease h is; e is what
// the retry's check (sameRequestLocked) found wrong, if anything.
func retriedLease(p *pool, h *held, e *lease.Error) lease.Reply {
	switch {
	case e != nil:
	case h.releasing:
		// Its slots are about to go to someone else: this is no grant.
		e = errorf(lease.CodeUnavailable, "lease %q is being released; retry to acquire anew", h.rec.ID)
	case h.restored && overCapacity(p) && !p.p.Shadow():
		// Counted from the store at this term's start while the pool
		// holds more slots than it has: one of its records may be a grant
		// a deposed manager stored after a successor had given its slots
		// away, whose holder never heard of it. Handing it out now would
		// give a slot a second holder (docs/guarantees.md, problem 9);
		// unrenewed, it expires at its TTL. A shadow pool holds more
		// slots than it has by design, and promises no such bound.
		e = errorf(lease.CodeUnavailable, "lease %q was stored by an earlier manager while pool %q holds more slots than it has; retry after its TTL", h.rec.ID, p.name)
	default:
		// Existing tells the holder the record was written before this
		// request was sent, so it must confirm with a renewal before
		// trusting a deadline measured from its own send time.
		rec := h.rec
		return lease.Reply{Status: lease.StatusGranted, Lease: &rec, Existing: true}
	}
	return errReply(e)
}

// retried takes a re-send of r, a request not yet stored as a lease: its
// answers go to the latest reply subject, it counts as r's poll, and it
// moves r to the connection it came on. A queued request is told its
// place; one being granted hears of its grant. e is what the retry's
// check found wrong, if anything.
func (r *request) retried(req lease.AcquireRequest, who requester, reply string, e *lease.Error) lease.Reply {
	if e != nil {
		return errReply(e)
	}
	r.reply = reply
	r.lastSeen = time.Now().UnixNano() // its poll: see abandoned
	if c := (conn{req.ConnServer, req.ConnID}); c.known() {
		r.conn = c // re-sent after a reconnect: it lives on the new connection
	}
	if who.origin.known() {
		r.origin = who.origin
	}
	if r.state != queued {
		return lease.Reply{} // its grant is being stored
	}
	return lease.Reply{Status: lease.StatusQueued, Position: positionLocked(r)}
}

// newRequestLocked makes the request of a new acquire, and announces it;
// or refuses it: more slots than p could ever grant, or sent just before
// its connection closed.
func (m *Manager) newRequestLocked(ctx context.Context, p *pool, req lease.AcquireRequest, who requester, reply string) (*request, *lease.Error) {
	if e := exceeds(p, req.Slots); e != nil {
		return nil, e
	}
	if e := overBudget(p, req.Units); e != nil {
		return nil, e
	}
	r := &request{id: req.RequestID, holder: req.Holder, secret: req.Secret, tenant: req.Tenant, key: req.Key, priority: req.Priority,
		slots: req.Slots, units: req.Units, pool: p, reply: reply, since: time.Now(), pollMs: pollPromise(req.PollMs, who), owner: who.key,
		origin: who.origin, cred: who.cred, conn: conn{req.ConnServer, req.ConnID},
		group: req.Group, groupOwner: groupOwner(who, req.Group), onGroup: req.OnGroup}
	r.lastSeen = r.since.UnixNano()
	if m.gone.knownClosedLocked(r.conn) || m.gone.originClosedLocked(r.origin) {
		// Sent just before its connection closed: nobody would hear of it.
		return nil, errorf(lease.CodeHolderDisconnected, "the requester's connection has closed")
	}
	r.trace = telemetry.NewAcquireTrace(ctx)
	m.ended.forget(p.name, r.id)
	m.out.emit(p, lease.Event{Kind: lease.EventRequested, RequestID: r.id, Holder: r.holder, Slots: r.slots, Tenant: r.tenant, Key: r.key})
	return r, nil
}

// enqueueLocked commits r to its pool: granted (its record is then
// written: grant.go) or queued (told it waits, and its entry written, once
// it has waited: queue.go). A try (no_wait), and a request whose connection
// or credential has all the queue places it may have, is only granted.
func (m *Manager) enqueueLocked(ctx context.Context, r *request, req lease.AcquireRequest) *lease.Error {
	p := r.pool
	var w *pools.Waiter
	var granted bool
	var position int
	var err error
	full := m.waiters.full(r)
	if req.NoWait || full != nil {
		w, err = p.p.TryAcquireRequest(r.poolRequest())
		granted = err == nil
	} else {
		w, granted, position, err = m.admitLocked(r) // drop.go: a full drop_oldest queue drops its oldest
	}
	if err != nil {
		e := enqueueError(p, req.Slots, err, m.cfg.TTL)
		budgetWouldWait(e, p, req.Slots, req.Units)
		if full != nil && !req.NoWait && errors.Is(err, pools.ErrWouldWait) {
			e = full
			e.RetryAfterMs = queueFullRetryMs(p, m.cfg.TTL)
		}
		return e
	}
	r.w = w
	m.waiters.add(r)
	if granted {
		m.startGrantLocked(r)
		return nil
	}
	r.order = m.journal.nextOrderLocked()
	if req.WaitMs > 0 {
		r.waitUntil = r.since.Add(time.Duration(req.WaitMs) * time.Millisecond).UnixNano()
	}
	r.trace.StartQueued(ctx, natstrace.Position(position))
	m.waitLocked(r)
	m.journal.persistQueuedLocked(r)
	return nil
}

// waitLocked arms r's wait deadline, which ends it if it still waits
// then, and its pool's rate timer.
func (m *Manager) waitLocked(r *request) {
	if r.waitUntil != 0 {
		r.timer = time.AfterFunc(time.Until(time.Unix(0, r.waitUntil)), func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if !m.closed && r.waiting() {
				m.leaveQueueLocked(r, errorf(lease.CodeWaitExpired, "not granted within the wait deadline (waited %s)", time.Since(r.since).Round(time.Millisecond)), lease.EventRejected)
			}
		})
	}
	m.rates.armLocked(r.pool, m.closed)
}

// exceeds refuses a request for more slots than p could ever grant at once:
// more than its capacity, or than its start rate's burst.
func exceeds(p *pool, slots int64) *lease.Error {
	s := p.p.Stats()
	if slots > s.Capacity {
		return errorf(lease.CodeExceedsCapacity, "%d slots requested, pool %q has capacity %d", slots, p.name, s.Capacity)
	}
	if s.Burst > 0 && slots > s.Burst {
		return errorf(lease.CodeExceedsCapacity, "%d slots requested, pool %q starts at most %d at once (rate %s, burst %d)", slots, p.name, s.Burst, s.Rate, s.Burst)
	}
	return nil
}

// enqueueError maps a pool's refusal of slots to a wire error; ttl is the
// lease TTL, for the retry hint.
func enqueueError(p *pool, slots int64, err error, ttl time.Duration) *lease.Error {
	s := p.p.Stats()
	switch {
	case errors.Is(err, pools.ErrWouldWait):
		e := errorf(lease.CodeWouldWait, "%d slots not free at once in pool %q (%d in use of %d, %d queued%s)%s", slots, p.name, s.InUse, s.Capacity, s.QueuedRequests, rateNote(s), failFastNote(s))
		if s.Rate != "" && s.Available >= slots && s.QueuedRequests == 0 {
			// The slots are free: the rate alone holds it back.
			e = errorf(lease.CodeWouldWait, "%d slots not started at once in pool %q: its rate %s has %d of %d tokens in the bucket (%d in use of %d)", slots, p.name, s.Rate, s.Tokens, s.Burst, s.InUse, s.Capacity)
		}
		// With a start rate, the earliest the rate lets this request in:
		// honest when the rate is what holds it back, a lower bound when
		// slots are busy too. Without one, nothing says when slots free.
		e.RetryAfterMs = retryAfterMs(p.p.RetryAfter(slots))
		return e
	case errors.Is(err, pools.ErrQueueFull):
		e := errorf(lease.CodeQueueFull, "pool %q already has %d queued requests, its limit%s", p.name, s.QueuedRequests, rateNote(s))
		// A hint, not a promise (queueFullRetryMs).
		e.RetryAfterMs = queueFullRetryMs(p, ttl)
		return e
	case errors.Is(err, pools.ErrExceedsCapacity):
		return errorf(lease.CodeExceedsCapacity, "%v", err)
	case errors.Is(err, pools.ErrInvalidUnits):
		return errorf(lease.CodeBadRequest, "%v", err)
	default:
		return errorf(lease.CodeInternal, "%v", err)
	}
}

// queueFullRetryMs is the retry hint of a queue_full answer: about when a
// holder renews, by which time the queue has likely moved; or, when the
// rate holds the queue, when it lets the next waiter in.
func queueFullRetryMs(p *pool, ttl time.Duration) int64 {
	if d, ok := p.p.NextGrant(); ok {
		return max(1, retryAfterMs(d))
	}
	return (ttl / 3).Milliseconds()
}

// validateAcquire checks what an acquire request says of itself.
func validateAcquire(req *lease.AcquireRequest) *lease.Error {
	if err := rules.ValidRequestID(req.RequestID); err != nil {
		return errorf(lease.CodeBadRequest, "%v", err)
	}
	if req.Holder == "" {
		return errorf(lease.CodeBadRequest, "holder is required")
	}
	if len(req.Holder) > lease.MaxHolderLen {
		return errorf(lease.CodeBadRequest, "holder is longer than %d bytes", lease.MaxHolderLen)
	}
	if len(req.Secret) > lease.MaxSecretLen {
		return errorf(lease.CodeBadRequest, "secret is longer than %d bytes", lease.MaxSecretLen)
	}
	if len(req.Tenant) > lease.MaxTenantLen {
		return errorf(lease.CodeBadRequest, "tenant is longer than %d bytes", lease.MaxTenantLen)
	}
	if len(req.Key) > lease.MaxKeyLen {
		return errorf(lease.CodeBadRequest, "key is longer than %d bytes", lease.MaxKeyLen)
	}
	if e := validGroup(req); e != nil {
		return e
	}
	if req.Slots <= 0 {
		return errorf(lease.CodeInvalidSlots, "slots must be a positive integer, got %d", req.Slots)
	}
	if req.PollMs < 0 || req.PollMs > lease.MaxPollMs {
		return errorf(lease.CodeBadRequest, "poll_ms must be between 0 and %d (24h), got %d", lease.MaxPollMs, req.PollMs)
	}
	if req.WaitMs < 0 || req.WaitMs > lease.MaxWaitMs {
		return errorf(lease.CodeBadRequest, "wait_ms must be between 0 and %d (30 days), got %d", lease.MaxWaitMs, req.WaitMs)
	}
	if e := checkUnits(req.Units); e != nil {
		return e
	}
	return checkConn(req.ConnServer, req.ConnID)
}

// overCapacity reports whether p counts more slots in use than it has.
func overCapacity(p *pool) bool {
	st := p.p.Stats()
	return st.InUse > st.Capacity
}

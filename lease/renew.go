package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// maxRenewRetry caps how long a renewal waits for an answer before it sends
// the same request again.
const maxRenewRetry = 500 * time.Millisecond

// renewRetry is how long a renewal waits for an answer before it re-sends:
// min(TTL/10, 500ms). A renewal sent to a manager that froze or lost its
// leadership, or lost on the way, is not answered; the re-send reaches the
// manager that serves next within this long of it serving, instead of after
// a request timeout.
func renewRetry(ttl time.Duration) time.Duration { return min(ttl/10, maxRenewRetry) }

// renew asks the manager to renew the lease and re-sends the same request
// every renewRetry(TTL) while no attempt has been answered, until ctx ends
// or stop closes. Every attempt carries one reply subject, so the answer to
// any attempt counts, a late one too.
//
// It returns the send time of the first attempt and the record the manager
// answered with (nil if it sent none), and the holder measures its
// new deadline from there. That is safe whichever attempt was answered: the
// manager wrote the record after it received that attempt, so after the
// first attempt was sent, and the record lives at least TTL from its write.
// The send time of the answered attempt would be safe as well, but an answer
// does not say which attempt it answers; the last attempt's send time would
// not be, because the answer may be to an earlier attempt whose write came
// before the last one was sent.
//
// relied says the holder relies on the lease (the heartbeat): with fast
// release, a renewal still unanswered when the lease's deadline passes
// then ends, so that the heartbeat sees the loss. Before the holder relies
// on it (bindLive's move), that deadline may be the old connection's,
// already past, and does not cut the renewal short.
func (l *Lease) renew(ctx context.Context, stop <-chan struct{}, relied bool) (first time.Time, rec *Record, err error) {
	ctx, span := natstrace.StartClient(ctx, l.c.tracing.tracer, natstrace.SpanRenew, natstrace.Node(l.rec.Node), natstrace.Pool(l.rec.Pool), natstrace.LeaseID(l.rec.ID), natstrace.Token(l.rec.Token))
	defer func() { natstrace.End(span, err) }()
	first = time.Now()
	// Every attempt names the connection it goes on: a lease with fast
	// release moves to it (disconnect.go).
	var sentOn conn
	// plain is the last connection an attempt without LameDuck went on
	// (plainAt: its first send there), unless a LameDuck attempt followed
	// on the same connection: if the manager answers unbound, it may have
	// bound the lease to plain since (lameduck.go).
	var plain conn
	var plainAt time.Time
	sentLameDuck := false // the last attempt said LameDuck
	// firstOn is when the first attempt went out on each connection: an
	// answer "bound" to one proves its server took an attempt on it, so it
	// was open after then (see the StatusBound case).
	firstOn := make(map[conn]time.Time, 2)
	body := func() []byte {
		sentOn = l.c.live.identity()
		if _, ok := firstOn[sentOn]; !ok && sentOn.known() {
			firstOn[sentOn] = time.Now()
		}
		// On a connection whose server is in lame duck mode, the renewal
		// asks to unbind the lease; on any other, an unbound lease counts
		// the connection as its own from now (lameduck.go).
		lameDuck := l.grace > 0 && l.c.live.isLameDuck(sentOn)
		sentLameDuck = lameDuck
		switch {
		case lameDuck && plain == sentOn:
			plain = conn{} // the same connection: this attempt comes after it
		case !lameDuck && sentOn.known():
			if plain != sentOn {
				plain, plainAt = sentOn, time.Now()
			}
			l.claim(sentOn, plainAt, false)
		}
		b, _ := json.Marshal(RenewRequest{LeaseID: l.rec.ID, Token: l.rec.Token, Secret: l.rec.Secret, ConnServer: sentOn.server, ConnID: sentOn.id, LameDuck: lameDuck})
		return b // plain strings and numbers: cannot fail
	}
	ch := make(chan *nats.Msg, 4)
	id, err := l.c.registerFresh(ch)
	if err != nil {
		return first, nil, err
	}
	defer l.c.unregister(id)
	subject := Subject(l.c.prefix, l.rec.Node, l.rec.Pool, VerbRenew)
	reply := l.c.inbox + "." + id
	if err := l.c.publish(ctx, subject, reply, body()); err != nil {
		return first, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	resend := time.NewTicker(renewRetry(l.rec.TTL()))
	defer resend.Stop()
	var moved <-chan time.Time // fast release: re-send at once on a new connection
	soon := time.NewTimer(time.Hour)
	soon.Stop()
	defer soon.Stop()
	if l.grace > 0 {
		t := time.NewTicker(l.grace / 8)
		defer t.Stop()
		moved = t.C
	}
	for {
		woken := l.c.wake.wait()
		select {
		case <-stop:
			return first, nil, fmt.Errorf("%w: %w", ErrUnavailable, context.Canceled)
		case <-ctx.Done():
			return first, nil, fmt.Errorf("%w: renewal not answered: %w", ErrUnavailable, ctx.Err())
		case <-moved:
			// The lease's deadline moves earlier when its connection
			// drops: the heartbeat must see it pass, not wait here.
			if relied && !time.Now().Before(l.Deadline()) {
				return first, nil, fmt.Errorf("%w: renewal not answered before the lease's deadline", ErrUnavailable)
			}
			if now := l.c.live.identity(); !now.known() || now == sentOn {
				continue
			}
		case <-woken: // reconnected: an attempt sent before may be lost
			// Or the server said it is in lame duck mode: ask again, so.
			if now := l.c.live.identity(); !now.known() || now == sentOn && (sentLameDuck || l.grace <= 0 || !l.c.live.isLameDuck(now)) {
				continue
			}
		case <-soon.C:
		case <-resend.C:
		case msg := <-ch:
			if isNoResponders(msg) {
				// Nobody serves the node at this moment (a takeover in
				// progress, or the manager's subscription not yet on the
				// server the holder reconnected to): the next attempt may
				// reach it. A lease that must move to a new connection
				// within its grace asks again soon.
				if l.grace > 0 && l.c.live.dropped(l.boundConn()) {
					soon.Reset(l.grace / 8)
				}
				continue
			}
			var r Reply
			if err := json.Unmarshal(msg.Data, &r); err != nil {
				return first, nil, errorf(CodeInternal, "malformed reply from the lease manager: %v", err)
			}
			if r.Status == StatusError {
				return first, nil, replyError(&r)
			}
			l.c.live.serverStopping(r.ServerStopping)
			l.askStop(r.Stop)
			if r.Status == StatusBound {
				if r.Lease != nil {
					// The server read an attempt sent on this connection
					// before it closed the connection, if it has: a close
					// comes after the first attempt's send time, which dates
					// the connection like an answered PING. Without it, a
					// connection that drops before any PING was answered on
					// it would end the lease at once, while its holder could
					// still move it to the next one within the grace.
					c := recordConn(r.Lease)
					if at, ok := firstOn[c]; ok {
						l.c.live.record(c, at)
					}
					l.bindTo(c)
				}
				continue // the renewal's own answer follows
			}
			if r.Lease != nil && l.grace > 0 && !recordConn(r.Lease).known() {
				// Unbound on a LameDuck attempt.
				if plain.known() {
					l.claim(plain, plainAt, true)
				} else {
					l.unbind()
				}
			}
			return first, r.Lease, nil
		}
		if err := l.c.publish(ctx, subject, reply, body()); err != nil {
			return first, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
}

// confirm renews a grant before its holder relies on it, and returns
// when the renewal that succeeded was first sent. An unavailable answer
// (a manager stopping for a restart, a store failing over) is asked
// again, as the heartbeat does, until ctx ends: the grant is stored, and
// the manager that serves the node next restores it. Any other refusal
// ends it at once.
func (l *Lease) confirm(ctx context.Context) (time.Time, error) {
	for {
		sent, _, err := l.renew(ctx, nil, false)
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil || !l.pause(ctx) {
			return sent, err
		}
	}
}

// move renews a lease with fast release from the client's connection,
// which binds it there, before its holder relies on it (bindLive). An
// attempt not answered within the grace ends it: the connection is in
// doubt. An answer "unavailable" is asked again, as confirm does, until the
// lease's deadline.
func (l *Lease) move(ctx context.Context) (time.Time, *Record, error) {
	ctx, cancel := context.WithDeadline(ctx, l.deadline)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, l.grace)
		sent, rec, err := l.renew(actx, nil, false)
		unanswered := actx.Err() != nil
		acancel()
		if err == nil || unanswered || !errors.Is(err, ErrUnavailable) || !l.pause(ctx) {
			return sent, rec, err
		}
	}
}

// pause waits before a renewal answered "unavailable" is asked again, as
// the heartbeat does: min(TTL/3, 250ms). It reports false if ctx ended
// first.
func (l *Lease) pause(ctx context.Context) bool {
	t := time.NewTimer(min(l.rec.TTL()/3, 250*time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// registerFresh registers ch under a fresh reply id. A caller's request id
// that happens to be the same is not taken over: another id is drawn.
func (c *Client) registerFresh(ch chan *nats.Msg) (string, error) {
	for {
		id := nuid.Next()
		err := c.register(id, ch)
		if e, ok := err.(*Error); ok && e.Code == CodeConflict {
			continue
		}
		return id, err
	}
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// ErrReleased is what Lease.Err reports after Release.
var ErrReleased = errors.New("lease: released")

// Lease is a held grant of slots. It renews itself from a goroutine it owns
// until Release, or until it is lost.
//
// The holder's own deadline starts when it sent the request that preceded
// the record's write, so it always runs out before the manager's record
// does: when Done closes because of a loss, the manager has not yet handed
// the slots to anyone else. Work guarded by the lease must stop then, and
// anything it writes to should check Token, which only grows.
type Lease struct {
	c   *Client
	rec Record

	done   chan struct{} // closed when the lease ends, lost or released
	stop   chan struct{} // closed by Release to end the heartbeat
	hbDone chan struct{} // closed when the heartbeat goroutine has returned
	// tctx is the acquire's context without its cancellation: heartbeats
	// are traced as its children.
	tctx context.Context

	// grace is the record's disconnect grace: > 0 for a lease with fast
	// release, which is bound to a connection (liveness.go).
	grace time.Duration

	mu       sync.Mutex
	deadline time.Time // guarded by mu: from renewals, the TTL's
	bound    conn      // guarded by mu: the connection the lease is bound to; zero once unbound (lameduck.go)
	// boundSince, guarded by mu, dates bound when a renewal claimed it
	// (claim): its send time, which counts like an answered PING on it.
	boundSince time.Time
	err        error // guarded by mu; set once, before done closes
	stopOnce   sync.Once
	// usage is the actual units ReleaseUsage settles (usage.go); nil
	// settles the estimate.
	usage atomic.Pointer[int64]

	// asked is closed when a renewal's answer carried a stop request
	// (notice, guarded by mu): a newer request of the lease's group came
	// (groupstop.go). poke renews at once: a stop_requested event named
	// the lease.
	asked     chan struct{}
	notice    *StopNotice
	askedOnce sync.Once
	poke      chan struct{}
}

// ID returns the lease id (the acquire's request id).
func (l *Lease) ID() string { return l.rec.ID }

// Token returns the fencing token: it only grows, per pool and across
// manager restarts. Pass it to whatever the guarded work writes to, so a
// holder that lost its lease can be refused.
func (l *Lease) Token() uint64 { return l.rec.Token }

// Pool returns the pool the slots are in.
func (l *Lease) Pool() string { return l.rec.Pool }

// Node returns the node whose pool granted the lease.
func (l *Lease) Node() string { return l.rec.Node }

// Slots returns the number of slots held.
func (l *Lease) Slots() int64 { return l.rec.Slots }

// TTL returns the lease's TTL; a heartbeat goes out every TTL/3.
func (l *Lease) TTL() time.Duration { return l.rec.TTL() }

// Record returns the lease record as the manager granted it, secret included.
func (l *Lease) Record() Record { return l.rec }

// Deadline is when the holder must consider the lease lost unless a renewal
// succeeds first. With fast release it is also bounded by the lease's
// connection (liveness.go): once that connection dropped, by 3/4 of the
// disconnect grace after the last PING the server answered on it, unless
// the lease moves to the new connection before; while it is open but
// silent, by a longer bound. So it can move earlier when the connection
// drops: read it again, as the sandbox does.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	d, bound, since := l.deadline, l.bound, l.boundSince
	l.mu.Unlock()
	if l.grace > 0 && bound.known() {
		d = minTime(d, l.c.live.deadline(bound, l.grace, since))
	}
	return d
}

// LossGrace is how long work may take to stop once Done has closed: half
// the margin between the holder's deadline and the earliest moment the
// manager can give the slots to someone else (the record's expiry), or,
// with fast release, half the quarter of the grace left to it.
// Anything still running after it risks running beside the next holder.
func (l *Lease) LossGrace() time.Duration {
	if l.grace > 0 {
		return min(margin(l.TTL())/2, l.grace/8)
	}
	return margin(l.TTL()) / 2
}

// FastRelease is the disconnect grace of a lease with fast release (0
// without): its slots go to others that long after its connection closes.
func (l *Lease) FastRelease() time.Duration { return l.grace }

// Done is closed when the lease ends: lost (expired, refused on renewal, or
// renewals failing until the deadline) or released.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err is nil while the lease is held; after Done closes it wraps
// ErrLeaseLost with the cause, or is ErrReleased.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *Lease) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	close(l.done)
}

// Release stops the heartbeat and gives the slots back. Releasing a lease
// that was already lost returns its loss; releasing twice returns nil.
func (l *Lease) Release(ctx context.Context) error {
	l.stopOnce.Do(func() { close(l.stop) })
	if err := l.Err(); err != nil {
		<-l.hbDone
		if errors.Is(err, ErrReleased) {
			return nil
		}
		// Lost: still ask the manager to drop the record in case it lives
		// (renewals may have failed only on our side of the network), but
		// briefly: the manager is likely unreachable.
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = l.sendRelease(ctx)
		return err
	}
	// The release goes out at once, and the heartbeat ends meanwhile:
	// waiting for it first put a goroutine's wake-up between every
	// holder's release and the next holder's grant. A renewal it had in
	// flight is answered or abandoned; a refusal it gets because this
	// release came first ends nothing, as it was told to stop.
	err := l.sendRelease(ctx)
	<-l.hbDone
	if err != nil && !errors.Is(err, ErrLeaseNotFound) {
		return err
	}
	if errors.Is(err, ErrLeaseNotFound) {
		l.end(fmt.Errorf("%w: %w", ErrLeaseLost, err))
		return l.Err()
	}
	l.end(ErrReleased)
	return nil
}

func (l *Lease) sendRelease(ctx context.Context) (err error) {
	ctx, span := natstrace.StartClient(ctx, l.c.tracing.tracer, natstrace.SpanRelease, natstrace.Node(l.rec.Node), natstrace.Pool(l.rec.Pool), natstrace.LeaseID(l.rec.ID), natstrace.Token(l.rec.Token))
	defer func() { natstrace.End(span, err) }()
	_, err = l.c.request(ctx, Subject(l.c.prefix, l.rec.Node, l.rec.Pool, VerbRelease), ReleaseRequest{LeaseID: l.rec.ID, Token: l.rec.Token, Secret: l.rec.Secret, Units: l.usage.Load()})
	return err
}

// heartbeat renews every TTL/3, counted from the send time its deadline is
// measured from, until the lease is released, refused, or its deadline
// passes. One renewal re-sends itself while unanswered (renewRetry); one that
// was answered with a transient error is followed by a fresh one soon. It
// also renews at once when the Client is woken (a reconnect, the manager's
// stop notice: wake.go); with fast release also when it finds the
// connection changed, so the lease moves to the new one.
func (l *Lease) heartbeat() {
	defer close(l.hbDone)
	defer l.c.unwatchStops(l)
	ttl := l.rec.TTL()
	interval := ttl / 3
	retry := min(interval, 250*time.Millisecond)
	l.mu.Lock()
	base := l.deadline.Add(-(ttl - margin(ttl)))
	l.mu.Unlock()
	next := time.NewTimer(max(0, time.Until(base.Add(interval))))
	defer next.Stop()
	if l.grace > 0 && l.c.live.isLameDuck(l.boundConn()) {
		next.Reset(0) // granted on a lame duck's connection: unbind it now (lameduck.go)
	}
	lost := time.NewTimer(time.Until(l.Deadline()))
	defer lost.Stop()
	var moved <-chan time.Time
	if l.grace > 0 {
		defer l.c.live.leave()
		t := time.NewTicker(l.grace / 8)
		defer t.Stop()
		moved = t.C
	}
	for {
		woken := l.c.wake.wait()
		select {
		case <-l.stop:
			return
		case <-lost.C:
			if d := l.Deadline(); time.Now().Before(d) {
				lost.Reset(time.Until(d)) // the connection was confirmed meanwhile
				if !woke(woken) {
					continue
				}
			} else {
				l.end(fmt.Errorf("%w: %w", ErrLeaseLost, l.lossCause()))
				return
			}
		case <-moved:
			// The deadline moves earlier when the connection drops.
			lost.Reset(time.Until(l.Deadline()))
			if !l.mustMove() && !woke(woken) {
				continue
			}
		case <-woken:
		case <-l.poke:
		case <-next.C:
		}
		ctx, cancel := context.WithDeadline(l.tctx, l.Deadline())
		sent, rec, err := l.renew(ctx, l.stop, true)
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			l.deadline = sent.Add(ttl - margin(ttl))
			l.mu.Unlock()
			if rec != nil {
				l.bindTo(recordConn(rec))
			}
			lost.Reset(time.Until(l.Deadline()))
			// A renewal that waited long for its answer dates from its
			// first attempt: the next one is due that much sooner. One
			// that left the lease bound to a lame duck's connection (it
			// raced the notice) is followed at once (lameduck.go).
			next.Reset(max(0, time.Until(sent.Add(interval))))
			if l.grace > 0 && l.c.live.isLameDuck(l.boundConn()) {
				next.Reset(retry)
			}
		case errors.Is(err, ErrLeaseNotFound), errors.Is(err, ErrTokenMismatch), errors.Is(err, ErrUnknownPool), errors.Is(err, ErrSuperseded):
			select {
			case <-l.stop:
				return // released meanwhile: the release says how it ended
			default:
			}
			l.end(fmt.Errorf("%w: %w", ErrLeaseLost, err))
			return
		default:
			next.Reset(retry)
			lost.Reset(time.Until(l.Deadline())) // it may have moved during the renewal
		}
	}
}

// bindTo notes that the manager has bound the lease to c (a renewal's
// answer). If that moved it, the server first answers a PING on c: only
// that dates the new connection, so the lease counts c from then on (until
// then its old connection's clocks still hold).
func (l *Lease) bindTo(c conn) {
	if l.grace <= 0 || !c.known() || l.boundConn() == c {
		return
	}
	l.c.live.ping(liveDeadline(l.grace))
	l.mu.Lock()
	l.bound, l.boundSince = c, time.Time{}
	l.mu.Unlock()
}

// claim counts c as the lease's connection from at, the send time of a
// renewal on it that may bind the lease there: if the lease is unbound,
// or always (force: the manager unbound it, and may have bound it to c
// since). lameduck.go.
func (l *Lease) claim(c conn, at time.Time, force bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.grace <= 0 || !c.known() || (l.bound.known() && !force) || l.bound == c {
		return
	}
	l.bound, l.boundSince = c, at
}

// unbind notes that the manager has unbound the lease (a renewal on a
// connection whose server is in lame duck mode): no close frees it now.
func (l *Lease) unbind() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bound, l.boundSince = conn{}, time.Time{}
}

// mustMove reports whether the lease with fast release is to move to the
// connection its client is on now: it is bound to another, or unbound
// while the client is no longer on the lame duck's connection.
func (l *Lease) mustMove() bool {
	now := l.c.live.identity()
	if !now.known() {
		return false
	}
	bound := l.boundConn()
	return now != bound && (bound.known() || !l.c.live.isLameDuck(now))
}

func (l *Lease) boundConn() conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bound
}

// lossCause says why the deadline passed.
func (l *Lease) lossCause() error {
	l.mu.Lock()
	ttlDeadline := l.deadline
	l.mu.Unlock()
	if l.grace > 0 && l.Deadline().Before(ttlDeadline) {
		if l.c.live.dropped(l.boundConn()) {
			return fmt.Errorf("%w: not within %v of the last answer on it (its slots go to others %v after a close by the holder's end)", ErrConnectionDropped, liveDeadline(l.grace), l.grace)
		}
		return fmt.Errorf("%w: none for %v", ErrConnectionSilent, l.c.live.silence)
	}
	return errors.New("no renewal succeeded before the deadline")
}

// woke reports whether a wake-up came (wake.go): select picks any ready
// case, so one that raced another must not be lost.
func woke(woken <-chan struct{}) bool {
	select {
	case <-woken:
		return true
	default:
		return false
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

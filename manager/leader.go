package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// LeaderConfig configures RunLeader: at most one active manager per node,
// the others hot standbys.
type LeaderConfig struct {
	Store    Store         // the leadership bucket (not the lease bucket)
	Node     string        // the key: one leader per node
	Instance string        // this process, unique (e.g. a nuid)
	TTL      time.Duration // leadership TTL, whole seconds >= 1s
	Logger   *slog.Logger
	// Refused, if set, is told RefusedStaleLeader each time a leadership
	// key that nobody renewed is taken over (see waitLeadership).
	Refused func(reason string)
}

// LeaderRecord is the value of a node's leadership key.
type LeaderRecord struct {
	Instance string    `json:"instance"`
	Since    time.Time `json:"since"`
}

// ErrLeadershipLost is the cause of the serve context's end when leadership
// could not be renewed before its deadline, or was taken.
var ErrLeadershipLost = errors.New("lease: leadership lost")

// RunLeader waits until this instance holds the node's leadership, runs
// serve with a context that ends when leadership is lost (or ctx ends) and
// the term's Fence, waits for serve to return, and starts over, until ctx
// ends.
//
// Two managers never serve one node at once: the leader's own deadline is
// measured from when it sent its last successful renewal, minus a margin of
// TTL/10, so it stops serving before the store could let the key expire and a
// standby could take it. The context ends some time after that deadline (a
// frozen process notices late); the Fence turns invalid at the deadline
// itself, so serve must check it (Config.Fence) right before every
// write and every answer, and must stop granting when its context ends.
func RunLeader(ctx context.Context, cfg LeaderConfig, serve func(context.Context, Fence) error) error {
	if cfg.Store == nil || cfg.Node == "" || cfg.Instance == "" {
		return errors.New("lease: leadership needs a store, a node and an instance id")
	}
	if cfg.TTL < time.Second || cfg.TTL%time.Second != 0 {
		return fmt.Errorf("lease: leadership TTL %v: must be whole seconds, at least 1s", cfg.TTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("node", cfg.Node, "instance", cfg.Instance)
	for {
		rev, sent, value, err := waitLeadership(ctx, cfg, log)
		if err != nil {
			return nil // ctx ended while standing by
		}
		log.Info("leadership acquired")
		err = lead(ctx, cfg, log, rev, sent, value, serve)
		if ctx.Err() != nil {
			if errors.Is(err, context.Canceled) {
				err = nil
			}
			return err
		}
		log.Warn("leadership ended; standing by", "err", err)
		if errors.Is(err, ErrLeadershipLost) {
			continue // stand by at once: another instance may need the key
		}
		// Serving failed on its own (NATS down, a stalled rebuild): do not
		// spin, but come back soon enough for a takeover to stay short.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(time.Second, cfg.TTL/4)):
		}
	}
}

// claimRetryMin is the least wait between two claims of the leadership
// key: a store that fails claims at once is not asked in a loop.
const claimRetryMin = 250 * time.Millisecond

// waitLeadership creates the leadership key, watching it while another
// instance holds it. It returns the key's revision and when the winning
// create (or takeover) was sent.
//
// A key whose revision stays the same for longer than twice the TTL is
// taken over with a write conditional on that revision. A leader renews
// every TTL/3, each renewal a new revision, and stops serving at its own
// deadline, sent + TTL - TTL/10, which falls before its write was stored
// + TTL, so before this instance, which first saw that revision after it
// was stored, has watched it for a TTL; and a manager's key, stored with
// the TTL, has expired a TTL before the takeover. So a key unchanged that
// long is one no manager wrote: a value without a TTL (which would never
// expire), unreadable, or naming an unknown instance. Without this, such a
// key stopped the node for good, also across restarts. The conditional
// write fails if the key changed meanwhile (a stale read of a follower
// included), so a live leader is never taken over. Waiting one TTL only
// was not enough: a takeover of a manager's key in the instant it expired
// raced the create of another candidate that saw it gone, and both led
// (TestRollingRestart, a clean stop of the leader).
//
// It returns the key's revision, when the winning write was sent, and the
// value it wrote, which the term's renewals keep (since: when it was sent).
func waitLeadership(ctx context.Context, cfg LeaderConfig, log *slog.Logger) (uint64, time.Time, []byte, error) {
	var w Watcher
	defer func() {
		if w != nil {
			_ = w.Stop()
		}
	}()
	var changes <-chan Change
	standby := false
	var seen uint64      // the key's revision as last read
	var seenAt time.Time // when that revision was first read
	for {
		sent := time.Now()
		value, err := json.Marshal(LeaderRecord{Instance: cfg.Instance, Since: sent.UTC()})
		if err != nil {
			return 0, time.Time{}, nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, cfg.TTL)
		rev, err := cfg.Store.Create(cctx, cfg.Node, value, cfg.TTL)
		if errors.Is(err, ErrStoreExists) {
			if _, cur, gerr := cfg.Store.Get(cctx, cfg.Node); gerr == nil {
				switch {
				case cur != seen:
					seen, seenAt = cur, time.Now()
				case time.Since(seenAt) > 2*cfg.TTL:
					sent = time.Now()
					if rev, err = cfg.Store.Renew(cctx, cfg.Node, value, cfg.TTL, cur); err == nil {
						log.Warn("took over a leadership key nobody renewed for longer than twice the leadership TTL (no TTL, or not written by a manager)", "revision", cur, "unchanged_for", time.Since(seenAt).Round(time.Millisecond))
						if cfg.Refused != nil {
							cfg.Refused(RefusedStaleLeader)
						}
					}
				}
			}
		}
		cancel()
		if err == nil {
			return rev, sent, value, nil
		}
		if ctx.Err() != nil {
			return 0, time.Time{}, nil, ctx.Err()
		}
		// Try again when the key goes, and at least every TTL/2 in case a
		// change was missed.
		retry := cfg.TTL / 2
		if !errors.Is(err, ErrStoreExists) && !errors.Is(err, ErrStoreRevision) {
			log.Warn("claiming leadership failed; retrying", "err", err)
			// TTL/2 after this claim was sent, not after it failed: a claim
			// that waited out its timeout on a store that dropped it (one
			// with a write error, until it is reloaded) would otherwise add
			// TTL/2 to the outage (2.5 s of the 10 s a node has to serve
			// again in after an overload).
			retry = max(retry-time.Since(sent), claimRetryMin)
		} else if !standby {
			standby = true
			log.Info("another manager leads this node; standing by")
		}
		if w == nil {
			if w, err = cfg.Store.Watch(ctx, cfg.Node); err == nil {
				changes = w.Changes()
			} else {
				w = nil
			}
		}
		timer := time.NewTimer(retry)
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return 0, time.Time{}, nil, ctx.Err()
			case <-timer.C:
				break wait
			case ch, ok := <-changes:
				if !ok {
					w, changes = nil, nil
					break wait
				}
				if ch.Op == ChangeDelete || ch.Op == ChangeExpire {
					timer.Stop()
					break wait
				}
			}
		}
	}
}

// lead serves while renewing the leadership key, and gives the key up when
// ctx ends.
func lead(ctx context.Context, cfg LeaderConfig, log *slog.Logger, rev uint64, sent time.Time, value []byte, serve func(context.Context, Fence) error) error {
	margin := cfg.TTL / 10
	deadline := sent.Add(cfg.TTL - margin)
	fence := newLeaderFence(rev, deadline)
	defer fence.end() // whatever ends the term ends the licence first
	serveCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	served := make(chan error, 1)
	go func() { served <- serve(serveCtx, fence) }()

	// Every renewal writes the value the term began with: the same
	// instance, the same since (a new since at the first renewal made the
	// key's value change under a reader, TestReplyToLeadershipKeyRefused
	// on a loaded machine).
	interval := cfg.TTL / 3
	next := time.NewTimer(interval)
	defer next.Stop()
	lost := time.NewTimer(time.Until(deadline))
	defer lost.Stop()
	for {
		select {
		case err := <-served:
			// serve ended on its own (an error, or ctx): give the key up so
			// a standby takes over at once.
			fence.end()
			giveUp(cfg, rev)
			return err
		case <-lost.C:
			cause := fmt.Errorf("%w: no renewal succeeded before the deadline", ErrLeadershipLost)
			fence.end()
			stop(cause)
			return errors.Join(cause, <-served)
		case <-next.C:
		}
		s := time.Now()
		rctx, cancel := context.WithDeadline(ctx, deadline)
		newRev, err := cfg.Store.Renew(rctx, cfg.Node, value, cfg.TTL, rev)
		cancel()
		switch {
		case err == nil:
			rev = newRev
			deadline = s.Add(cfg.TTL - margin)
			if !fence.extend(deadline) {
				// Acknowledged, but only after the deadline had passed: the
				// fence may have refused something meanwhile. End the term.
				cause := fmt.Errorf("%w: a renewal succeeded only after the deadline", ErrLeadershipLost)
				stop(cause)
				err := errors.Join(cause, <-served)
				giveUp(cfg, newRev) // serve has ended: a standby may take over at once
				return err
			}
			lost.Reset(time.Until(deadline))
			next.Reset(interval)
		case errors.Is(err, ErrStoreRevision):
			cause := fmt.Errorf("%w: the leadership key changed hands", ErrLeadershipLost)
			fence.end()
			stop(cause)
			return errors.Join(cause, <-served)
		default:
			if ctx.Err() == nil {
				log.Warn("renewing leadership failed; retrying", "err", err)
			}
			next.Reset(min(interval, 250*time.Millisecond))
		}
	}
}

// giveUp deletes the leadership key if it is still ours.
func giveUp(cfg LeaderConfig, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = cfg.Store.Delete(ctx, cfg.Node, rev)
}

// leaderFence is the Fence of one term. Its deadline is kept as a
// monotonic offset from base, so wall-clock steps do not move it. Once
// invalid it stays invalid: a renewal acknowledged after the deadline does
// not revive it (the term ends instead), so a write the fence refused is
// always followed by the end of the term.
type leaderFence struct {
	term     uint64
	base     time.Time    // has a monotonic reading
	deadline atomic.Int64 // ns after base; 0 once the fence is invalid
}

func newLeaderFence(term uint64, deadline time.Time) *leaderFence {
	f := &leaderFence{term: term, base: time.Now()}
	f.deadline.Store(max(int64(deadline.Sub(f.base)), 1))
	return f
}

// Valid implements Fence: the deadline is ahead and the term has not ended.
func (f *leaderFence) Valid() bool {
	d := f.deadline.Load()
	if d > 0 && int64(time.Since(f.base)) < d {
		return true
	}
	if d > 0 {
		f.deadline.CompareAndSwap(d, 0) // past it: for good
	}
	return false
}

// Term implements Fence.
func (f *leaderFence) Term() uint64 { return f.term }

// extend moves the deadline to d and reports true, unless the fence is
// already invalid (the old deadline passed, or the term ended).
func (f *leaderFence) extend(d time.Time) bool {
	ns := max(int64(d.Sub(f.base)), 1)
	for {
		if !f.Valid() {
			return false
		}
		old := f.deadline.Load()
		if old != 0 && f.deadline.CompareAndSwap(old, ns) {
			return true
		}
	}
}

// end invalidates the fence for good.
func (f *leaderFence) end() { f.deadline.Store(0) }

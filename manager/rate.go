package manager

import (
	"fmt"
	"time"

	"github.com/slotlease/slotlease/pools"
)

// A pool with a start rate (pools.Options.Rate) grants a waiter whose slots
// are free only once the bucket holds its tokens. Nothing else happens at
// that moment, so each such pool has a timer, armed for when the next
// waiter's tokens are in: armLocked after every change to the pool's
// queue or slots, refill when it fires.

// rates owns the pools' start-rate timers, one per pool that has needed
// one. Guarded by Manager.mu: it is armed in the same step as the change to
// the pool that moves its next grant. A timer that fires calls refill,
// which takes m.mu.
type rates struct {
	refill func(p *pool) // Manager.refill
	timers map[*pool]*time.Timer
}

func newRates(refill func(p *pool)) rates {
	return rates{refill: refill, timers: make(map[*pool]*time.Timer)}
}

// armLocked arms p's timer for when the rate lets the next waiter in, or
// stops it if no waiter waits for the rate alone, or the manager closed.
func (rs *rates) armLocked(p *pool, closed bool) {
	d, ok := p.p.NextGrant()
	if !ok || closed {
		rs.stopLocked(p)
		return
	}
	t := rs.timers[p]
	if t == nil {
		rs.timers[p] = time.AfterFunc(d, func() { rs.refill(p) })
		return
	}
	t.Reset(d)
}

// stopLocked stops p's timer, if any. A call of refill already under way
// finds the pool removed or the manager closed, or grants what the rate
// allows, which is always safe.
func (rs *rates) stopLocked(p *pool) {
	if t := rs.timers[p]; t != nil {
		t.Stop()
	}
}

// removeLocked stops and forgets the timer of p, a removed pool.
func (rs *rates) removeLocked(p *pool) {
	rs.stopLocked(p)
	delete(rs.timers, p)
}

// refill grants the waiters the rate now lets in.
func (m *Manager) refill(p *pool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.pools[p.name] != p {
		return
	}
	m.startGrantsLocked(p, p.p.Refill())
}

// retryAfterMs is d in whole milliseconds, rounded up so that a client
// retrying after it is not early.
func retryAfterMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// rateNote describes p's start rate for an error message: "; rate 10/s,
// 2 of 5 tokens". Empty without a rate.
func rateNote(s pools.Stats) string {
	if s.Rate == "" {
		return ""
	}
	return fmt.Sprintf("; rate %s, %d of %d tokens in the bucket", s.Rate, s.Tokens, s.Burst)
}

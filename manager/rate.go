package manager

import (
	"fmt"
	"time"

	"github.com/slotlease/slotlease/pools"
)

// A pool with a start rate (pools.Options.Rate) grants a waiter whose slots
// are free only once the bucket holds its tokens. Nothing else happens at
// that moment, so each such pool has a timer, armed for when the next
// waiter's tokens are in: armRateLocked after every change to the pool's
// queue or slots, refill when it fires.

// armRateLocked arms p's rate timer for when the rate lets the next waiter
// in, or stops it if no waiter waits for the rate alone.
func (m *Manager) armRateLocked(p *pool) {
	d, ok := p.p.NextGrant()
	if !ok || m.closed {
		p.stopRate()
		return
	}
	if p.rate == nil {
		p.rate = time.AfterFunc(d, func() { m.refill(p) })
		return
	}
	p.rate.Reset(d)
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

// stopRate stops p's rate timer, if any. A call of refill already under way
// finds the pool removed or the manager closed, or grants what the rate
// allows, which is always safe.
func (p *pool) stopRate() {
	if p.rate != nil {
		p.rate.Stop()
	}
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

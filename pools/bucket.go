package pools

import (
	"fmt"
	"math"
	"time"
)

// Rate is a start rate: Slots per Per (e.g. 60 per minute).
type Rate struct {
	Slots int64
	Per   time.Duration
}

// String writes the rate as POOL_RATES takes it: 60/m, 5/s, 100/h, or
// slots per a duration.
func (r Rate) String() string {
	switch r.Per {
	case time.Second:
		return fmt.Sprintf("%d/s", r.Slots)
	case time.Minute:
		return fmt.Sprintf("%d/m", r.Slots)
	case time.Hour:
		return fmt.Sprintf("%d/h", r.Slots)
	}
	return fmt.Sprintf("%d/%v", r.Slots, r.Per)
}

// bucket is a token bucket of slots: it holds at most burst tokens and
// gains Slots every Per, continuously. Tokens are counted in units of
// 1/Per of a slot-nanosecond so that refills are exact integers: one slot
// is Per units (nanoseconds of Per), and every nanosecond adds Slots units.
// A grant of n slots takes n*Per units.
type bucket struct {
	rate  Rate
	burst int64 // in slots
	units int64 // current tokens, in units; 0..burst*Per
	at    time.Time
}

// newBucket starts empty at now: a manager that starts, restarts or takes
// over does not know what its predecessor granted, so it grants nothing
// beyond what the rate allows from now on (no burst after a failover).
func newBucket(r Rate, burst int64, now time.Time) (*bucket, error) {
	switch {
	case r.Slots <= 0 || r.Per <= 0:
		return nil, fmt.Errorf("rate %v: slots and period must be positive", r)
	case burst <= 0:
		return nil, fmt.Errorf("burst %d: must be positive", burst)
	case burst > math.MaxInt64/int64(r.Per):
		return nil, fmt.Errorf("burst %d over a period of %v: too large", burst, r.Per)
	}
	return &bucket{rate: r, burst: burst, at: now}, nil
}

// refill adds what the rate gave since the last refill, up to the burst.
func (b *bucket) refill(now time.Time) {
	d := now.Sub(b.at)
	if d <= 0 {
		return
	}
	b.at = now
	limit := b.burst * int64(b.rate.Per)
	if d >= time.Duration(limit/b.rate.Slots+1) {
		b.units = limit // long idle: full, without overflowing d*Slots
		return
	}
	b.units = min(limit, b.units+int64(d)*b.rate.Slots)
}

// allows reports whether n slots may start now.
func (b *bucket) allows(now time.Time, n int64) bool {
	b.refill(now)
	return b.units >= n*int64(b.rate.Per)
}

// take spends n slots' tokens; allows(now, n) must have been true.
func (b *bucket) take(n int64) { b.units -= n * int64(b.rate.Per) }

// tokens is the current level in whole slots.
func (b *bucket) tokens(now time.Time) int64 {
	b.refill(now)
	return b.units / int64(b.rate.Per)
}

// when returns how long from now until n slots may start (0 if now);
// n must not exceed the burst.
func (b *bucket) when(now time.Time, n int64) time.Duration {
	b.refill(now)
	need := n*int64(b.rate.Per) - b.units
	if need <= 0 {
		return 0
	}
	return time.Duration((need + b.rate.Slots - 1) / b.rate.Slots)
}

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
// gains rate.Slots every rate.Per, continuously. Tokens are counted in
// integer units so that refills are exact: with the rate reduced to
// gain/unit (gain slots every unit nanoseconds, gcd 1), one slot is unit
// units and every nanosecond adds gain units. A grant of n slots takes
// n*unit units.
type bucket struct {
	rate  Rate
	gain  int64 // units added per nanosecond
	unit  int64 // units per slot
	burst int64 // in slots
	units int64 // current tokens, in units; 0..burst*unit
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
	}
	g := gcd(r.Slots, int64(r.Per))
	b := &bucket{rate: r, gain: r.Slots / g, unit: int64(r.Per) / g, burst: burst, at: now}
	if burst > (math.MaxInt64-b.gain)/b.unit {
		return nil, fmt.Errorf("burst %d at a rate of %v: too large", burst, r)
	}
	return b, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// refill adds what the rate gave since the last refill, up to the burst.
func (b *bucket) refill(now time.Time) {
	d := now.Sub(b.at)
	if d <= 0 {
		return
	}
	b.at = now
	limit := b.burst * b.unit
	if int64(d) >= (limit-b.units)/b.gain+1 {
		b.units = limit // full, without overflowing d*gain
		return
	}
	b.units += int64(d) * b.gain
}

// allows reports whether n slots may start now.
func (b *bucket) allows(now time.Time, n int64) bool {
	b.refill(now)
	return n <= b.burst && b.units >= n*b.unit
}

// take spends n slots' tokens; allows(now, n) must have been true.
func (b *bucket) take(n int64) { b.units -= n * b.unit }

// tokens is the current level in whole slots.
func (b *bucket) tokens(now time.Time) int64 {
	b.refill(now)
	return b.units / b.unit
}

// when returns how long from now until the rate has given n slots' worth
// of tokens (0 if the bucket holds them now); n may exceed the burst, for
// what is queued ahead. It saturates at math.MaxInt64.
func (b *bucket) when(now time.Time, n int64) time.Duration {
	b.refill(now)
	if n > (math.MaxInt64-b.gain)/b.unit {
		return math.MaxInt64
	}
	need := n*b.unit - b.units
	if need <= 0 {
		return 0
	}
	return time.Duration((need + b.gain - 1) / b.gain)
}

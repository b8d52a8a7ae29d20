package lease

import (
	"context"
)

// Usage budgets (POOL_BUDGETS): an acquire of a pool with a budget gives
// its estimate of the units it will use; the release settles the actual.

// WithUnits gives the acquire's estimate of its usage, 1..MaxUnits
// (tokens, cents: the budget's unit). A pool with a budget requires it and
// reserves it while the lease is held; pools without one ignore it. With
// AcquireAll, every pool gets the same estimate.
func WithUnits(n int64) AcquireOption {
	return func(o *acquireOptions) { o.units = n }
}

// Units returns the estimate the lease reserved (WithUnits), 0 if none.
func (l *Lease) Units() int64 { return l.rec.Units }

// ReleaseUsage is Release that settles units, what the lease actually
// used, in its pool's budget instead of its estimate: less is given back
// at once, more is debited from the window. Release alone settles the
// estimate, as does a lease that ends otherwise (expiry, revocation).
func (l *Lease) ReleaseUsage(ctx context.Context, units int64) error {
	if units < 0 || units > MaxUnits {
		return errorf(CodeBadRequest, "units must be between 0 and %d, got %d", int64(MaxUnits), units)
	}
	l.usage.Store(&units)
	return l.Release(ctx)
}

// ReleaseUsage is Release that settles units, what the work actually
// used, in the budget of every pool of the set (Lease.ReleaseUsage).
func (s *LeaseSet) ReleaseUsage(ctx context.Context, units int64) error {
	if units < 0 || units > MaxUnits {
		return errorf(CodeBadRequest, "units must be between 0 and %d, got %d", int64(MaxUnits), units)
	}
	for _, l := range s.leases {
		l.usage.Store(&units)
	}
	return s.Release(ctx)
}

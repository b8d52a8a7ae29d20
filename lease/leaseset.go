package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// LeaseSet is several leases held together (Client.AcquireAll): all of
// them or none. It ends when any of its leases ends, and Release gives them
// all back. Work guarded by a set must stop when Done closes.
type LeaseSet struct {
	leases []*Lease // in the order they were acquired

	done    chan struct{} // closed when the first lease ends
	stop    chan struct{} // closed by Release: the watchers return
	watches sync.WaitGroup

	mu      sync.Mutex
	err     error // guarded by mu; set once, before done closes
	once    sync.Once
	release error // the first Release's result

	// asked is closed when any lease was asked to stop (groupstop.go).
	asked    chan struct{}
	askClose sync.Once
}

// NewLeaseSet makes a set of leases the caller holds (at least one), to be
// held, lost and released together as AcquireAll's are.
func NewLeaseSet(leases ...*Lease) *LeaseSet { return newLeaseSet(leases) }

// newLeaseSet watches leases, which the caller holds.
func newLeaseSet(leases []*Lease) *LeaseSet {
	s := &LeaseSet{leases: leases, done: make(chan struct{}), stop: make(chan struct{}), asked: make(chan struct{})}
	for _, l := range leases {
		s.watches.Go(func() {
			select {
			case <-l.StopRequested():
				s.askClose.Do(func() { close(s.asked) })
			case <-l.Done():
			case <-s.stop:
			}
			select {
			case <-l.Done():
				s.end(fmt.Errorf("lease %s (%d slot(s) of pool %s on node %s): %w", l.ID(), l.Slots(), l.Pool(), l.Node(), l.Err()))
			case <-s.stop:
			}
		})
	}
	return s
}

func (s *LeaseSet) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	close(s.done)
}

// Leases returns the set's leases in the order they were acquired.
func (s *LeaseSet) Leases() []*Lease { return slices.Clone(s.leases) }

// Done is closed when any of the leases ends (lost, or released).
func (s *LeaseSet) Done() <-chan struct{} { return s.done }

// Err is nil while every lease is held; then it names the first lease that
// ended and wraps its Err (ErrLeaseLost with the cause, or ErrReleased).
func (s *LeaseSet) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Deadline is the earliest of the leases' deadlines (Lease.Deadline).
func (s *LeaseSet) Deadline() time.Time {
	var d time.Time
	for _, l := range s.leases {
		if ld := l.Deadline(); d.IsZero() || ld.Before(d) {
			d = ld
		}
	}
	return d
}

// LossGrace is the smallest of the leases' loss graces (Lease.LossGrace).
func (s *LeaseSet) LossGrace() time.Duration {
	g := time.Duration(-1)
	for _, l := range s.leases {
		if lg := l.LossGrace(); g < 0 || lg < g {
			g = lg
		}
	}
	return max(g, 0)
}

// Release gives every lease back, the last acquired first, and stops the
// set's watchers. It returns the first error of a lease that was held (a
// lost lease's loss is in Err, not here). Calling it again returns the
// first call's result.
func (s *LeaseSet) Release(ctx context.Context) error {
	s.once.Do(func() {
		close(s.stop)
		s.watches.Wait()
		s.release = releaseAll(ctx, s.leases)
		s.end(ErrReleased)
	})
	return s.release
}

// releaseAll releases leases, the last first, and returns the first error
// of a lease that was still held.
func releaseAll(ctx context.Context, leases []*Lease) error {
	var first error
	for i := len(leases) - 1; i >= 0; i-- {
		l := leases[i]
		held := l.Err() == nil
		if err := l.Release(ctx); err != nil && held && !errors.Is(err, ErrLeaseLost) && first == nil {
			first = fmt.Errorf("releasing lease %s of pool %s on node %s: %w", l.ID(), l.Pool(), l.Node(), err)
		}
	}
	return first
}

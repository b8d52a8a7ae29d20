package manager

import (
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// A pool whose full queue drops its oldest waiter (POOL_ON_FULL=<pool>=
// drop_oldest) admits a new request that has to wait by ending the one
// that has waited longest: pools.Pool.Admit picks and removes it, and
// this file tells everyone. The dropped request's holder hears
// "dropped", watchers a rejected event with that code (counted in
// lease_rejections_total{code="dropped"}), and its queue entry is
// deleted, so that no successor restores it. The waiters its leaving let
// in are granted before the newcomer is queued.

// admitLocked queues or grants r as EnqueueRequest does, but in a
// drop_oldest pool with a full queue it first drops the oldest waiter.
func (m *Manager) admitLocked(r *request) (w *pools.Waiter, granted bool, position int, err error) {
	p := r.pool
	a, err := p.p.Admit(r.poolRequest())
	if a.Dropped != nil {
		d := a.Dropped.Value.(*request)
		m.endLocked(d, droppedError(d), lease.EventRejected)
	}
	m.startGrantsLocked(p, a.Let)
	return a.Waiter, a.Granted, a.Position, err
}

// droppedError is what d, dropped from its pool's full queue for a newer
// request, is told.
func droppedError(d *request) *lease.Error {
	return errorf(lease.CodeDropped, "dropped from pool %q after waiting %v: its queue was full (max_queue %d, on_full drop_oldest) and a newer request took the place of the oldest",
		d.pool.name, time.Since(d.since).Round(time.Millisecond), d.pool.p.Stats().MaxQueue)
}

// failFastNote is what a would_wait answer adds for a pool without a queue
// (POOL_MAX_QUEUE=<pool>=0), whose every request is a try.
func failFastNote(s pools.Stats) string {
	if !s.FailFast {
		return ""
	}
	return ": the pool has no queue (fail fast: POOL_MAX_QUEUE=0), so a request that cannot start at once is refused"
}

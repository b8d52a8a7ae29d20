package jobs

import (
	"context"

	"github.com/slotlease/slotlease/lease"
)

// groupOptions are the acquire options of a job's concurrency group.
func groupOptions(s Spec) []lease.AcquireOption {
	if s.Group == "" {
		return nil
	}
	opts := []lease.AcquireOption{lease.WithGroup(s.Group)}
	switch s.OnGroup {
	case lease.OnGroupCancelInProgress:
		opts = append(opts, lease.CancelInProgress())
	case lease.OnGroupCancelPending:
		opts = append(opts, lease.CancelPending())
	}
	return opts
}

// stopOnRequest stops an attempt whose lease a newer request of its group
// asked to stop, as a cancel stops it (SIGTERM, the kill grace, SIGKILL):
// the job ends cancelled, "superseded: ...". It returns when the set is
// released.
func stopOnRequest(set *lease.LeaseSet, stop context.CancelCauseFunc) {
	select {
	case <-set.StopRequested():
		stop(cancelCause{reason: "superseded: " + set.StopErr().Error()})
	case <-set.Done():
	}
}

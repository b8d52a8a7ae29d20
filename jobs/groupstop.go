package jobs

import (
	"context"

	"github.com/slotlease/slotlease/lease"
)

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

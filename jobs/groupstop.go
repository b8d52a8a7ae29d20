package jobs

import (
	"context"

	"github.com/slotlease/slotlease/lease"
)

// watchStopRequest stops an attempt whose lease a newer request of its
// group asked to stop, as a cancel stops it (SIGTERM, the kill grace,
// SIGKILL): the job ends cancelled, "superseded: ...". Its watcher ends
// when the set is released or end is called; end waits for it.
func watchStopRequest(set *lease.LeaseSet, stop context.CancelCauseFunc) (end func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-set.StopRequested():
			stop(cancelCause{reason: "superseded: " + set.StopErr().Error()})
		case <-set.Done():
		case <-quit:
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

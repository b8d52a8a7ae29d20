package jobs

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// cancelCause is what a run is stopped with when its job was cancelled.
type cancelCause struct{ reason string }

func (c cancelCause) Error() string { return "cancelled: " + c.reason }

// runStops tracks the running jobs' stop functions, so a cancel marker
// stops the run of its job.
type runStops struct {
	mu   sync.Mutex
	stop map[*task]context.CancelCauseFunc
}

func (r *runStops) add(t *task, stop context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop == nil {
		r.stop = map[*task]context.CancelCauseFunc{}
	}
	r.stop[t] = stop
}

func (r *runStops) remove(t *task) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.stop, t)
}

// cancel stops every run of job id here; true if there was one.
func (r *runStops) cancel(id, reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	found := false
	for t, stop := range r.stop {
		if t.job.ID == id {
			stop(cancelCause{reason})
			found = true
		}
	}
	return found
}

// watchCancels stops the run of every job whose cancel marker is written
// from now on, until ctx ends; the returned wait waits for its goroutine.
// Markers written before are found by the run itself as it starts
// (checkCancel), so together they miss none: a run is tracked before it
// looks. The markers are read without a consumer (scan.go), every
// cancelPoll.
func (s *Server) watchCancels(ctx context.Context) (wait func(), err error) {
	st, err := s.q.results.Status(ctx)
	if err != nil {
		return nil, err
	}
	var from uint64
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		from = bs.StreamInfo().State.LastSeq + 1
	}
	sc := s.q.scan(s.q.names.Results, cancelKey("*"), from)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(cancelPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := sc.readAll(ctx, func(e scanEntry) {
				if e.deleted {
					return
				}
				var m cancelMark
				_ = json.Unmarshal(e.value, &m)
				m.Reason = clipReason(m.Reason)
				id := strings.TrimSuffix(e.key, ".cancel")
				if s.stops.cancel(id, m.Reason) {
					s.log.Info("job cancelled while running: stopping it", "job", id, "reason", m.Reason)
				}
			})
			if err != nil && ctx.Err() == nil {
				s.log.Warn("reading cancel markers", "err", err)
			}
		}
	}()
	return func() { <-done }, nil
}

// cancelPoll is how often a server looks for cancel markers written since
// it last looked.
const cancelPoll = 250 * time.Millisecond

// checkCancel stops t's run if its job was cancelled before the run was
// tracked.
func (s *Server) checkCancel(ctx context.Context, t *task, stop context.CancelCauseFunc) {
	if reason, ok := s.q.cancelRequested(ctx, t.job.ID); ok {
		stop(cancelCause{reason})
	}
}

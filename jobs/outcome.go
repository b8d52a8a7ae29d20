package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/sandbox"
)

// How an attempt ends: each outcome is stored (final ones through the
// broker, signed), then the delivery acknowledged, retried or given back.

// succeed stores the result and only then acknowledges the job.
func (s *Server) succeed(t *task) {
	t.rec.State, t.rec.Error = StateSucceeded, ""
	t.stopClaim()
	if err := s.storeTask(t); err != nil && !errors.Is(err, errEnded) { // ended: stored by an earlier try of this write
		// Not acknowledged: the job runs again (at least once).
		s.log.Error("storing a job's result; it will run again", "job", t.rec.ID, "err", err)
		_ = t.msg.NakWithDelay(s.cfg.PollInterval)
		return
	}
	s.log.Info("job succeeded", "job", t.rec.ID, "attempt", t.attempt, "duration", t.rec.Duration())
	s.metrics.ended(t.pool, OutcomeSucceeded, 1)
	s.ack(t)
}

// fail records a failed attempt, then retries it after a backoff or, after
// the last attempt, buries it.
func (s *Server) fail(t *task, why string) {
	t.stopClaim()
	t.rec.Attempts, t.rec.Error = t.attempt, why
	if t.attempt >= t.job.Spec.MaxAttempts {
		s.bury(t)
		return
	}
	delay := Backoff(t.attempt, s.cfg.Backoff, s.cfg.MaxBackoff)
	t.rec.State, t.rec.NextAttemptAt = StateFailed, time.Now().UTC().Add(delay)
	if err := s.storeTask(t); errors.Is(err, errEnded) {
		s.endedMeanwhile(t, err)
		return
	} else if err != nil {
		s.log.Warn("storing a failed attempt", "job", t.rec.ID, "err", err)
	}
	s.log.Info("job attempt failed; retrying", "job", t.rec.ID, "attempt", t.attempt, "of", t.job.Spec.MaxAttempts, "retry_in", delay, "error", why)
	s.metrics.ended(t.pool, OutcomeFailed, 1)
	_ = t.msg.NakWithDelay(delay)
	// Nothing announces the end of a backoff: look then, rather than at the
	// next poll. (Other servers find the retry by polling.)
	time.AfterFunc(delay+10*time.Millisecond, func() { s.poke(t.pool) })
}

// bury puts the job in the dead-letter bucket, then acknowledges it.
func (s *Server) bury(t *task) {
	t.stopClaim()
	t.rec.State, t.rec.NextAttemptAt = StateDead, time.Time{}
	t.rec.Attempts = t.attempt
	err := retryWrite(func(ctx context.Context) error {
		_, err := s.q.settle(ctx, t.msg, t.rec, 0, settleDead)
		return err
	}, nil)
	if err == nil {
		if err = s.storeTask(t); errors.Is(err, errEnded) {
			err = nil // stored by an earlier try of this write, or cancelled: final either way
		}
	}
	if err != nil {
		// Delivered again later, it finds its attempts used up and comes
		// straight back here.
		s.log.Error("storing a dead letter", "job", t.rec.ID, "err", err)
		_ = t.msg.NakWithDelay(s.cfg.PollInterval)
		return
	}
	s.log.Warn("job is dead: no attempts left", "job", t.rec.ID, "attempts", t.rec.Attempts, "error", t.rec.Error)
	s.metrics.ended(t.pool, OutcomeDead, 1)
	s.ack(t)
}

// buryMalformed dead-letters a message that is not a valid job, under its
// stream sequence when it has no usable id.
func (s *Server) buryMalformed(msg *delivery, meta *jetstream.MsgMetadata, err error) {
	var job Job
	_ = json.Unmarshal(msg.Data(), &job)
	id := job.ID
	if validID(id) != nil {
		id = malformedID(meta.Sequence.Stream)
	}
	if err == nil {
		err = fmt.Errorf("bad job id %q", job.ID)
	}
	rec := &Record{ID: id, State: StateDead, Spec: job.Spec, SubmittedAt: meta.Timestamp,
		Error: fmt.Sprintf("not a valid job message: %v; its body: %.300q", err, msg.Data())}
	settle := func(mode settleMode) error {
		return retryWrite(func(ctx context.Context) error {
			_, err := s.q.settle(ctx, msg, rec, 0, mode)
			return err
		}, nil)
	}
	if err := settle(settleDead); err != nil {
		s.log.Error("storing a dead letter", "job", id, "err", err)
		_ = msg.NakWithDelay(s.cfg.PollInterval)
		return
	}
	_ = settle(settleAny)
	s.log.Error("dead-lettered a malformed job message", "id", id, "err", err)
	_ = msg.Term()
}

// cancelled stores a job whose run was stopped because it was cancelled
// (or that was cancelled before it started: res is nil), then acknowledges
// it: it never runs again.
func (s *Server) cancelled(t *task, reason string, res *sandbox.Result) {
	t.stopClaim()
	rec := t.rec
	rec.State, rec.Error, rec.NextAttemptAt = StateCancelled, "cancelled: "+reason, time.Time{}
	rec.FinishedAt = time.Now().UTC()
	// The attempt was under way (its running state stored), even if the
	// cancel came before its command started: the cancel stopped it. The
	// exit code stays unset when the command never ran.
	rec.StoppedBy = "cancel"
	if res != nil {
		code := res.ExitCode
		rec.ExitCode, rec.Signal, rec.DurationMs = &code, res.Signal, res.Duration.Milliseconds()
		rec.StdoutTail, rec.StderrTail = string(res.StdoutTail), string(res.StderrTail)
		rec.Notes = res.Notes // how the stop went: within its kill grace or killed
	}
	if err := s.storeTask(t); err != nil && !errors.Is(err, errEnded) { // ended: stored by an earlier try of this write
		s.log.Error("storing a cancelled job; it is delivered again and found cancelled then", "job", rec.ID, "err", err)
		_ = t.msg.NakWithDelay(s.cfg.PollInterval)
		return
	}
	s.log.Info("job cancelled", "job", rec.ID, "reason", reason)
	s.metrics.ended(t.pool, OutcomeCancelled, 1)
	s.q.emit(Event{Kind: EventCancelled, Job: rec.ID, Pool: rec.Spec.Pool, Batch: rec.Spec.Batch, Reason: reason})
	s.ack(t)
}

// giveBack returns a job unrun, without using up an attempt.
func (s *Server) giveBack(t *task, delay time.Duration, why string) {
	t.stopClaim()
	t.rec.Returned++
	t.rec.State = StateQueued
	if err := s.storeTask(t); errors.Is(err, errEnded) {
		s.endedMeanwhile(t, err)
		return
	} else if err != nil {
		s.log.Warn("storing a returned job", "job", t.rec.ID, "err", err)
	}
	s.log.Info("job given back", "job", t.rec.ID, "why", why)
	s.metrics.ended(t.pool, OutcomeGivenBack, 1)
	if delay > 0 {
		_ = t.msg.NakWithDelay(delay)
	} else {
		_ = t.msg.Nak()
	}
}

func (s *Server) ack(t *task) {
	t.stopClaim()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.msg.DoubleAck(ctx); err != nil {
		// Delivered again, it finds its final record and is acknowledged then.
		s.log.Warn("acknowledging a job", "job", t.job.ID, "err", err)
	}
}

// retryWrite makes a record write up to four times, 100ms, 300ms and
// 900ms apart, each try within 5s, until it succeeds or returns an error
// that settles (settled, if not nil, says which do).
func retryWrite(write func(ctx context.Context) error, settled func(error) bool) error {
	var err error
	for i, wait := 0, 100*time.Millisecond; i < 4; i, wait = i+1, wait*3 {
		if i > 0 {
			time.Sleep(wait)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = write(ctx)
		cancel()
		if err == nil || (settled != nil && settled(err)) {
			return err
		}
	}
	return err
}

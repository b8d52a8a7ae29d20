package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// Taking a fetched job: its record read, its claim kept, its leases
// acquired, its run started (run.go).

// task is one delivery of a job, from fetch to acknowledgement.
type task struct {
	msg       *delivery
	job       Job
	rec       *Record
	rev       uint64 // rec's revision as this executor last read or wrote it (0: none stored)
	pool      string
	delivered uint64
	attempt   int    // this delivery's attempt number
	stopClaim func() // stops the claim heartbeat; set once it runs
	// span is the attempt's job.run span, from before its lease is
	// acquired, so that the lease's acquire and release spans are its
	// children; spanCtx carries it (and no cancellation).
	span    trace.Span
	spanCtx context.Context
}

// take decides what to do with a fetched job and, when it is to run,
// acquires its lease and starts it.
func (s *Server) take(ctx context.Context, pool string, msg *delivery, st lease.PoolStats) outcome {
	meta, err := msg.Metadata()
	if err != nil {
		s.log.Error("job message without metadata", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return handled
	}
	var job Job
	if err := json.Unmarshal(msg.Data(), &job); err != nil || validID(job.ID) != nil {
		s.buryMalformed(msg, meta, err)
		return handled
	}
	t := &task{msg: msg, job: job, pool: pool, delivered: meta.NumDelivered, stopClaim: func() {}}
	// Read on a context that outlives a shutdown: a job taken just as the
	// server stops must still be given back properly.
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	rec, rev, err := s.q.get(gctx, s.q.results, job.ID)
	cancel()
	switch {
	case errors.Is(err, ErrNotFound):
		rec = &Record{ID: job.ID, State: StateQueued, Spec: job.Spec, SubmittedAt: job.SubmittedAt}
	case err != nil:
		s.log.Warn("reading a job's record", "job", job.ID, "err", err)
		_ = msg.NakWithDelay(s.cfg.PollInterval)
		return idle
	}
	t.rec, t.rev = rec, rev
	if rec.State.Final() {
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		believed, err := s.q.believed(gctx, rec)
		cancel()
		switch {
		case err != nil:
			s.log.Warn("checking a job's stored outcome", "job", job.ID, "err", err)
			_ = msg.NakWithDelay(s.cfg.PollInterval)
			return idle
		case believed:
			// Its result is stored; the acknowledgement was lost.
			s.ack(t)
			return handled
		}
		// An outcome no broker signed: someone's forgery. The job runs,
		// and its record is made anew from the job itself.
		s.log.Warn("a record of this job claims an outcome no broker signed; running the job all the same", "job", job.ID, "state", rec.State)
		t.rec = &Record{ID: job.ID, State: StateQueued, Spec: job.Spec, SubmittedAt: job.SubmittedAt, Seq: meta.Sequence.Stream}
	}
	rec = t.rec
	t.attempt = int(meta.NumDelivered) - rec.Returned
	if rec.State == StateRunning && rec.Node != "" {
		rec.Error = fmt.Sprintf("attempt %d on node %s was lost: its executor stopped or lost contact before storing a result", rec.Attempts, rec.Node)
	}
	if t.attempt > job.Spec.MaxAttempts {
		// Only deliveries whose executors vanished get here: each counted.
		t.attempt--
		s.bury(t)
		return handled
	}
	if err := job.Spec.Validate(); err != nil {
		s.fail(t, err.Error())
		return handled
	}
	if job.Spec.Slots > st.Capacity {
		s.fail(t, fmt.Sprintf("needs %d slots, but pool %s on node %s has %d", job.Spec.Slots, pool, s.node, st.Capacity))
		return handled
	}
	// A job that cancels its group's run in progress asks for its slots
	// all the same: its request stops the holders of its group, whose
	// slots it is granted as they free (groupstop.go).
	if job.Spec.Slots > st.Available && job.Spec.OnGroup != lease.OnGroupCancelInProgress {
		s.giveBack(t, s.cfg.PollInterval, "not enough free slots on this node")
		return idle
	}
	t.stopClaim = s.keepClaim(msg)
	t.spanCtx, t.span = telemetry.StartJobRun(job.Trace, telemetry.JobID(job.ID), natstrace.Pool(pool), natstrace.Node(s.node),
		telemetry.JobAttempt(t.attempt))
	set, err := s.acquire(trace.ContextWithSpan(ctx, t.span), pool, job, meta.NumDelivered)
	if err != nil {
		natstrace.End(t.span, fmt.Errorf("no lease: %w", err))
		switch {
		case errors.Is(err, lease.ErrUnknownPool), errors.Is(err, lease.ErrExceedsCapacity),
			errors.Is(err, lease.ErrInvalidSlots), errors.Is(err, lease.ErrBadRequest):
			s.fail(t, fmt.Sprintf("no lease on node %s: %v", s.node, err))
			return handled
		case errors.Is(err, lease.ErrSuperseded):
			s.cancelled(t, "superseded: "+err.Error(), nil)
			return handled
		case ctx.Err() != nil:
			s.giveBack(t, 0, "the executor is stopping")
		default: // wait expired, or the manager is unavailable
			s.giveBack(t, s.cfg.PollInterval, "no lease in time: "+err.Error())
		}
		return idle
	}
	s.charged(pool, msg.Subject(), job.Spec.Slots)
	s.runs.Add(1)
	s.running.Add(1)
	go s.run(t, set)
	return started
}

// acquire takes the leases of one delivery of job: its pool on this node
// and, with further pools, all of them or none (lease.Client.AcquireAll).
func (s *Server) acquire(ctx context.Context, pool string, job Job, delivery uint64) (*lease.LeaseSet, error) {
	opts := []lease.AcquireOption{lease.WithRequestID(job.ID + "-d" + strconv.FormatUint(delivery, 10)),
		lease.WithWait(s.cfg.AcquireWait), lease.WithTenant(job.Spec.Tenant), lease.WithKey(job.Spec.Key), lease.WithUnits(job.Spec.Units)}
	if job.Spec.Group != "" {
		opts = append(opts, lease.InGroup(job.Spec.Group, job.Spec.OnGroup))
	}
	if len(job.Spec.Pools) == 0 {
		l, err := s.cfg.Leases.Acquire(ctx, pool, job.Spec.Slots, opts...)
		if err != nil {
			return nil, err
		}
		return lease.NewLeaseSet(l), nil
	}
	wants := []lease.Want{{Pool: pool, Slots: job.Spec.Slots}}
	for _, p := range job.Spec.Pools {
		wants = append(wants, lease.Want{Pool: p.Pool, Slots: p.Slots})
	}
	return s.cfg.Leases.AcquireAll(ctx, wants, opts...)
}

// keepClaim heartbeats the job's claim until the returned stop is called;
// stop waits for the heartbeat goroutine.
func (s *Server) keepClaim(msg *delivery) (stop func()) {
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(s.cfg.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					s.log.Warn("keeping a job's claim alive", "err", err)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-exited
	}
}

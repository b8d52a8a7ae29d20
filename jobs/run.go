package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/sandbox"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// Running a taken job under its leases, in the sandbox, and ending the
// attempt as its result says (outcome.go).

// run runs a job whose lease is held, then stores its result and
// acknowledges (or retries, or buries) it.
func (s *Server) run(t *task, set *lease.LeaseSet) {
	defer s.runs.Done()
	defer s.running.Add(-1)
	s.metrics.runs(t.pool, 1)
	defer s.metrics.runs(t.pool, -1)
	defer s.poke(t.pool)
	if s.sem != nil {
		defer func() { <-s.sem }()
	}
	rec, spec := t.rec, t.job.Spec
	leases := set.Leases()
	l := leases[0] // the job's own pool: the record names its lease
	for _, o := range leases {
		if o.Pool() == t.pool && o.Node() == s.node {
			l = o
		}
	}
	rec.State, rec.Attempts, rec.Node = StateRunning, t.attempt, s.node
	rec.LeaseID, rec.LeaseToken = l.ID(), l.Token()
	rec.StartedAt, rec.FinishedAt, rec.NextAttemptAt = time.Now().UTC(), time.Time{}, time.Time{}
	rec.ExitCode, rec.Signal, rec.DurationMs, rec.StoppedBy = nil, "", 0, ""
	rec.PeakMemoryBytes, rec.Isolation, rec.Notes, rec.StdoutTail, rec.StderrTail = 0, "", nil, "", ""
	if err := s.storeTask(t); errors.Is(err, errEnded) {
		// Cancelled between the fetch and now: it does not run.
		natstrace.End(t.span, err)
		s.releaseAll(t, set)
		s.endedMeanwhile(t, err)
		return
	} else if err != nil {
		s.log.Warn("storing a job's running state", "job", rec.ID, "err", err)
	}
	s.log.Info("job started", "job", rec.ID, "pool", t.pool, "attempt", t.attempt, "lease", l.ID())
	runCtx, stopRun := context.WithCancelCause(s.runCtx)
	defer stopRun(nil)
	s.stops.add(t, stopRun)
	defer s.stops.remove(t)
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	s.checkCancel(cctx, t, stopRun)
	ccancel()
	endWatch := watchStopRequest(set, stopRun) // groupstop.go
	defer endWatch()
	spanCtx, span := t.spanCtx, t.span // started before the lease was acquired (take)
	natstrace.SetAttributes(span, natstrace.LeaseID(l.ID()))
	defer span.End()

	jobEnv := maps.Clone(spec.Env)
	if jobEnv == nil {
		jobEnv = map[string]string{}
	}
	jobEnv["JOB_ID"], jobEnv["JOB_ATTEMPT"] = rec.ID, strconv.Itoa(t.attempt)
	env := s.cfg.Env(leases, jobEnv)
	ch, cerr := s.openChannel(spanCtx, t.job)
	if cerr != nil {
		s.log.Warn("the job runs without a command channel", "job", rec.ID, "err", cerr)
	} else {
		ch.env(env, sandbox.DefaultPath)
	}
	usage := s.usageFile(t, env)
	sbSpec := sandbox.Spec{
		Command: spec.Command, Env: env,
		Timeout: time.Duration(spec.Timeout), CPUTime: time.Duration(spec.CPU), MemoryBytes: spec.MemoryBytes,
		MaxProcs: spec.MaxProcs, MaxOpenFiles: spec.MaxOpenFiles, Isolate: spec.Isolate, NoNetwork: spec.NoNetwork,
		CaptureBytes: s.cfg.OutputBytes, KillGrace: s.cfg.KillGrace, LostGrace: set.LossGrace(), Deadline: set.Deadline, Hide: s.cfg.Hide,
	}
	if len(s.cfg.Hide) > 0 {
		sbSpec.Writable = spec.Writable // unconfined, a job writes what its executor's user can anyway
		if usage != nil {
			sbSpec.Lend = []string{usage.Dir()} // the job's own identity writes it
		}
	}
	if ch != nil {
		ch.grant(&sbSpec)
	}
	res, err := sandbox.Run(runCtx, sbSpec, set.Done())
	if ch != nil {
		ch.close() // the channel dies with the job
	}
	if err == nil {
		natstrace.SetAttributes(span, natstrace.ExitCode(res.ExitCode))
	}

	// Slots back first: the result write does not need them.
	s.releaseUsage(t, set, usage)

	var cancelled cancelCause
	switch {
	case errors.As(context.Cause(runCtx), &cancelled):
		s.cancelled(t, cancelled.reason, res)
	case err != nil && s.runCtx.Err() != nil:
		s.giveBack(t, 0, "the executor stopped before the job started")
	case err != nil:
		s.fail(t, fmt.Sprintf("could not start: %v", err))
	case res.StoppedBy == sandbox.StoppedCancelled:
		why := "the executor stopped; the job was interrupted"
		if len(res.Notes) > 0 {
			why += " (" + strings.Join(res.Notes, "; ") + ")"
		}
		s.giveBack(t, 0, why)
	default:
		code := res.ExitCode
		rec.ExitCode, rec.Signal, rec.DurationMs, rec.StoppedBy = &code, res.Signal, res.Duration.Milliseconds(), res.StoppedBy
		rec.PeakMemoryBytes, rec.Isolation, rec.Notes = res.PeakMemoryBytes, res.Isolation, res.Notes
		rec.StdoutTail, rec.StderrTail = string(res.StdoutTail), string(res.StderrTail)
		rec.FinishedAt = time.Now().UTC()
		if res.ExitCode == 0 && res.StoppedBy == "" {
			s.succeed(t)
		} else {
			s.fail(t, describe(res))
		}
	}
}

// releaseAll gives back the leases of t's run. In the run's trace the
// release span is the run span's child.
func (s *Server) releaseAll(t *task, set *lease.LeaseSet) {
	ctx, cancel := context.WithTimeout(t.spanCtx, 5*time.Second)
	defer cancel()
	if err := set.Release(ctx); err != nil {
		s.log.Warn("releasing a job's leases (they expire on their own)", "job", t.job.ID, "err", err)
	}
}

// describe says why an attempt failed, with the last line of its stderr.
func describe(res *sandbox.Result) string {
	var why string
	switch {
	case res.StoppedBy == sandbox.StoppedTimeout:
		why = "stopped: ran past its timeout"
	case res.StoppedBy == sandbox.StoppedLeaseLost:
		why = "stopped: its lease was lost"
	case res.StoppedBy != "":
		why = "stopped by its " + res.StoppedBy + " limit"
	case res.ExitCode >= 0:
		why = fmt.Sprintf("exit code %d", res.ExitCode)
	default:
		why = "killed by signal " + res.Signal
	}
	if line := lastLine(res.StderrTail); line != "" {
		why += ": " + line
	}
	return why
}

func lastLine(b []byte) string {
	b = bytes.TrimRight(b, "\r\n\t ")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if len(b) > 200 {
		b = append(b[:200:200], "..."...)
	}
	return string(b)
}

package jobs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/sandbox"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// Defaults of ServerConfig.
const (
	DefaultGrace        = 30 * time.Second
	DefaultAckWait      = 30 * time.Second
	DefaultAging        = 5 * time.Minute
	DefaultBackoff      = time.Second
	DefaultMaxBackoff   = 5 * time.Minute
	DefaultAcquireWait  = 5 * time.Second
	DefaultPollInterval = time.Second
	DefaultOutputBytes  = 4 << 10
	maxAckPending       = 20000
)

// ServerConfig wires a Server. Queue, Conn, Leases, Pools and Env are
// required.
type ServerConfig struct {
	Queue *Queue
	// Conn carries the wake-up subscriptions (a job published, a lease
	// event on this node); the Queue's own connection is fine.
	Conn *nats.Conn
	// Leases asks this node's lease manager: jobs run only on its node.
	Leases *lease.Client
	Pools  []string
	// Concurrency caps the jobs this server runs at once; 0 leaves the cap
	// to the node's free slots.
	Concurrency int
	// Grace is how long running jobs may finish once Serve's context ends,
	// before they are stopped and given back.
	Grace time.Duration
	// AckWait is how long a taken job's claim lives without a heartbeat:
	// after an executor dies, its jobs are delivered again after AckWait.
	// It is a property of the shared consumers, so every server of a pool
	// should use the same value (the last one to start sets it).
	AckWait time.Duration
	// Aging is the period after which a waiting job counts one priority
	// level higher (see Order); negative disables aging.
	Aging time.Duration
	// Backoff is the delay before the first retry of a failed job; it
	// doubles with every further attempt up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// AcquireWait is how long a taken job waits for its lease before it is
	// given back for another node (the slot seen free was taken meanwhile).
	AcquireWait time.Duration
	// PollInterval is how often to look for work when nothing wakes the
	// server (a retry's backoff ending is not announced).
	PollInterval time.Duration
	// KillGrace is the sandbox's delay between SIGTERM and SIGKILL.
	KillGrace time.Duration
	// Hide lists paths hidden from every job (sandbox.Spec.Hide):
	// credentials and the lease store. Non-empty, it confines every job
	// (ids of its own, read-only view but its working directory and its
	// command channel), and an attempt that cannot be confined fails and
	// is retried like any failed attempt.
	Hide []string
	// Executable is put on every job's PATH as `executor` (the serving
	// binary); "" gives jobs the command channel without it. MaxDepth
	// (DefaultMaxDepth) and MaxChildren (DefaultMaxChildren, per attempt)
	// bound follow-up jobs (followup.go).
	Executable            string
	MaxDepth, MaxChildren int
	// OutputBytes caps the stdout and stderr tails kept in a result.
	OutputBytes int
	// Env builds a worker's whole environment from its lease and the job's
	// own variables (executor's workerEnv: the lease variables, a few safe
	// variables of the executor, never its secrets).
	Env func(leases []*lease.Lease, jobEnv map[string]string) map[string]string
	// Logger; slog.Default() if nil.
	Logger *slog.Logger
	// Meter, if set, gets the server's instruments (metrics.go): attempts
	// by outcome and attempts running, per pool.
	Meter metric.Meter
}

// Server takes jobs of its pools from the queue and runs each under a lease
// of its own node, in the sandbox.
//
// No hoarding: for each pool, one feeder takes one job at a time, and only
// after the node's lease manager reported a free slot and nobody queued for
// one; the job's lease is acquired before the next is taken. So a job never
// waits on a full node while an idle node serving the same pool could take
// it, and a job that lost a race for the slot is given back after
// AcquireWait.
//
// Delivery: a job is acknowledged only once its final record (succeeded or
// dead) is stored; a failed attempt is negatively acknowledged with a
// backoff; a job given back unrun (shutdown, no slot in time) is
// negatively acknowledged at once and does not use up an attempt. While a
// job is held, its claim is kept alive every AckWait/3.
type Server struct {
	cfg  ServerConfig
	log  *slog.Logger
	q    *Queue
	node string

	feeds map[string]*feed         // per pool: consumers and turns (pick.go)
	wakes map[string]chan struct{} // per pool, buffered 1
	sem   chan struct{}            // running jobs; nil when Concurrency is 0

	// runCtx is the running jobs' context: cancelled when the grace
	// period ends (or Abort), which stops their sandboxes.
	runCtx   context.Context
	stopRuns context.CancelFunc
	runs     sync.WaitGroup // one per running job
	running  atomic.Int64
	metrics  *serveMetrics // nil without ServerConfig.Meter
	stops    runStops      // the running jobs' stops, for cancels (cancelwatch.go)
	skipLog  logGate       // job subjects left unserved are logged at most every 10 s
	started  atomic.Bool
}

// NewServer validates cfg and fills in defaults.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Queue == nil || cfg.Conn == nil || cfg.Leases == nil || cfg.Env == nil {
		return nil, errors.New("jobs: server needs a queue, a connection, a lease client and an env builder")
	}
	if len(cfg.Pools) == 0 {
		return nil, errors.New("jobs: server needs at least one pool")
	}
	if cfg.Concurrency < 0 {
		return nil, fmt.Errorf("jobs: concurrency %d must not be negative", cfg.Concurrency)
	}
	cfg.Grace = cmp.Or(cfg.Grace, DefaultGrace)
	cfg.AckWait = cmp.Or(cfg.AckWait, DefaultAckWait)
	cfg.Aging = cmp.Or(cfg.Aging, DefaultAging)
	cfg.Backoff = cmp.Or(cfg.Backoff, DefaultBackoff)
	cfg.MaxBackoff = max(cmp.Or(cfg.MaxBackoff, DefaultMaxBackoff), cfg.Backoff)
	cfg.AcquireWait = cmp.Or(cfg.AcquireWait, DefaultAcquireWait)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.OutputBytes = cmp.Or(cfg.OutputBytes, DefaultOutputBytes)
	cfg.MaxDepth = min(cmp.Or(cfg.MaxDepth, DefaultMaxDepth), MaxDepth)
	cfg.MaxChildren = cmp.Or(cfg.MaxChildren, DefaultMaxChildren)
	if cfg.AckWait < time.Second {
		return nil, fmt.Errorf("jobs: ack wait %v must be at least 1s", cfg.AckWait)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{
		cfg:   cfg,
		q:     cfg.Queue,
		node:  cfg.Leases.Node(),
		feeds: map[string]*feed{},
		wakes: map[string]chan struct{}{},
	}
	s.log = cfg.Logger.With("node", s.node)
	// The command channels of servers of this user that crashed.
	if removed := sandbox.SweepTemp(sandbox.TempJob); len(removed) > 0 {
		s.log.Info("removed the command channels of executors that are gone", "dirs", removed)
	}
	for _, p := range cfg.Pools {
		if _, dup := s.wakes[p]; dup {
			return nil, fmt.Errorf("jobs: pool %q given twice", p)
		}
		s.wakes[p] = make(chan struct{}, 1)
		s.feeds[p] = newFeed()
	}
	if cfg.Concurrency > 0 {
		s.sem = make(chan struct{}, cfg.Concurrency)
	}
	var err error
	if s.metrics, err = newServeMetrics(cfg.Meter, s.node, cfg.Pools); err != nil {
		return nil, fmt.Errorf("jobs: metrics: %w", err)
	}
	s.runCtx, s.stopRuns = context.WithCancel(context.Background())
	return s, nil
}

// Running returns the number of jobs running now.
func (s *Server) Running() int { return int(s.running.Load()) }

// Abort stops running jobs now instead of at the end of the grace period;
// they are given back for redelivery. It is meant for a second signal once
// Serve's context has ended: before that, jobs taken would be given back
// unrun.
func (s *Server) Abort() { s.stopRuns() }

// Serve takes and runs jobs until ctx ends. Then it takes no new job, lets
// running ones finish for up to Grace, stops the rest and gives them back
// (they are delivered again, without using up an attempt), releases their
// leases, and returns. It can be called once.
func (s *Server) Serve(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("jobs: Serve called twice")
	}
	defer s.stopRuns()
	if err := s.ensureConsumers(ctx); err != nil {
		return err
	}
	var subs []*nats.Subscription
	defer func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}()
	for _, pool := range s.cfg.Pools {
		poke := func(*nats.Msg) { s.poke(pool) }
		// A submit can reach this subscriber before the stream has stored
		// the job (or before the consumer counts it): look again shortly.
		submitted := func(*nats.Msg) {
			s.poke(pool)
			time.AfterFunc(50*time.Millisecond, func() { s.poke(pool) })
		}
		for subj, h := range map[string]nats.MsgHandler{
			s.q.names.PoolSubjects(pool):                          submitted,
			lease.EventFilter(s.q.names.Prefix, s.node, pool, ""): poke, // slots may have come free
		} {
			sub, err := s.cfg.Conn.Subscribe(subj, h)
			if err != nil {
				return fmt.Errorf("jobs: subscribe %s: %w", subj, err)
			}
			subs = append(subs, sub)
		}
	}

	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	waitWatch, err := s.watchCancels(wctx)
	if err != nil {
		stopWatch()
		return fmt.Errorf("jobs: watching for cancels: %w", err)
	}
	// Cancels are watched until the last running job has ended.
	defer waitWatch()
	defer stopWatch()

	var feeders sync.WaitGroup
	for _, pool := range s.cfg.Pools {
		feeders.Go(func() { s.feed(ctx, pool) })
	}
	s.log.Info("serving jobs", "pools", s.cfg.Pools, "concurrency", s.cfg.Concurrency)
	<-ctx.Done()
	feeders.Wait()

	done := make(chan struct{})
	go func() {
		s.runs.Wait()
		close(done)
	}()
	if n := s.Running(); n > 0 {
		s.log.Info("stopping: waiting for running jobs", "running", n, "grace", s.cfg.Grace)
	}
	grace := time.NewTimer(s.cfg.Grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-s.runCtx.Done(): // Abort
		<-done
	case <-grace.C:
		s.log.Warn("grace period over: stopping running jobs and giving them back", "running", s.Running())
		s.stopRuns()
		<-done
	}
	s.log.Info("stopped")
	return nil
}

func (s *Server) poke(pool string) {
	select {
	case s.wakes[pool] <- struct{}{}:
	default:
	}
}

type outcome int

const (
	idle    outcome = iota // nothing taken: wait for a wake-up or the poll interval
	handled                // a job was dealt with without running it: look again at once
	started                // a job runs and owns the concurrency token
)

// feed is the one loop taking jobs of one pool. It returns when ctx ends.
func (s *Server) feed(ctx context.Context, pool string) {
	poll := time.NewTimer(0)
	defer poll.Stop()
	for ctx.Err() == nil {
		if s.sem != nil {
			select {
			case s.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		o := s.tryOne(ctx, pool)
		if o != started && s.sem != nil {
			<-s.sem
		}
		if o != idle {
			continue
		}
		poll.Reset(s.cfg.PollInterval)
		select {
		case <-ctx.Done():
			return
		case <-s.wakes[pool]:
		case <-poll.C:
		}
	}
}

func (s *Server) tryOne(ctx context.Context, pool string) outcome {
	stats, err := s.cfg.Leases.Stats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("asking the lease manager for pool stats", "err", err)
		}
		return idle
	}
	var st lease.PoolStats
	found := false
	for _, ps := range stats {
		if ps.Name == pool {
			st, found = ps, true
		}
	}
	if !found {
		s.log.Error("the lease manager of this node has no such pool", "pool", pool)
		return idle
	}
	// No hoarding: only with a slot free now, and nobody on this node
	// already waiting for one.
	if st.Available < 1 || st.QueuedRequests > 0 {
		return idle
	}
	msg, err := s.next(ctx, pool, st)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("fetching a job", "pool", pool, "err", err)
		}
		return idle
	}
	if msg == nil {
		return idle
	}
	return s.take(ctx, pool, msg, st)
}

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
	if job.Spec.Slots > st.Available {
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
		lease.WithWait(s.cfg.AcquireWait), lease.WithTenant(job.Spec.Tenant)}
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
	sbSpec := sandbox.Spec{
		Command: spec.Command, Env: env,
		Timeout: time.Duration(spec.Timeout), CPUTime: time.Duration(spec.CPU), MemoryBytes: spec.MemoryBytes,
		MaxProcs: spec.MaxProcs, MaxOpenFiles: spec.MaxOpenFiles, Isolate: spec.Isolate, NoNetwork: spec.NoNetwork,
		CaptureBytes: s.cfg.OutputBytes, KillGrace: s.cfg.KillGrace, LostGrace: set.LossGrace(), Deadline: set.Deadline, Hide: s.cfg.Hide,
	}
	if len(s.cfg.Hide) > 0 {
		sbSpec.Writable = spec.Writable // unconfined, a job writes what its executor's user can anyway
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
	s.releaseAll(t, set)

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

package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/sandbox"
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
	if err := s.awaitBroker(ctx); err != nil {
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

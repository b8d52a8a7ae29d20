package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/natsconn"
)

// Set-up retries: the first after setupMinBackoff, each next one twice as
// late, at most setupMaxBackoff apart. One try may take setupTryTimeout,
// and each stream or bucket it makes setupStepTimeout: on a cluster just
// formed, nats-server leaves one of two creates of the same stream at once
// (managers starting together, a Kubernetes DaemonSet's) unanswered, and
// waiting the whole try for it made every such start 10 s longer (68 s
// seen with two managers on a loaded machine). A create made again is
// answered at once (the stream exists by then, or the race is over), and
// a slow one is just made again: creates here are idempotent. Each time
// the same create is made again it gets twice as long (createBudget), up
// to the whole try: a cluster whose creates are all slow (a loaded
// machine) still gets there, and the race, which each bucket's first
// creates run once, costs 3 s each time.
const (
	setupMinBackoff  = 250 * time.Millisecond
	setupMaxBackoff  = 5 * time.Second
	setupTryTimeout  = 10 * time.Second
	setupStepTimeout = 3 * time.Second
)

// errAfterConnect marks a set-up failure on a working connection.
var errAfterConnect = errors.New("JetStream set-up")

// natsSetup is what a manager needs from NATS before it can stand by.
type natsSetup struct {
	nc                        *nats.Conn
	store, leaders, poolStore *jetstream.LeaseStore
	// jobs is the job queue administrator's connection to the executors'
	// account, where the job queue lives (the embedded server's own user,
	// or JOBS_NATS_*); nil without one.
	jobs *nats.Conn
	// jobsCapErr says why the job queue's caps could not all be applied:
	// worth a warning, not a node that never serves (the executors'
	// account's cap still bounds the queue).
	jobsCapErr error
	// jobsRefused: the executors' account was at its connection cap, so
	// there is no job queue connection (jobs is nil). Leases are served.
	jobsRefused error
}

// setUp connects to NATS and opens the lease, leadership and pool buckets
// (and the event stream when EVENT_RETENTION is set, and, with jobsAuth,
// the embedded server's job queue: a second connection, to the executors'
// account, makes its stream and buckets). While NATS is down or
// JetStream unavailable (a server restarting, a cluster without a meta
// leader), it logs and tries again with backoff (250ms doubling to 5s)
// instead of exiting, so a node never loses a candidate because NATS was
// down the moment its manager started. It gives up only on an error that
// waiting cannot cure (a malformed URL, bad credentials or settings), or
// with ctx's error when ctx ends first (SIGTERM). The caller owns the
// connection it returns.
func setUp(ctx context.Context, cfg *config.Manager, url string, jobsAuth *jobsAdmin, log *slog.Logger) (*natsSetup, error) {
	var nc, jobsNC *nats.Conn
	closeAll := func() {
		for _, c := range []*nats.Conn{nc, jobsNC} {
			if c != nil {
				c.Close()
			}
		}
	}
	var s *natsSetup
	budget := &createBudget{}
	attempts, err := retrying(ctx, log, "NATS set-up", func(int) (err error) {
		s, err = trySetUp(ctx, cfg, url, &nc, jobsAuth, &jobsNC, budget)
		return err
	})
	if err != nil {
		closeAll()
		return nil, err
	}
	if attempts > 1 {
		log.Info("NATS set-up succeeded", "attempt", attempts)
	}
	if s.jobsCapErr != nil {
		log.Warn("the job queue keeps caps other than NATS_EXECUTORS_MAX_STORE's", "err", s.jobsCapErr)
	}
	if s.jobsRefused != nil {
		log.Warn("serving leases without the job queue for now: the executors' account is at its connection cap (NATS_EXECUTORS_MAX_CONNECTIONS); trying again every few seconds",
			"err", s.jobsRefused)
	}
	return s, nil
}

// retrying calls try until it succeeds, fails in a way waiting cannot
// cure (transient), or ctx ends (then with ctx's error), logging each
// failure as what's and waiting 250ms, doubling to 5s, between tries. It
// returns the number of tries.
func retrying(ctx context.Context, log *slog.Logger, what string, try func(attempt int) error) (int, error) {
	backoff := setupMinBackoff
	for attempt := 1; ; attempt++ {
		err := try(attempt)
		switch {
		case err == nil:
			return attempt, nil
		case ctx.Err() != nil:
			return attempt, ctx.Err()
		case !transient(err):
			return attempt, err
		}
		log.Warn(what+" failed; retrying", "attempt", attempt, "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return attempt, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, setupMaxBackoff)
	}
}

// createBudget is how long each create of the set-up may take: its n-th
// make (n = 1, 2, ...) gets setupStepTimeout doubled n-1 times, at most
// setupTryTimeout. Not safe for concurrent use.
type createBudget struct{ tries map[string]int }

// context is ctx bounded by the budget of the next make of name.
func (b *createBudget) context(ctx context.Context, name string) (context.Context, context.CancelFunc) {
	if b.tries == nil {
		b.tries = map[string]int{}
	}
	b.tries[name]++
	return context.WithTimeout(ctx, stepTimeout(b.tries[name]))
}

// stepTimeout is the budget of the n-th make of one create.
func stepTimeout(n int) time.Duration {
	d := setupStepTimeout
	for i := 1; i < n && d < setupTryTimeout; i++ {
		d *= 2
	}
	return min(d, setupTryTimeout)
}

// jobsAdmin is how leasemgr connects as the job queue's administrator:
// the embedded server's in-memory user (opts), or JOBS_NATS_* (auth).
type jobsAdmin struct {
	auth natsconn.Auth
	opts []nats.Option
}

// configJobsAdmin is the administrator JOBS_NATS_* name on a NATS of your
// own, with the TLS settings of leasemgr's own connection; nil if none.
func configJobsAdmin(cfg *config.Manager) *jobsAdmin {
	if !cfg.JobsAdmin() {
		return nil
	}
	a := natsconn.ConfigAuth(&cfg.Common)
	a.Creds, a.InboxPrefix = "", ""
	a.NKeySeed, a.User, a.Password = cfg.JobsNATSNKey, cfg.JobsNATSUser, cfg.JobsNATSPassword
	return &jobsAdmin{auth: a}
}

// trySetUp makes one try. A connection made by an earlier try is kept in
// *nc (and *jobsNC): it reconnects by itself.
func trySetUp(ctx context.Context, cfg *config.Manager, url string, nc **nats.Conn, jobsAuth *jobsAdmin, jobsNC **nats.Conn, budget *createBudget) (*natsSetup, error) {
	s := &natsSetup{}
	if jobsAuth != nil && *jobsNC == nil {
		// First, as the server comes up: this connection counts against
		// the executors' account's connection cap, which executors
		// reconnecting to the restarted server could otherwise fill before
		// it. Should they have, the node serves its leases without the job
		// queue (docs/security.md, "Limits per account"): the managers'
		// own account always has room.
		c, err := natsconn.Connect(url, jobsAuth.auth, "leasemgr "+cfg.NodeID+" job queue", jobsAuth.opts...)
		switch {
		case errors.Is(err, nats.ErrMaxAccountConnectionsExceeded):
			s.jobsRefused = err
		case err != nil:
			return nil, err
		default:
			*jobsNC = c
		}
	}
	if *nc == nil {
		c, err := natsconn.Connect(url, natsconn.ConfigAuth(&cfg.Common), "leasemgr "+cfg.NodeID)
		if err != nil {
			return nil, err
		}
		*nc = c
	}
	ctx, cancel := context.WithTimeout(ctx, setupTryTimeout)
	defer cancel()
	open := func(bucket string) (*jetstream.LeaseStore, error) {
		sctx, cancel := budget.context(ctx, bucket)
		defer cancel()
		s, err := jetstream.OpenLeaseStore(sctx, *nc, jetstream.BucketConfig{Name: bucket, Replicas: cfg.Replicas})
		if err != nil {
			return nil, fmt.Errorf("%w: bucket %s: %w", errAfterConnect, bucket, err)
		}
		return s, nil
	}
	s.nc = *nc
	var err error
	if s.store, err = open(jetstream.NamesFor(cfg.SubjectPrefix).Leases); err != nil {
		return nil, err
	}
	if s.leaders, err = open(jetstream.NamesFor(cfg.SubjectPrefix).Leaders); err != nil {
		return nil, err
	}
	if s.poolStore, err = open(jetstream.NamesFor(cfg.SubjectPrefix).Pools); err != nil {
		return nil, err
	}
	if *jobsNC != nil {
		// Executors may not create streams (one capturing
		// <prefix>.*.*.acquire in their account would read every
		// executor's secrets): the job queue's stream and buckets are made
		// here, as its administrator, for them to bind to. Sized to the
		// executors' store cap, and capped so also where an earlier
		// version made its buckets without caps (jobs/limits.go).
		capErr, err := openJobQueue(ctx, cfg, *jobsNC)
		if err != nil {
			return nil, err
		}
		s.jobs, s.jobsCapErr = *jobsNC, capErr
	}
	if cfg.EventRetention > 0 {
		err := jetstream.EnsureAuditStream(ctx, *nc, jetstream.AuditConfig{
			Stream: jetstream.NamesFor(cfg.SubjectPrefix).Events, Subjects: cfg.SubjectPrefix + ".events.>",
			MaxAge: cfg.EventRetention, Replicas: cfg.Replicas,
		})
		if err != nil {
			return nil, fmt.Errorf("%w: event stream: %w", errAfterConnect, err)
		}
	}
	return s, nil
}

// openJobQueue makes (or binds) the job queue's stream and buckets on c,
// the administrator's connection, and gives them their caps; capErr says
// why not every cap could be applied.
func openJobQueue(ctx context.Context, cfg *config.Manager, c *nats.Conn) (capErr, err error) {
	jcfg := jobs.Config{Prefix: cfg.SubjectPrefix, Replicas: cfg.Replicas, MaxBytes: jobs.MaxBytesFor(cfg.ExecutorsMaxStore)}
	q, err := jobs.Open(ctx, c, jcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: job queue: %w", errAfterConnect, err)
	}
	return q.ApplyCaps(ctx, jcfg), nil
}

// transient reports whether a set-up error may go away by itself: NATS not
// reachable yet, or reachable with JetStream not (yet) answering. Refused
// credentials and settings that cannot work are not.
func transient(err error) bool {
	var netErr net.Error
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrNkeysNotSupported), errors.Is(err, nats.ErrNoUserCB), errors.Is(err, nats.ErrSecureConnRequired):
		return false
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.As(err, &netErr):
		return true
	}
	// JetStream API errors (no responders, no meta leader, insufficient
	// resources while peers are down) come in many shapes; a failure after
	// the connection was made is taken for a cluster that is recovering.
	return errors.Is(err, errAfterConnect)
}

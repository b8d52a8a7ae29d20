package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/natsconn"
)

// jobQueue is leasemgr's side of the job queue: the administrator's
// connection and the broker on it, started at set-up or, if the
// executors' account was at its connection cap then, as soon as a
// connection is admitted: the node heals by itself when such a flood
// ends (before, the job queue stayed without a broker until a restart).
type jobQueue struct {
	conn   atomic.Pointer[nats.Conn] // nil until connected
	broker *jobs.Broker              // set by start, before conn
	wg     sync.WaitGroup
	stop   context.CancelFunc // ends the tries of connectLater or bindLater; nil if none
	// borrowed: conn is leasemgr's own connection (bindLater), which
	// close leaves open.
	borrowed bool
}

// bindLaterRetry is how often leasemgr looks for a job queue in its own
// account (bindLater).
const bindLaterRetry = 10 * time.Second

// lateJobsRetry is how often a refused administrator's connection is
// tried again.
const lateJobsRetry = 2 * time.Second

// start runs the broker on c, connected at set-up.
func (q *jobQueue) start(ctx context.Context, nc, c *nats.Conn, cfg *config.Manager, log *slog.Logger, refused func(int)) error {
	b, err := startJobBroker(ctx, nc, c, cfg, log, refused)
	if err != nil {
		return err
	}
	q.broker = b
	q.conn.Store(c)
	return nil
}

// connectLater tries the administrator's connection every lateJobsRetry
// until it is admitted, then opens the queue and starts the broker; it
// stops with ctx. Wait for it with close.
func (q *jobQueue) connectLater(ctx context.Context, url string, admin *jobsAdmin, nc *nats.Conn, cfg *config.Manager, log *slog.Logger, refused func(int)) {
	ctx, q.stop = context.WithCancel(ctx)
	q.wg.Go(func() {
		t := time.NewTicker(lateJobsRetry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			c, err := natsconn.Connect(url, admin.auth, "leasemgr "+cfg.NodeID+" job queue", admin.opts...)
			if errors.Is(err, nats.ErrMaxAccountConnectionsExceeded) {
				continue
			}
			if err != nil {
				log.Warn("connecting to the job queue", "err", err)
				continue
			}
			octx, cancel := context.WithTimeout(ctx, setupTryTimeout)
			capErr, err := openJobQueue(octx, cfg, c)
			cancel()
			if err == nil {
				if capErr != nil {
					log.Warn("the job queue keeps caps other than NATS_EXECUTORS_MAX_STORE's", "err", capErr)
				}
				err = q.start(ctx, nc, c, cfg, log, refused)
			}
			if err != nil {
				c.Close()
				log.Warn("opening the job queue", "err", err)
				continue
			}
			log.Info("the job queue is served again: the executors' account admitted its administrator")
			return
		}
	})
}

// bindLater serves the job queue on leasemgr's own connection nc once the
// queue exists in its own account: a NATS of one account (no users, or
// every role in one), where executors make the queue with their first
// submit and nobody could be given as JOBS_NATS_*. With the accounts of
// docs/security.md the queue is in the executors' account and never
// shows here (JOBS_NATS_* is the way there). It looks every
// bindLaterRetry until ctx ends.
func (q *jobQueue) bindLater(ctx context.Context, nc *nats.Conn, cfg *config.Manager, log *slog.Logger, refused func(int)) {
	ctx, q.stop = context.WithCancel(ctx)
	q.borrowed = true
	q.wg.Go(func() {
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			t.Reset(bindLaterRetry)
			bctx, cancel := context.WithTimeout(ctx, setupTryTimeout)
			_, err := jobs.Bind(bctx, nc, cfg.SubjectPrefix)
			cancel()
			if err != nil {
				continue // none yet (jobs.ErrNoQueue), or not reachable now
			}
			if err := q.start(ctx, nc, nc, cfg, log, refused); err != nil {
				log.Warn("serving the job queue of leasemgr's own account", "err", err)
				continue
			}
			log.Info("serving the job queue found in leasemgr's own account (a NATS of one account)")
			return
		}
	})
}

// close stops the retries and the broker, and closes the connection.
func (q *jobQueue) close() {
	if q.stop != nil {
		q.stop()
	}
	q.wg.Wait()
	if q.broker != nil {
		q.broker.Close()
	}
	if c := q.conn.Load(); c != nil && !q.borrowed {
		c.Close()
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
)

// ExitUnavailable: NATS or the lease manager could not be reached.
const ExitUnavailable = 69

// connectQueue loads the configuration and binds the job queue; with
// create false nothing is created (ErrNoQueue if there is no queue yet).
func connectQueue(ctx context.Context, name string, create bool) (*config.Common, *nats.Conn, *jobs.Queue, error) {
	if err := needsNATSInJob(strings.TrimPrefix(name, "executor ")); err != nil {
		return nil, nil, nil, err
	}
	cfg, err := config.LoadCommonAs(config.RoleExecutor)
	if err != nil {
		return nil, nil, nil, &exitError{code: ExitUsage, err: fmt.Errorf("configuration:\n%w", err)}
	}
	nc, err := natsconn.Connect(cfg.NATSAddress(), natsconn.ConfigAuth(cfg), name)
	if err != nil {
		return nil, nil, nil, fail(ExitUnavailable, "%v (is leasemgr running?)", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var q *jobs.Queue
	if create {
		q, err = jobs.Open(ctx, nc, jobs.Config{Prefix: cfg.SubjectPrefix})
	} else {
		q, err = jobs.Bind(ctx, nc, cfg.SubjectPrefix)
	}
	if err != nil && !errors.Is(err, jobs.ErrNoQueue) {
		nc.Close()
		return nil, nil, nil, fail(ExitUnavailable, "%v (is JetStream enabled on %s?)", err, cfg.NATSAddress())
	}
	return cfg, nc, q, err
}

// clientOptions are the lease client's options for a connection made from
// cfg. Without NATS_URL the executor talks straight to leasemgr's embedded
// server on this host and closes its connection only on its way out, so
// every drop is that server's doing (it restarted or crashed), which frees
// no lease: the running work keeps its lease while the executor reconnects
// (lease.WithServerOnlyDrops).
func clientOptions(cfg *config.Common) []lease.ClientOption {
	// The client's spans come from the SDK otelsetup.Setup installed.
	opts := []lease.ClientOption{lease.WithPrefix(cfg.SubjectPrefix),
		lease.WithTracing(otel.GetTracerProvider(), otel.GetTextMapPropagator())}
	if cfg.NATSURL == "" {
		opts = append(opts, lease.WithServerOnlyDrops())
	}
	return opts
}

// usageErr turns a validation error into exit code 2.
func usageErr(err error) (int, error) {
	return ExitUsage, &exitError{code: ExitUsage, err: err}
}

// codeOf returns the exit code an error carries (1 if none).
func codeOf(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

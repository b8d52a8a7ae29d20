package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/otelsetup"
)

// workerEnv is the whole environment of a worker under lease l: the few
// harmless variables of the executor in passEnv, then the job's own
// variables, then the lease variables (which the job cannot override).
// Nothing else of the executor's environment, NATS credentials above all,
// reaches the worker.
func workerEnv(leases []*lease.Lease, jobEnv map[string]string) map[string]string {
	env := map[string]string{}
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	maps.Copy(env, jobEnv)
	maps.Copy(env, leaseEnv(leases...))
	return env
}

type serveFlags struct {
	pools       string
	node        string
	concurrency int
	grace       time.Duration
	ackWait     time.Duration
	aging       time.Duration
	backoff     time.Duration
	maxBackoff  time.Duration
	acquireWait time.Duration
	killGrace   time.Duration
	poll        time.Duration
	maxDepth    int
	maxChildren int
	metricsAddr string // --metrics-addr, else EXECUTOR_METRICS_ADDR; "" for none
}

// serveSetup defines serve's flags; its action checks them and serves.
func serveSetup(cmd *cobra.Command) action {
	f := &serveFlags{}
	fs := cmd.Flags()
	fs.StringVar(&f.pools, "pools", "", "comma-separated pools to take jobs for (default: every pool of this node)")
	fs.StringVar(&f.node, "node", "", "node whose lease manager grants the slots (default NODE_ID)")
	fs.IntVar(&f.concurrency, "concurrency", 0, "run at most this many jobs at once (0: as many as the node's free slots allow)")
	fs.DurationVar(&f.grace, "grace", jobs.DefaultGrace, "on SIGTERM, how long running jobs may finish before they are stopped and given back")
	fs.DurationVar(&f.ackWait, "ack-wait", jobs.DefaultAckWait, "a taken job's claim lapses after this without a heartbeat (use the same value on every executor)")
	fs.DurationVar(&f.aging, "aging", jobs.DefaultAging, "a waiting job counts one priority level higher per period waited (negative: no aging)")
	fs.DurationVar(&f.backoff, "backoff", jobs.DefaultBackoff, "delay before the first retry of a failed job, doubling per attempt")
	fs.DurationVar(&f.maxBackoff, "max-backoff", jobs.DefaultMaxBackoff, "cap on the retry delay")
	fs.DurationVar(&f.acquireWait, "acquire-wait", jobs.DefaultAcquireWait, "give a taken job back if its lease is not granted within this time")
	fs.DurationVar(&f.killGrace, "kill-grace", 5*time.Second, "time between SIGTERM and SIGKILL when stopping a job (on lease loss at most TTL/20)")
	fs.DurationVar(&f.poll, "poll", jobs.DefaultPollInterval, "how often to look for retries coming due")
	fs.IntVar(&f.maxDepth, "max-depth", jobs.DefaultMaxDepth, fmt.Sprintf("follow-up jobs submitted from inside jobs nest at most this deep (1 to %d)", jobs.MaxDepth))
	fs.IntVar(&f.maxChildren, "max-children", jobs.DefaultMaxChildren, "follow-up submits one job attempt may make")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "host:port to serve Prometheus /metrics on (default "+config.EnvExecutorMetricsAddr+"; none if empty)")
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
		if err := f.check(fs.Changed("metrics-addr"), args); err != nil {
			return usageErr(err)
		}
		return serveCommand(ctx, f, stdout, stderr)
	}
}

// check checks serve's flags; metricsSet: --metrics-addr was given.
func (f *serveFlags) check(metricsSet bool, args []string) error {
	var err error
	if f.metricsAddr, err = config.ExecutorMetricsAddr(f.metricsAddr, metricsSet); err != nil {
		return err
	}
	if f.maxDepth < 1 || f.maxDepth > jobs.MaxDepth || f.maxChildren < 1 {
		return fmt.Errorf("--max-depth %d, --max-children %d: depth must be from 1 to %d, children positive", f.maxDepth, f.maxChildren, jobs.MaxDepth)
	}
	if len(args) > 0 {
		return fmt.Errorf("serve takes no arguments, got %q", args)
	}
	if f.concurrency < 0 {
		return fmt.Errorf("--concurrency %d: must not be negative", f.concurrency)
	}
	if f.ackWait < time.Second {
		return fmt.Errorf("--ack-wait %v: must be at least 1s", f.ackWait)
	}
	for name, d := range map[string]time.Duration{"--grace": f.grace, "--backoff": f.backoff, "--max-backoff": f.maxBackoff,
		"--acquire-wait": f.acquireWait, "--kill-grace": f.killGrace, "--poll": f.poll} {
		if d <= 0 {
			return fmt.Errorf("%s %v: must be positive", name, d)
		}
	}
	return nil
}

// serveCommand takes and runs jobs as f says until ctx is done.
func serveCommand(ctx context.Context, f *serveFlags, stdout, stderr io.Writer) (int, error) {
	stopTelemetry, err := startTelemetry(ctx)
	if err != nil {
		return ExitUsage, err
	}
	defer stopTelemetry()
	cfg, nc, q, err := connectQueue(ctx, "executor serve", true)
	if err != nil {
		return codeOf(err), err
	}
	defer nc.Close()
	if f.node == "" {
		f.node = cfg.NodeID
	}
	client, err := lease.NewClient(nc, f.node, clientOptions(cfg)...)
	if err != nil {
		return 1, err
	}
	defer client.Close()

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	stats, err := client.Stats(sctx)
	cancel()
	if err != nil {
		return ExitUnavailable, fail(ExitUnavailable, "asking the lease manager of node %s for its pools: %w (is leasemgr running with NODE_ID=%s?)", f.node, err, f.node)
	}
	var have []string
	for _, s := range stats {
		have = append(have, s.Name)
	}
	pools := have
	if f.pools != "" {
		pools = nil
		for p := range strings.SplitSeq(f.pools, ",") {
			p = strings.TrimSpace(p)
			if err := config.ValidToken(p); err != nil {
				return usageErr(fmt.Errorf("--pools: pool %q: %w", p, err))
			}
			if !slices.Contains(have, p) {
				return usageErr(fmt.Errorf("--pools: node %s has no pool %q (it has %s)", f.node, p, strings.Join(have, ", ")))
			}
			if !slices.Contains(pools, p) {
				pools = append(pools, p)
			}
		}
	}

	hide, err := workerHide(cfg, stderr)
	if err != nil {
		return codeOf(err), err
	}
	log := cfg.Logger(stderr)
	srv, err := jobs.NewServer(jobs.ServerConfig{
		Queue: q, Conn: nc, Leases: client, Pools: pools, Concurrency: f.concurrency,
		Grace: f.grace, AckWait: f.ackWait, Aging: f.aging, Backoff: f.backoff, MaxBackoff: f.maxBackoff,
		AcquireWait: f.acquireWait, PollInterval: f.poll, KillGrace: f.killGrace,
		Env: workerEnv, Logger: log, Hide: hide,
		Executable: executable(stderr), MaxDepth: f.maxDepth, MaxChildren: f.maxChildren,
		Meter: telemetry.Meter(),
	})
	if err != nil {
		return usageErr(err)
	}
	// Served once the server has declared its series, so the first scrape
	// already has every pool's at 0.
	if f.metricsAddr != "" {
		stopMetrics, err := serveMetrics(f.metricsAddr, log)
		if err != nil {
			return ExitUsage, fail(ExitUsage, "--metrics-addr/%s %s: %v", config.EnvExecutorMetricsAddr, f.metricsAddr, err)
		}
		defer stopMetrics()
	}
	// A second SIGINT/SIGTERM during the grace period stops running jobs
	// at once (they are given back all the same).
	served := make(chan struct{})
	defer close(served)
	go func() {
		select {
		case <-ctx.Done():
		case <-served:
			return
		}
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		select {
		case <-again:
			log.Warn("second signal: stopping running jobs now")
			srv.Abort()
		case <-served:
		}
	}()
	if err := srv.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return 1, err
	}
	return 0, nil
}

// serveMetrics serves /metrics (otelsetup.MetricsHandler: this process's
// instruments, the Go runtime's and the process's) on addr until stop,
// which shuts the server down and waits for it.
func serveMetrics(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", otelsetup.MetricsHandler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
	}, nil
}

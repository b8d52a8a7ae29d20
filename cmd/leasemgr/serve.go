package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/candidacy"
	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/httpapi"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/metrics/leasemetrics"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/otelsetup"
)

// runSetup: leasemgr [run] takes no flags but -h.
func runSetup(cmd *cobra.Command) action {
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("run takes no arguments, got %q", args)}
		}
		return runManager(ctx, stdout, stderr)
	}
}

// runManager serves this node's pools until ctx is done.
func runManager(ctx context.Context, stdout, stderr io.Writer) error {
	cfg, err := config.LoadManager()
	if err != nil {
		return usageError{fmt.Errorf("configuration:\n%w", err)}
	}
	embedded := cfg.NATSURL == ""
	if !embedded {
		// Another node's embedded server on this host: its manager role.
		if embedded, err = cfg.UseEmbeddedCreds(config.RoleManager); err != nil {
			return usageError{fmt.Errorf("configuration:\n%w", err)}
		}
	}
	log := cfg.Logger(stderr)
	for _, n := range cfg.Notes {
		log.Info(n)
	}
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}

	shutdownTelemetry, err := otelsetup.Setup(ctx, "leasemgr")
	if err != nil {
		return usageError{fmt.Errorf("configuration:\n%w", err)}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTelemetry(sctx); err != nil {
			log.Warn("flushing telemetry", "err", err)
		}
	}()
	metrics, err := leasemetrics.New(telemetry.Meter())
	if err != nil {
		return err
	}
	defer metrics.Close()

	url := cfg.NATSURL
	jobsAuth := configJobsAdmin(cfg) // the job queue's administrator, if any
	if url == "" {
		srv, jobs, err := startEmbedded(cfg, log)
		if err != nil {
			return err
		}
		jobsAuth = &jobsAdmin{opts: []nats.Option{jobs}}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = srv.ClientURL()
		log.Info("embedded NATS server with JetStream", "url", url, "store", cfg.NATSStoreDir, "credentials", cfg.NATSAuthDir)
	}
	ns, err := setUp(ctx, cfg, url, jobsAuth, log)
	if err != nil {
		if ctx.Err() != nil {
			log.Info("shut down during NATS set-up")
			return nil
		}
		return err
	}
	nc, store, leaders, poolStore := ns.nc, ns.store, ns.leaders, ns.poolStore
	defer nc.Close()
	instance := nuid.Next()
	mcfg := manager.Config{
		Node: cfg.NodeID, Prefix: cfg.SubjectPrefix, Pools: poolConfigs(cfg, cfg.Pools), TTL: cfg.LeaseTTL, Instance: instance,
		Conn: nc, Store: store, PoolStore: poolStore, Events: metrics.Sink(jetstream.NewEvents(nc, cfg.SubjectPrefix, log)), Logger: log,
		GrantLatency:  func(pool string, d time.Duration) { metrics.ObserveGrantLatency(cfg.NodeID, pool, d) },
		ReplyPrefixes: replyPrefixes(&cfg.Common, cfg.ReplyPrefixes, embedded), ReplyRefused: metrics.ReplyRefusals(cfg.NodeID),
		RecordRefused:    metrics.RecordsRefused(cfg.NodeID),
		SecretRefused:    metrics.SecretsRefused(cfg.NodeID),
		DisconnectEvents: disconnectEvents(cfg, embedded), DisconnectGrace: cfg.DisconnectGrace,
		// Its own embedded server stops with it: a clean stop says so, and
		// holders do not count that server's going against their leases.
		EmbeddedServer:   cfg.NATSURL == "",
		MaxQueuedPerConn: cfg.MaxQueuedPerConnection, MaxQueuedPerCredential: cfg.MaxQueuedPerCredential,
	}
	if err := mcfg.Validate(); err != nil { // before standing by
		return err
	}
	var cluster clusterState
	mcfg.ClusterPools = cluster.Pools
	clusterCfg := clusterConfig(cfg, mcfg, metrics, &cluster)
	if len(cfg.ClusterPools) > 0 {
		if err := clusterCfg.Validate(); err != nil {
			return err
		}
	}

	var active atomic.Pointer[manager.Manager] // nil while standing by
	metrics.SetPoolSource(cfg.NodeID, func() []lease.PoolStats {
		if m := active.Load(); m != nil {
			return m.Stats()
		}
		return nil // standing by: this process reports no pools
	})
	// The job queue: executors make no consumer and store no outcome
	// themselves, they ask its broker (jobs/broker.go), which runs on the
	// administrator's connection, now or once it is admitted.
	var jq jobQueue
	defer jq.close()
	refused := metrics.JobRecordsRefused(cfg.NodeID)
	switch {
	case ns.jobs != nil:
		if err := jq.start(ctx, nc, ns.jobs, cfg, log, refused); err != nil {
			ns.jobs.Close()
			return err
		}
	case ns.jobsRefused != nil:
		jq.connectLater(ctx, url, jobsAuth, nc, cfg, log, refused)
	case jobsAuth == nil:
		jq.bindLater(ctx, nc, cfg, log, refused)
	}
	jobMetrics, err := startJobMetrics(func() *nats.Conn {
		if c := jq.conn.Load(); c != nil {
			return c
		}
		return nc // on a real NATS: the job queue, if the managers' account holds it
	}, cfg.SubjectPrefix, cfg.NodeID, &active)
	if err != nil {
		return err
	}
	defer jobMetrics.Close()
	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
		}
		opts := []httpapi.SourceOption{httpapi.WithWarnings(cluster.Warnings),
			httpapi.WithLocalCluster(cluster.active.Load, cfg.NodeID)}
		// The cluster page's events from before it opened:
		if cfg.EventRetention > 0 {
			opts = append(opts, httpapi.WithEventStream(jetstream.NamesFor(cfg.SubjectPrefix).Events))
		}
		src, err := httpapi.NewNATSSource(nc, cfg.SubjectPrefix, cfg.NodeID, active.Load, opts...)
		if err != nil {
			return err
		}
		api, err := httpapi.New(src, httpapi.WithLogger(log), httpapi.WithMetrics(otelsetup.MetricsHandler()))
		if err != nil {
			return err
		}
		// Bounded: at most DefaultMaxConns connections (and
		// DefaultMaxStreams event streams) at once, idle keep-alive
		// connections closed after a minute, so no client can take the
		// descriptors the embedded NATS server needs.
		ln = httpapi.LimitListener(ln, httpapi.DefaultMaxConns)
		hs := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
		hs.RegisterOnShutdown(api.Close) // ends open event streams so Shutdown does not wait on browsers
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
		}()
		log.Info("http", "addr", ln.Addr().String())
	}

	var candidate sync.WaitGroup // the cluster pools' candidate, if any: stopped before return
	defer candidate.Wait()
	cctx, stopCluster := context.WithCancel(ctx)
	defer stopCluster()
	if len(cfg.ClusterPools) > 0 {
		candidate.Go(func() {
			runClusterCandidate(cctx, cfg, clusterCfg, leaders, metrics, &cluster, log.With("role", "cluster pools"))
		})
	} else {
		// Not a candidate: still learn which cluster pools there are, for
		// the stats replies (manager.Config.ClusterPools).
		candidate.Go(func() {
			_ = candidacy.Watch(cctx, candidacy.Config{Store: leaders, Cluster: lease.ClusterNode, Logger: log,
				OnPools: cluster.setPools, Refused: mcfg.RecordRefused})
		})
	}

	err = leadNode(ctx, cfg, mcfg, leaders, &active, log)
	log.Info("shut down")
	return err
}

// leadNode stands by for mcfg.Node's leadership and serves each term won
// as its active manager, fenced by it, until ctx ends. active holds the
// manager while it serves.
func leadNode(ctx context.Context, cfg *config.Manager, mcfg manager.Config, leaders manager.Store, active *atomic.Pointer[manager.Manager], log *slog.Logger) error {
	serve := func(ctx context.Context, fence manager.Fence) error {
		mc := mcfg
		mc.Fence = fence
		m, err := manager.New(mc)
		if err != nil {
			return err
		}
		return m.Run(ctx, func(serving bool) {
			if !serving {
				active.Store(nil)
				return
			}
			for _, p := range mcfg.Pools {
				log.Info("pool", "name", p.Name, "capacity", p.Capacity)
			}
			active.Store(m)
		})
	}
	return manager.RunLeader(ctx, manager.LeaderConfig{Store: leaders, Node: mcfg.Node, Instance: mcfg.Instance, TTL: cfg.LeaderTTL, Logger: log,
		Refused: mcfg.RecordRefused}, serve)
}

// poolConfigs turns configured pools into the manager's, with the queue
// policy settings.
func poolConfigs(cfg *config.Manager, ps []config.Pool) []manager.PoolConfig {
	out := make([]manager.PoolConfig, 0, len(ps))
	for _, p := range ps {
		out = append(out, manager.PoolConfig{Name: p.Name, Capacity: p.Capacity, Options: pools.Options{
			Policy: pools.Policy(p.Policy), MaxQueue: p.MaxQueue, FailFast: p.FailFast, OnFull: pools.OnFull(p.OnFull),
			TenantCap: p.TenantCap, AgingStep: cfg.PriorityAging,
			Weights: cfg.TenantWeights, DefaultWeight: cfg.TenantDefaultWeight, Rate: p.Rate, Burst: p.Burst, Budget: p.Budget,
			KeyCap: p.KeyLimit, Quantum: p.Quantum, StarvationAge: p.StarvationAge, Shadow: p.Shadow,
		}})
	}
	return out
}

// disconnectEvents is the subject of the disconnect advisories that turn
// fast release on: DISCONNECT_EVENTS, else the embedded server's, which
// exports them to the manager; with NATS_URL only what the operator set.
func disconnectEvents(cfg *config.Manager, embedded bool) string {
	switch {
	case cfg.DisconnectEventsOff:
		return ""
	case cfg.DisconnectEvents != "":
		return cfg.DisconnectEvents
	case embedded:
		return jetstream.ExecutorDisconnectSubject
	}
	return ""
}

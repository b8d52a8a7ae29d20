package jetstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterServerConfig configures one server of a JetStream cluster. Every
// server of the cluster lists the same Routes (its own address may be among
// them: a server ignores a route to itself).
type ClusterServerConfig struct {
	ServerConfig // client address, store, limits, name (must be unique in the cluster)
	// Cluster is the cluster name, the same on every server.
	Cluster string
	// ClusterListen is host:port for routes. It must be a fixed port: the
	// other servers dial it, also after this server restarts.
	ClusterListen string
	// Routes are the ClusterListen addresses (host:port) of all servers.
	Routes []string
	// NoAdvertise keeps the server from telling clients about the other
	// servers' client addresses, so clients that reach it through a proxy
	// stay behind that proxy when they reconnect.
	NoAdvertise bool
}

// StartClusterServer starts one embedded server of a JetStream cluster and
// waits until it accepts client connections. JetStream is usable only once
// a majority of the cluster runs and a meta leader is elected: see
// WaitJetStreamCluster. Stop it with StopLameDuck (lameduck.go: a planned
// stop, as in a rolling restart) or Shutdown and WaitForShutdown.
func StartClusterServer(cfg ClusterServerConfig) (*server.Server, error) {
	if cfg.Name == "" || cfg.Cluster == "" {
		return nil, errors.New("jetstream: cluster server needs a server name and a cluster name")
	}
	opts, err := serverOptions(cfg.ServerConfig)
	if err != nil {
		return nil, err
	}
	chost, cport, err := splitHostPort(cfg.ClusterListen)
	if err != nil {
		return nil, err
	}
	if cport <= 0 {
		return nil, fmt.Errorf("jetstream: cluster address %q: needs a fixed port", cfg.ClusterListen)
	}
	for _, r := range cfg.Routes {
		opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats-route", Host: r})
	}
	opts.Cluster = server.ClusterOpts{Name: cfg.Cluster, Host: chost, Port: cport, NoAdvertise: cfg.NoAdvertise}
	setLameDuck(opts) // lameduck.go
	return startServer(opts, cfg.Debug, fmt.Sprintf("cluster server %s on %s / %s", cfg.Name, cfg.Listen, cfg.ClusterListen))
}

// WaitJetStreamCluster waits until every given server sees a JetStream meta
// leader and is current with it, so streams and KV buckets can be created.
func WaitJetStreamCluster(ctx context.Context, servers ...*server.Server) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ready, leader := true, false
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				leader = true
			}
			if !s.JetStreamIsCurrent() {
				ready = false
			}
		}
		if ready && leader {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("jetstream: cluster has no meta leader yet: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

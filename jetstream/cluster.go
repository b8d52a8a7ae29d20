package jetstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
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
// WaitJetStreamCluster. Stop it with Shutdown and WaitForShutdown.
func StartClusterServer(cfg ClusterServerConfig) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("jetstream: cluster server needs a store directory")
	}
	if cfg.Name == "" || cfg.Cluster == "" {
		return nil, errors.New("jetstream: cluster server needs a server name and a cluster name")
	}
	host, port, err := splitHostPort(cfg.Listen)
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
	routes := make([]*url.URL, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: r})
	}
	if cfg.MaxMemory == 0 {
		cfg.MaxMemory = 256 << 20
	}
	if cfg.MaxStore == 0 {
		cfg.MaxStore = 10 << 30
	}
	opts := &server.Options{
		ServerName:         cfg.Name,
		Host:               host,
		Port:               port,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		JetStreamMaxMemory: cfg.MaxMemory,
		JetStreamMaxStore:  cfg.MaxStore,
		NoSigs:             true,
		NoLog:              !cfg.Debug,
		Cluster: server.ClusterOpts{
			Name:        cfg.Cluster,
			Host:        chost,
			Port:        cport,
			NoAdvertise: cfg.NoAdvertise,
		},
		Routes: routes,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("jetstream: cluster server %s: %w", cfg.Name, err)
	}
	if cfg.Debug {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("jetstream: cluster server %s on %s / %s did not become ready (is a port in use?)", cfg.Name, cfg.Listen, cfg.ClusterListen)
	}
	return s, nil
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

func splitHostPort(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("jetstream: address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", 0, fmt.Errorf("jetstream: address %q: port is not a number", addr)
	}
	return host, port, nil
}

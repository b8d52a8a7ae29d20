package jetstream

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/slotlease/slotlease/lease"
)

// ServerConfig configures an embedded nats-server.
type ServerConfig struct {
	// Listen is host:port for clients; port -1 picks a free one (tests).
	Listen   string
	StoreDir string // JetStream's file store; required
	// MaxMemory caps JetStream memory storage. The server's own default is
	// 75% of RAM, far too much for a sidecar; 256 MiB if zero.
	MaxMemory int64
	// MaxStore caps JetStream file storage; 10 GiB if zero.
	MaxStore int64
	// MaxConnections caps the server's client connections, all accounts
	// and clients not yet admitted together; the NATS server's default
	// (65536) if zero. leasemgr derives it from its descriptor limit
	// (ConnectionLimits).
	MaxConnections int
	// Limits bound the executors' and readers' accounts of a server with
	// Users (limits.go); config's defaults where zero. The executors'
	// store cap must be below MaxStore, and with MaxConnections set, the
	// connection caps must leave ManagerConnections of it.
	Limits AccountLimits
	Name   string // server name, shown in monitoring; "leasemgr" if empty
	// Debug logs the server's own messages to stderr.
	Debug bool
	// Users are the only clients the server admits (EmbeddedUsers), each
	// in its role's account, beside a system account (accounts.go).
	// Without users the server refuses to start unless Anonymous is set.
	Users []User
	// Prefix is the subject prefix whose lease services and events the
	// accounts of Users share; lease.DefaultPrefix if empty.
	Prefix string
	// Anonymous admits every client without credentials, as a user with
	// every right in ManagerAccount (beside the system account, so the
	// disconnect advisories of fast release flow as on a server with
	// users): anyone who reaches the port can read and write everything.
	// Only for tests that need no authentication.
	Anonymous bool
}

// StartServer starts an embedded nats-server with JetStream and waits until
// it accepts connections. Stop it with Shutdown and WaitForShutdown.
func StartServer(cfg ServerConfig) (*server.Server, error) {
	if cfg.Name == "" {
		cfg.Name = "leasemgr"
	}
	opts, err := serverOptions(cfg)
	if err != nil {
		return nil, err
	}
	return startServer(opts, cfg.Debug, "embedded server on "+cfg.Listen)
}

// serverOptions are the options every embedded server shares: client
// address, JetStream with a file store, explicit memory and store limits.
func serverOptions(cfg ServerConfig) (*server.Options, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("jetstream: embedded server needs a store directory")
	}
	host, port, err := splitHostPort(cfg.Listen)
	if err != nil {
		return nil, err
	}
	if cfg.MaxMemory == 0 {
		cfg.MaxMemory = 256 << 20
	}
	if cfg.MaxStore == 0 {
		cfg.MaxStore = 10 << 30
	}
	opts := &server.Options{}
	switch {
	case len(cfg.Users) > 0 && cfg.Anonymous:
		return nil, errors.New("jetstream: embedded server: users and anonymous access exclude each other")
	case len(cfg.Users) > 0:
		if cfg.Prefix == "" {
			cfg.Prefix = lease.DefaultPrefix
		}
		limits := cfg.Limits.withDefaults()
		if err := limits.check(cfg.MaxStore, cfg.MaxConnections); err != nil {
			return nil, err
		}
		conf, err := authConfig(cfg.Users, cfg.Prefix, limits)
		if err != nil {
			return nil, err
		}
		if err := opts.ProcessConfigString(conf); err != nil {
			return nil, fmt.Errorf("jetstream: embedded server users: %w", err)
		}
	case !cfg.Anonymous:
		return nil, errors.New("jetstream: embedded server needs users (or Anonymous, for tests)")
	default:
		conf, err := authConfig(nil, "", AccountLimits{})
		if err != nil {
			return nil, err
		}
		if err := opts.ProcessConfigString(conf); err != nil {
			return nil, fmt.Errorf("jetstream: embedded server: %w", err)
		}
	}
	opts.ServerName, opts.Host, opts.Port = cfg.Name, host, port
	opts.JetStream, opts.StoreDir = true, cfg.StoreDir
	opts.JetStreamMaxMemory, opts.JetStreamMaxStore = cfg.MaxMemory, cfg.MaxStore
	opts.MaxConn = cfg.MaxConnections // 0: the server's default
	opts.NoSigs, opts.NoLog = true, !cfg.Debug
	return opts, nil
}

// startServer starts a server and waits until it accepts connections.
func startServer(opts *server.Options, debug bool, what string) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %s: %w", what, err)
	}
	if debug {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("jetstream: %s did not become ready (is a port in use?)", what)
	}
	return s, nil
}

// splitHostPort parses host:port with a numeric port (-1 picks a free one).
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

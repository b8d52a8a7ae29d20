// Package harness starts real NATS servers and lease managers for tests and
// benchmarks: an embedded nats-server with JetStream on a free port and a
// store in a temporary directory, never a fake.
package harness

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
)

// Server is an embedded nats-server for one test.
type Server struct {
	*server.Server
	URL      string
	StoreDir string
}

// StartServer starts a server that lives until the test ends.
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	dir := tb.TempDir()
	return StartServerAt(tb, "127.0.0.1:-1", dir)
}

// StartServerAt starts a server on listen with its store in dir, so a test
// can stop it and start it again on the same address and store.
func StartServerAt(tb testing.TB, listen, dir string) *Server {
	tb.Helper()
	s, err := jetstream.StartServer(jetstream.ServerConfig{Listen: listen, StoreDir: filepath.Join(dir, "jetstream"), Anonymous: true})
	if err != nil {
		tb.Fatalf("start nats-server: %v", err)
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &Server{Server: s, URL: s.ClientURL(), StoreDir: dir}
}

// Connect opens a connection closed at the end of the test.
func Connect(tb testing.TB, url string) *nats.Conn {
	tb.Helper()
	nc, err := natsconn.Connect(url, natsconn.Auth{}, tb.Name())
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// ConnectAuth opens a connection with auth and extra options (an
// ErrorHandler that records permission violations, say), closed at the end
// of the test. Connect is ConnectAuth with neither.
func ConnectAuth(tb testing.TB, url string, auth natsconn.Auth, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := natsconn.Connect(url, auth, tb.Name(), opts...)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// StartManagerConn is StartManager on a connection the caller made, e.g.
// with ConnectAuth as a user with restricted permissions. It opens the
// prefix's lease and pool buckets on nc.
func StartManagerConn(tb testing.TB, nc *nats.Conn, cfg manager.Config, wrap ...func(manager.Store) manager.Store) *Node {
	tb.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = lease.DefaultPrefix
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := jetstream.OpenLeaseStore(ctx, nc, jetstream.BucketConfig{Name: jetstream.NamesFor(cfg.Prefix).Leases})
	if err != nil {
		tb.Fatalf("%v", err)
	}
	if cfg.PoolStore == nil {
		ps, err := jetstream.OpenLeaseStore(ctx, nc, jetstream.BucketConfig{Name: jetstream.NamesFor(cfg.Prefix).Pools})
		if err != nil {
			tb.Fatalf("%v", err)
		}
		cfg.PoolStore = ps
	}
	cfg.Conn, cfg.Store = nc, store
	for _, w := range wrap {
		cfg.Store = w(cfg.Store)
	}
	if cfg.Events == nil {
		cfg.Events = jetstream.NewEvents(nc, cfg.Prefix, nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = Logger()
	}
	m, err := manager.New(cfg)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	if err := m.Start(ctx); err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() { _ = m.Close() })
	return &Node{Manager: m, Conn: nc, Store: store, Config: cfg}
}

// RunManagerConn is StartManagerConn with the manager run by Run, as
// leasemgr runs it: stop cancels Run's context (a clean stop, with its
// notice to the holders) and waits for Run to return. The test's cleanup
// stops it too.
func RunManagerConn(tb testing.TB, nc *nats.Conn, cfg manager.Config) (n *Node, stop func() error) {
	tb.Helper()
	n = StartManagerConn(tb, nc, cfg)
	_ = n.Manager.Close() // StartManagerConn started one: Run starts its own
	m, err := manager.New(n.Config)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	n.Manager = m
	ctx, cancel := context.WithCancel(context.Background())
	serving := make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		ran <- m.Run(ctx, func(on bool) {
			if on {
				close(serving)
			}
		})
	}()
	select {
	case <-serving:
	case err := <-ran:
		cancel()
		tb.Fatalf("manager: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		tb.Fatal("manager did not serve within 10s")
	}
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-ran
		})
		return runErr
	}
	tb.Cleanup(func() { _ = stop() })
	return n, stop
}

// Node is a running lease manager with its own connection.
type Node struct {
	Manager *manager.Manager
	Conn    *nats.Conn
	Store   *jetstream.LeaseStore
	Config  manager.Config
}

// Logger is quiet unless LEASE_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("LEASE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(discard{}, nil))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// StartManager starts a lease manager for node on url. cfg.Node, Pools and
// TTL come from the caller; Conn, Store and Events are filled in. It is
// closed at the end of the test unless the test closes it first. wrap, if
// given, wraps the real store (to slow or fail calls on purpose).
func StartManager(tb testing.TB, url string, cfg manager.Config, wrap ...func(manager.Store) manager.Store) *Node {
	tb.Helper()
	return StartManagerConn(tb, Connect(tb, url), cfg, wrap...)
}

// StartManagerStore opens the default prefix's lease store on its own
// connection, to look at what managers stored.
func StartManagerStore(tb testing.TB, url string) *jetstream.LeaseStore {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := jetstream.OpenLeaseStore(ctx, Connect(tb, url), jetstream.BucketConfig{Name: jetstream.NamesFor(lease.DefaultPrefix).Leases})
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return store
}

// Client returns a lease client for node with its own connection. Its
// spans go to the global tracer provider (RecordSpans installs one), as
// the executor's do.
func Client(tb testing.TB, url, node string, opts ...lease.ClientOption) *lease.Client {
	tb.Helper()
	opts = append([]lease.ClientOption{lease.WithTracing(otel.GetTracerProvider(), otel.GetTextMapPropagator())}, opts...)
	c, err := lease.NewClient(Connect(tb, url), node, opts...)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Eventually polls cond until it holds or timeout passes.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SecureServer is an embedded server set up as leasemgr sets up its own:
// nkey users for the manager, executor and reader roles, each in its
// account (jetstream/accounts.go), the in-memory administrator of the
// executors' account (jetstream.NewJobsAdmin), a system account, and the
// executors' disconnect advisories exported to the manager (fast release).
type SecureServer struct {
	*server.Server
	URL     string
	AuthDir string
	jobs    nats.Option
}

// StartSecureServer starts a SecureServer that lives until the test ends.
func StartSecureServer(tb testing.TB) *SecureServer {
	tb.Helper()
	dir := tb.TempDir()
	authDir := filepath.Join(dir, "auth")
	keys, err := jetstream.EnsureCredentials(authDir)
	if err != nil {
		tb.Fatal(err)
	}
	admin, jobs, err := jetstream.NewJobsAdmin()
	if err != nil {
		tb.Fatal(err)
	}
	s, err := jetstream.StartServer(jetstream.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(dir, "jetstream"),
		Users: append(jetstream.EmbeddedUsers(keys, lease.DefaultPrefix), admin)})
	if err != nil {
		tb.Fatalf("start nats-server: %v", err)
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &SecureServer{Server: s, URL: s.ClientURL(), AuthDir: authDir, jobs: jobs}
}

// ConnectJobsAdmin opens a connection as the executors' account's
// administrator, as leasemgr does to make the job queue, closed at the end
// of the test.
func (s *SecureServer) ConnectJobsAdmin(tb testing.TB, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	return ConnectAuth(tb, s.URL, natsconn.Auth{}, append([]nats.Option{s.jobs}, opts...)...)
}

// Connect opens a connection with role's credentials, closed at the end of
// the test.
func (s *SecureServer) Connect(tb testing.TB, role config.Role, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	return ConnectAuth(tb, s.URL, natsconn.Auth{NKeySeed: config.AuthFile(s.AuthDir, role), InboxPrefix: role.InboxPrefix()}, opts...)
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	slconfig "github.com/slotlease/slotlease/config"
	sljs "github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
)

// clientsPerConn is how many benchmark clients share one NATS connection,
// as the goroutines of one executor process would.
const clientsPerConn = 8

// recordTTL is the TTL of every KV record the benchmark writes: the
// manager's default lease TTL, long enough that nothing expires mid-run.
const recordTTL = 15 * time.Second

// env is one embedded nats-server with JetStream on a loopback port and a
// store in a fresh temporary directory. Every scenario gets its own and
// shuts it down at the end, so nothing one scenario wrote (streams, markers
// waiting to expire, buffers) is still being worked on in the next.
type env struct {
	srv   *server.Server
	url   string
	dir   string
	conns []*nats.Conn
	// mgr and client are how the manager and the clients connect: both
	// anonymous in one account, or, with accounts, as leasemgr's embedded
	// server admits them (manager and executor roles, each in its account).
	mgr, client natsconn.Auth
}

func startEnv() (*env, error) { return startEnvWith(false) }

// startEnvWith starts the server anonymous (one account), or with the
// embedded server's accounts: the clients' requests then cross a service
// import into the managers' account, as in the product's default layout.
func startEnvWith(accounts bool) (*env, error) {
	dir, err := os.MkdirTemp("", "slotlease-bench-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir}
	sc := sljs.ServerConfig{Listen: "127.0.0.1:-1", StoreDir: filepath.Join(dir, "jetstream"), Anonymous: !accounts}
	if accounts {
		auth := filepath.Join(dir, "auth")
		keys, err := sljs.EnsureCredentials(auth)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		sc.Users = sljs.EmbeddedUsers(keys, lease.DefaultPrefix)
		role := func(r slconfig.Role) natsconn.Auth {
			return natsconn.Auth{NKeySeed: slconfig.AuthFile(auth, r), InboxPrefix: r.InboxPrefix()}
		}
		e.mgr, e.client = role(slconfig.RoleManager), role(slconfig.RoleExecutor)
	}
	srv, err := sljs.StartServer(sc)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	e.srv, e.url = srv, srv.ClientURL()
	return e, nil
}

func (e *env) close() {
	for _, nc := range e.conns {
		nc.Close()
	}
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	_ = os.RemoveAll(e.dir)
}

// msgs returns how many messages the server has taken in from clients and
// delivered to them, so far.
func (e *env) msgs() int64 {
	v, err := e.srv.Varz(nil)
	if err != nil {
		return 0
	}
	return v.InMsgs + v.OutMsgs
}

// connect opens a client connection closed with the env.
func (e *env) connect(name string) (*nats.Conn, error) { return e.connectAs(name, e.client) }

// connectAs opens a connection with auth, closed with the env.
func (e *env) connectAs(name string, auth natsconn.Auth) (*nats.Conn, error) {
	nc, err := natsconn.Connect(e.url, auth, name)
	if err != nil {
		return nil, err
	}
	e.conns = append(e.conns, nc)
	return nc, nil
}

// clientConns opens one connection per clientsPerConn clients; client i
// uses conns[i/clientsPerConn].
func (e *env) clientConns(clients int) ([]*nats.Conn, error) {
	out := make([]*nats.Conn, (clients+clientsPerConn-1)/clientsPerConn)
	for i := range out {
		nc, err := e.connect(fmt.Sprintf("bench-client-%d", i))
		if err != nil {
			return nil, err
		}
		out[i] = nc
	}
	return out, nil
}

// bucket creates a KV bucket configured like the product's lease bucket:
// one revision per key, file storage, per-key TTLs enabled.
func bucket(ctx context.Context, nc *nats.Conn, name string) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         name,
		History:        1,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: sljs.MarkerTTL,
	})
}

// node is a real lease manager started the way harness.StartManager starts
// one: its own connection, the jetstream LeaseStore and Events.
type node struct {
	m     *manager.Manager
	nc    *nats.Conn
	store *sljs.LeaseStore // nil when managerParts replaced it
}

const benchNode = "bench"

func (e *env) startManager(ctx context.Context, ttl time.Duration, pools ...manager.PoolConfig) (*node, error) {
	return e.startManagerWith(ctx, ttl, managerParts{}, pools...)
}

// managerParts replaces parts of a benchmark manager; a nil field keeps
// the product's own (the jetstream LeaseStore and Events on the manager's
// connection).
type managerParts struct {
	events manager.EventSink
	store  manager.Store
	// accounts runs the scenario on the embedded server's accounts layout.
	accounts bool
	// acked hides the product store's EchoWriter (ackedStore).
	acked bool
}

// ackedStore is a Store without the EchoWriter methods: the manager waits
// for each write's acknowledgement instead of its echo on the watch.
type ackedStore struct{ manager.Store }

// startManagerWith starts a manager with parts in place of the product's.
func (e *env) startManagerWith(ctx context.Context, ttl time.Duration, parts managerParts, pools ...manager.PoolConfig) (*node, error) {
	nc, err := e.connectAs("bench-manager", e.mgr)
	if err != nil {
		return nil, err
	}
	n := &node{nc: nc}
	store := parts.store
	if store == nil {
		if n.store, err = sljs.OpenLeaseStore(ctx, nc, sljs.BucketConfig{Name: sljs.NamesFor(lease.DefaultPrefix).Leases}); err != nil {
			return nil, err
		}
		store = n.store
		if parts.acked {
			store = ackedStore{n.store}
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	events := parts.events
	if events == nil {
		events = sljs.NewEvents(nc, lease.DefaultPrefix, quiet)
	}
	n.m, err = manager.New(manager.Config{
		Node:   benchNode,
		Prefix: lease.DefaultPrefix,
		Pools:  pools,
		TTL:    ttl,
		Conn:   nc,
		Store:  store,
		Events: events,
		Logger: quiet,
	})
	if err != nil {
		return nil, err
	}
	if err := n.m.Start(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// runFor runs n workers until the scenario's duration has passed. Each
// worker gets its index and a stop flag to check between operations; it
// finishes the operation in hand and returns. run returns the time from
// the start to the last worker's return, and the CPU time (user and
// system) the whole process spent meanwhile: server, manager and clients
// share it, so it is what one cycle costs the machine.
func runFor(d time.Duration, n int, worker func(i int, stop *atomic.Bool)) (elapsed, cpu time.Duration) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			worker(i, &stop)
		})
	}
	c0 := processCPU()
	t0 := time.Now()
	close(start)
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	wg.Wait()
	timer.Stop()
	return time.Since(t0), processCPU() - c0
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

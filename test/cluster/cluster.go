// Package cluster runs slotlease on a real 3-node NATS JetStream cluster in
// one process: the cluster itself (embedded servers that can be killed and
// restarted on the same ports and stores), TCP proxies that cut or
// blackhole single connections, lease-manager candidates and executors, an
// auditor that checks lease safety from the outside, the randomized fault
// suite and the scale run. docs/guarantees.md states what the suite checks.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/test/harness"
)

// Cluster is a JetStream cluster of embedded servers on 127.0.0.1. Each
// server keeps its client and route ports and its store across a kill and a
// restart, as a real server on a fixed host would.
type Cluster struct {
	Name string

	// authDir holds the roles' nkey seeds; "" on an Anonymous cluster.
	authDir string
	// jobsAdmin authenticates the executors' account's administrator.
	jobsAdmin nats.Option

	mu      sync.Mutex
	members []*member
}

type member struct {
	cfg jetstream.ClusterServerConfig
	srv *server.Server // nil while killed
}

// ClusterConfig configures StartCluster.
type ClusterConfig struct {
	Size  int    // servers; 3 if zero
	Dir   string // each server stores under Dir/<name>; required
	Name  string // cluster name; "slotlease" if empty
	Debug bool   // server logs to stderr
	// ClientPorts, if set, fixes the client ports (one per server); 0 or
	// nil picks free ports.
	ClientPorts []int
	// Anonymous admits every client into one account with every right.
	// Otherwise the servers run the accounts layout of docs/security.md
	// and the embedded server (jetstream/accounts.go): managers, executors
	// and readers in accounts of their own, each role with an nkey seed
	// under Dir/auth (Auth, Env).
	Anonymous bool
}

// StartCluster starts the servers and waits until JetStream has a meta
// leader that every server is current with.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Size == 0 {
		cfg.Size = 3
	}
	if cfg.Name == "" {
		cfg.Name = "slotlease"
	}
	if cfg.Dir == "" {
		return nil, errors.New("cluster: a store directory is required")
	}
	var lastErr error
	// A free port picked now can be taken by someone else before the
	// server binds it; try again with fresh ports.
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startCluster(ctx, cfg)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	routePorts, err := freePorts(cfg.Size)
	if err != nil {
		return nil, err
	}
	clientPorts := make([]int, cfg.Size)
	copy(clientPorts, cfg.ClientPorts)
	free, err := freePorts(cfg.Size)
	if err != nil {
		return nil, err
	}
	for i := range clientPorts {
		if clientPorts[i] == 0 {
			clientPorts[i] = free[i]
		}
	}
	routes := make([]string, cfg.Size)
	for i, p := range routePorts {
		routes[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	c := &Cluster{Name: cfg.Name}
	var users []jetstream.User
	if !cfg.Anonymous {
		c.authDir = filepath.Join(cfg.Dir, "auth")
		keys, err := jetstream.EnsureCredentials(c.authDir)
		if err != nil {
			return nil, err
		}
		admin, opt, err := jetstream.NewJobsAdmin()
		if err != nil {
			return nil, err
		}
		users, c.jobsAdmin = append(jetstream.EmbeddedUsers(keys, lease.DefaultPrefix), admin), opt
	}
	for i := range cfg.Size {
		name := fmt.Sprintf("n%d", i)
		c.members = append(c.members, &member{cfg: jetstream.ClusterServerConfig{
			ServerConfig: jetstream.ServerConfig{
				Listen:    "127.0.0.1:" + strconv.Itoa(clientPorts[i]),
				StoreDir:  filepath.Join(cfg.Dir, name),
				Name:      name,
				MaxMemory: 64 << 20,
				MaxStore:  1 << 30,
				// The executors' account counts every replica: room for an
				// R3 job queue of 64 MiB (bounce_test.go), 3 x 112 MiB.
				Limits:    jetstream.AccountLimits{ExecutorStore: 512 << 20},
				Debug:     cfg.Debug,
				Users:     users,
				Anonymous: cfg.Anonymous,
			},
			Cluster:       cfg.Name,
			ClusterListen: routes[i],
			Routes:        routes,
			NoAdvertise:   true,
		}})
	}
	for i := range c.members {
		if err := c.start(i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(i int) error {
	m := c.members[i]
	s, err := jetstream.StartClusterServer(m.cfg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	m.srv = s
	c.mu.Unlock()
	return nil
}

// Auth is how a client of role connects: the role's seed and inbox
// prefix; the zero Auth (anonymous) on an Anonymous cluster.
func (c *Cluster) Auth(r config.Role) natsconn.Auth {
	if c.authDir == "" {
		return natsconn.Auth{}
	}
	return natsconn.Auth{NKeySeed: config.AuthFile(c.authDir, r), InboxPrefix: r.InboxPrefix()}
}

// JobsAdmin is the option that connects as the executors' account's
// administrator (jetstream.NewJobsAdmin), which makes the job queue; nil on
// an Anonymous cluster.
func (c *Cluster) JobsAdmin() nats.Option { return c.jobsAdmin }

// Env is what a binary of role needs in its environment to connect.
func (c *Cluster) Env(r config.Role) []string {
	a := c.Auth(r)
	if a.NKeySeed == "" {
		return nil
	}
	return []string{config.EnvNATSNKey + "=" + a.NKeySeed, config.EnvNATSInboxPrefix + "=" + a.InboxPrefix}
}

// DisconnectSubject is where the managers hear that an executor's
// connection closed (fast release).
func (c *Cluster) DisconnectSubject() string {
	if c.authDir == "" {
		return jetstream.AnonymousDisconnectSubject
	}
	return jetstream.ExecutorDisconnectSubject
}

// Size returns the number of servers.
func (c *Cluster) Size() int { return len(c.members) }

// Kill shuts server i down as SIGTERM does (Shutdown): nats-server steps
// the raft groups it leads down on the way, so this is a clean stop of the
// process, not a power cut.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	s := c.members[i].srv
	c.members[i].srv = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Stop stops server i the way a rolling restart does (docs/guarantees.md,
// "Rolling restart of a cluster"): lame duck mode, as SIGUSR2 does to a
// nats-server process (jetstream.StopLameDuck). It hands the raft groups
// the server leads to other replicas before it stops JetStream, then
// closes its clients one at a time; it returns once the server stopped.
// The server counts as down from the start: no proxy dials it (its
// listener is closed) and the cluster's health no longer waits for it.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.members[i].srv
	c.members[i].srv = nil
	c.mu.Unlock()
	if s != nil {
		jetstream.StopLameDuck(s)
	}
}

// Restart starts server i again on the same ports and store. It does not
// wait for JetStream to catch up: see WaitHealthy.
func (c *Cluster) Restart(i int) error {
	c.mu.Lock()
	up := c.members[i].srv != nil
	c.mu.Unlock()
	if up {
		return fmt.Errorf("cluster: server %d is running", i)
	}
	var err error
	// The old listener's port may take a moment to be free again.
	for attempt := 0; attempt < 50; attempt++ {
		if err = c.start(i); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Up reports whether server i runs.
func (c *Cluster) Up(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].srv != nil
}

// Server returns server i, nil while it is killed.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].srv
}

// ClientAddr returns server i's client address, host:port, also while it
// is killed.
func (c *Cluster) ClientAddr(i int) string { return c.members[i].cfg.Listen }

// LiveAddrs returns the client addresses of the running servers, starting
// with server first (mod the size), so callers can spread connections.
func (c *Cluster) LiveAddrs(first int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.members {
		m := c.members[(first+k)%len(c.members)]
		if m.srv != nil {
			out = append(out, m.cfg.Listen)
		}
	}
	return out
}

// URL returns a comma-separated URL list of every server, for direct
// connections that reconnect to whichever server is up.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.members))
	for i, m := range c.members {
		urls[i] = "nats://" + m.cfg.Listen
	}
	return strings.Join(urls, ",")
}

// WaitHealthy waits until every running server sees a meta leader and is
// current, and every stream on it is current too.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		var live []*server.Server
		c.mu.Lock()
		for _, m := range c.members {
			if m.srv != nil {
				live = append(live, m.srv)
			}
		}
		c.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := jetstream.WaitJetStreamCluster(wctx, live...)
		cancel()
		if err == nil {
			healthy := true
			for _, s := range live {
				if hs := s.Healthz(nil); hs.Status != "ok" {
					healthy = false
				}
			}
			if healthy {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: not healthy: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// StreamLeader returns the index of the server leading stream, or -1 if
// none is known. The managers' streams live in their account
// (jetstream.ManagerAccount), or in the global one on an Anonymous
// cluster: asking the global account of an authenticated cluster always
// answered -1, and the fault suite never saw a lease bucket's leader.
func (c *Cluster) StreamLeader(stream string) int {
	account := jetstream.ManagerAccount
	if c.authDir == "" {
		account = server.DEFAULT_GLOBAL_ACCOUNT
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.srv != nil && m.srv.JetStreamIsStreamLeader(account, stream) {
			return i
		}
	}
	return -1
}

// MetaLeader returns the index of the JetStream meta leader, or -1.
func (c *Cluster) MetaLeader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.srv != nil && m.srv.JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// Shutdown stops every running server.
func (c *Cluster) Shutdown() {
	var wg sync.WaitGroup
	for i := range c.members {
		wg.Go(func() { c.Kill(i) })
	}
	wg.Wait()
}

// ports are this package's: 26000-31999 (test/integration has
// 20000-25999).
var ports = &harness.Ports{Lo: 26000, Hi: 32000}

// freePorts returns n distinct ports nobody listens on right now and that
// no other cluster of this package was given (harness.Ports).
func freePorts(n int) ([]int, error) {
	out := make([]int, n)
	for i := range out {
		p, err := ports.Free()
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
)

// Settings are the timings and names every manager and executor of a run
// shares.
type Settings struct {
	Prefix    string        // subject prefix; lease.DefaultPrefix if empty
	Replicas  int           // replicas of the buckets and the event stream; 3
	LeaseTTL  time.Duration // lease TTL (whole seconds)
	LeaderTTL time.Duration // leadership TTL (whole seconds)
	// StoreTimeout bounds one store call of a manager.
	StoreTimeout time.Duration
	// DisconnectGrace is the managers' fast release grace (DISCONNECT_GRACE).
	// A holder whose connection drops (its server stopped, its proxy cut
	// it) must move its lease to a new connection within ¾ of it, less the
	// time since its last answered PING, so the grace must outlast the
	// scheduling stalls of the machine the suite runs on: beside other
	// race-built test packages on 2 cores, stalls over the default's
	// 600 ms happen, and the suite would then measure the machine, not the
	// product (docs/guarantees.md 2.1 says what a drop costs at the
	// default). 2s here (FAULT_DISCONNECT_GRACE), at most LeaseTTL/2.
	DisconnectGrace time.Duration
	// RequestTimeout and PollInterval configure executors' clients.
	RequestTimeout, PollInterval time.Duration
	Logger                       *slog.Logger
}

func (s *Settings) defaults() {
	if s.Prefix == "" {
		s.Prefix = lease.DefaultPrefix
	}
	if s.Replicas == 0 {
		s.Replicas = 3
	}
	if s.LeaseTTL == 0 {
		// A holder survives a takeover that ends within 0.57 x LEASE_TTL
		// - 250ms of its manager's death (docs/guarantees.md). The rule
		// LEASE_TTL >= 2 x LEADER_TTL + 3s asks for 5s; the suite's
		// combined faults delay some takeovers to 3.7s (known problem 6),
		// so it runs with 8s, which covers 4.3s.
		s.LeaseTTL = 8 * time.Second
	}
	if s.LeaderTTL == 0 {
		s.LeaderTTL = time.Second
	}
	if s.StoreTimeout == 0 {
		s.StoreTimeout = time.Second
	}
	if s.DisconnectGrace == 0 {
		s.DisconnectGrace = min(2*time.Second, s.LeaseTTL/2) // a manager refuses more than TTL/2
	}
	if s.RequestTimeout == 0 {
		s.RequestTimeout = 300 * time.Millisecond
	}
	if s.PollInterval == 0 {
		s.PollInterval = 300 * time.Millisecond
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
}

// dial connects a long-lived client with natsconn.Connect (reconnect
// forever, 50-100ms apart) and auth, retrying the first connect until ctx
// ends, and never learning other servers' addresses: a client behind a
// proxy must stay behind it.
func dial(ctx context.Context, url, name string, auth natsconn.Auth, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.IgnoreDiscoveredServers(), nats.Timeout(time.Second)}, extra...)
	for {
		nc, err := natsconn.Connect(url, auth, name, opts...)
		if err == nil {
			return nc, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect %s to %s: %w", name, url, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stores are the buckets a manager uses.
type Stores struct {
	Leases, Leaders, Pools *jetstream.LeaseStore
}

// OpenStores creates or binds the three buckets, retrying while the
// cluster cannot answer (a meta leader election, a server restarting).
// Each try is bounded, as leasemgr's set-up bounds each create (3s,
// doubling to 10s): nats-server can leave a create on a just-formed
// cluster unanswered, and a try bounded only by ctx then waited out the
// whole of it (CI: two minutes, then "context deadline exceeded").
func OpenStores(ctx context.Context, nc *nats.Conn, s Settings) (Stores, error) {
	var st Stores
	var last error // the last error that was not ctx's end, for the report
	for attempt := 1; ; attempt++ {
		err := openStores(ctx, nc, s, tryTimeout(attempt), &st)
		if err == nil {
			return st, nil
		}
		if ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil && last != err {
				return st, fmt.Errorf("open lease buckets: %w (before that: %v)", err, last)
			}
			return st, fmt.Errorf("open lease buckets: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// openStores makes one try at the buckets not yet opened in st, each
// create bounded by limit.
func openStores(ctx context.Context, nc *nats.Conn, s Settings, limit time.Duration, st *Stores) error {
	names := jetstream.NamesFor(s.Prefix)
	for _, b := range []struct {
		store **jetstream.LeaseStore
		name  string
	}{{&st.Leases, names.Leases}, {&st.Leaders, names.Leaders}, {&st.Pools, names.Pools}} {
		if *b.store != nil {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, limit)
		store, err := jetstream.OpenLeaseStore(tctx, nc, jetstream.BucketConfig{Name: b.name, Replicas: s.Replicas})
		cancel()
		if err != nil {
			return err
		}
		*b.store = store
	}
	return nil
}

// tryTimeout is the bound of the n-th try (n = 1, 2, ...) at one create:
// 3s doubled n-1 times, at most 10s.
func tryTimeout(n int) time.Duration {
	d := 3 * time.Second
	for i := 1; i < n && d < 10*time.Second; i++ {
		d *= 2
	}
	return min(d, 10*time.Second)
}

// Term is one period during which a candidate served its node.
type Term struct {
	Node, Instance string
	Start, End     time.Time // End is zero while serving
}

// Terms records every candidate's serving terms, per node, and counts how
// often two candidates of one node served at once.
type Terms struct {
	mu       sync.Mutex
	terms    []*Term
	overlaps []string
}

func (ts *Terms) begin(node, instance string) *Term {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	now := time.Now()
	for _, t := range ts.terms {
		if t.Node == node && t.End.IsZero() {
			ts.overlaps = append(ts.overlaps, fmt.Sprintf("%s: %s started serving at %s while %s served (since %s)",
				node, instance, now.Format(tsFormat), t.Instance, t.Start.Format(tsFormat)))
		}
	}
	t := &Term{Node: node, Instance: instance, Start: now}
	ts.terms = append(ts.terms, t)
	return t
}

func (ts *Terms) end(t *Term, at time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t.End.IsZero() {
		t.End = at
	}
}

// Overlaps returns a description of every moment two candidates of one
// node served at once.
func (ts *Terms) Overlaps() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.overlaps...)
}

// All returns a copy of every term.
func (ts *Terms) All() []Term {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]Term, len(ts.terms))
	for i, t := range ts.terms {
		out[i] = *t
	}
	return out
}

// Candidate is one lease-manager process for a node: manager.RunLeader around
// a manager.Manager, as cmd/leasemgr runs it, on its own NATS connection
// through its own proxy.
type Candidate struct {
	Node, Instance string
	Proxy          *Proxy

	nc      *nats.Conn
	cancel  context.CancelFunc
	done    chan struct{}
	serving atomic.Bool
	term    atomic.Pointer[Term]
	terms   *Terms

	mu        sync.Mutex
	serveErrs []error // what its attempts to serve that failed returned
}

// CandidateConfig starts a candidate.
type CandidateConfig struct {
	Settings
	Cluster  *Cluster
	Node     string
	Instance string
	Pools    []manager.PoolConfig
	Terms    *Terms
	// Upstream is the server the proxy prefers.
	Upstream int
	// WrapStore, if set, wraps the lease store (to break it on purpose).
	WrapStore func(manager.Store) manager.Store
}

// StartCandidate connects, opens the buckets and runs for leadership. It
// returns once RunLeader runs; Serving tells when it leads.
func StartCandidate(ctx context.Context, cfg CandidateConfig) (*Candidate, error) {
	cfg.defaults()
	if cfg.Terms == nil {
		cfg.Terms = &Terms{}
	}
	p, err := NewProxy(func() []string { return cfg.Cluster.LiveAddrs(cfg.Upstream) })
	if err != nil {
		return nil, err
	}
	nc, err := dial(ctx, p.URL(), "leasemgr "+cfg.Instance, cfg.Cluster.Auth(config.RoleManager))
	if err != nil {
		p.Close()
		return nil, err
	}
	st, err := OpenStores(ctx, nc, cfg.Settings)
	if err != nil {
		nc.Close()
		p.Close()
		return nil, err
	}
	var store manager.Store = st.Leases
	if cfg.WrapStore != nil {
		store = cfg.WrapStore(store)
	}
	log := cfg.Logger.With("instance", cfg.Instance)
	mcfg := manager.Config{
		Node: cfg.Node, Prefix: cfg.Prefix, Pools: cfg.Pools, TTL: cfg.LeaseTTL, Instance: cfg.Instance,
		Conn: nc, Store: store, PoolStore: st.Pools, Events: jetstream.NewEvents(nc, cfg.Prefix, log), Logger: log,
		StoreTimeout: cfg.StoreTimeout,
		// The suite's LEADER_TTL is 1s: a stalled rebuild must give up
		// quickly for the takeover to stay short.
		RebuildStall: time.Second,
		// Fast release, as leasemgr runs it on its embedded server: the
		// suite's servers export the disconnect advisories the same way.
		DisconnectEvents: cfg.Cluster.DisconnectSubject(), DisconnectGrace: cfg.DisconnectGrace,
	}
	if _, err := manager.New(mcfg); err != nil {
		nc.Close()
		p.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	c := &Candidate{Node: cfg.Node, Instance: cfg.Instance, Proxy: p, nc: nc, cancel: cancel, done: make(chan struct{}), terms: cfg.Terms}
	serve := func(ctx context.Context, fence manager.Fence) (err error) {
		mc := mcfg
		mc.Fence = fence
		m, err := manager.New(mc)
		if err != nil {
			return err
		}
		var t *Term
		// A clean stop (ctx ends) still serves while it tells the holders
		// (manager/stop.go): the term ends when Run says serving stopped.
		defer func() {
			if err != nil {
				c.mu.Lock()
				c.serveErrs = append(c.serveErrs, err)
				c.mu.Unlock()
			}
		}()
		return m.Run(ctx, func(serving bool) {
			if serving {
				t = cfg.Terms.begin(cfg.Node, cfg.Instance)
				c.term.Store(t)
				c.serving.Store(true)
				return
			}
			c.serving.Store(false)
			cfg.Terms.end(t, time.Now())
		})
	}
	go func() {
		defer close(c.done)
		_ = manager.RunLeader(rctx, manager.LeaderConfig{Store: st.Leaders, Node: cfg.Node, Instance: cfg.Instance, TTL: cfg.LeaderTTL, Logger: log}, serve)
	}()
	return c, nil
}

// Serving reports whether the candidate is its node's active manager.
func (c *Candidate) Serving() bool { return c.serving.Load() }

// ServeErrors are the errors its attempts to serve ended with, oldest
// first: a Start that failed, or a term that ended with an error.
func (c *Candidate) ServeErrors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.serveErrs)
}

// Crash cuts the candidate off NATS at once, as a killed process: its
// connections reset, nothing more it sends arrives, leadership is not given
// up. Its goroutines are then stopped and waited for.
func (c *Candidate) Crash() {
	at := time.Now()
	c.Proxy.Close()
	if t := c.term.Load(); t != nil {
		c.terms.end(t, at)
	}
	c.cancel()
	c.nc.Close()
	<-c.done
}

// Stop shuts the candidate down cleanly, as SIGTERM does: the manager
// closes and the leadership key is given up, so a standby takes over at
// once.
func (c *Candidate) Stop() {
	c.cancel()
	<-c.done
	c.nc.Close()
	c.Proxy.Close()
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
)

// suite is one run's state. Only the run goroutine touches it, except
// through the types' own locks.
type suite struct {
	cfg     SuiteConfig
	rng     *rand.Rand
	cluster *Cluster
	start   time.Time
	rec     *Recorder
	terms   *Terms

	nodes     []string
	cands     map[string][]*Candidate // live candidates per node
	instances map[string]bool         // every candidate the run started, for the auditor
	candSeq   int
	execs     []*Executor
	agenda    []action
	faults    map[string]int
	servers   []ServerFault
	serverOut int // index of the server down (or catching up), -1 if none
	lastKill  time.Time
	leaderOut []leaderFault
	holed     map[*Proxy]bool // blackholed proxies, until healed
	forger    *nats.Conn      // publishes the exec-forge advisories

	errMu sync.Mutex
	errs  []string // guarded by errMu: executors report too
}

func (s *suite) fail(format string, args ...any) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
}

type action struct {
	at   time.Time
	what string
	do   func(ctx context.Context)
}

type leaderFault struct {
	node, instance string
	at             time.Time
	clean          bool
}

// RunSuite runs the executors under randomized faults for cfg.Duration,
// drains, and audits.
func RunSuite(ctx context.Context, cfg SuiteConfig) (*SuiteResult, error) {
	cfg.defaults()
	if cfg.Dir == "" {
		return nil, errors.New("suite: a store directory is required")
	}
	s := &suite{
		cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 1)), rec: &Recorder{}, terms: &Terms{},
		cands: map[string][]*Candidate{}, instances: map[string]bool{}, faults: map[string]int{}, serverOut: -1, holed: map[*Proxy]bool{},
	}
	cl, err := StartCluster(ctx, ClusterConfig{Dir: filepath.Join(cfg.Dir, "nats")})
	if err != nil {
		return nil, err
	}
	s.cluster = cl
	defer cl.Shutdown()
	if err := Provision(ctx, cl.URL(), cl.Auth(config.RoleManager), cfg.Settings); err != nil {
		return nil, err
	}
	names := jetstream.NamesFor(cfg.Prefix)
	leaderWatch := watchLeaders(cl, Bucket{LeaseBucket, "KV_" + names.Leases}, Bucket{LeadershipBucket, "KV_" + names.Leaders})
	defer leaderWatch.end(0)
	if s.cfg.Weights["exec-forge"] > 0 {
		if s.forger, err = dial(ctx, cl.URL(), "forger", cl.Auth(config.RoleManager)); err != nil {
			return nil, err
		}
		defer s.forger.Close()
	}
	aud, err := StartAuditor(ctx, cl.URL(), cl.Auth(config.RoleManager), cfg.Prefix)
	if err != nil {
		return nil, err
	}
	auditorStopped := false
	defer func() {
		if !auditorStopped {
			aud.Stop()
		}
	}()
	defer func() {
		for _, cs := range s.cands {
			for _, c := range cs {
				c.Stop()
			}
		}
	}()
	for i := range cfg.Nodes {
		node := fmt.Sprintf("node%d", i+1)
		s.nodes = append(s.nodes, node)
		for range cfg.CandidatesPerNode {
			if err := s.startCandidate(ctx, node); err != nil {
				return nil, err
			}
		}
	}
	if err := s.waitServing(ctx, 30*time.Second); err != nil {
		return nil, err
	}

	// Executors.
	runCtx, stopExecs := context.WithCancel(ctx)
	defer stopExecs()
	var ewg sync.WaitGroup
	n := 0
	for ni, node := range s.nodes {
		for _, p := range cfg.Pools {
			for k := range cfg.ExecutorsPerPool {
				e := NewExecutor(ExecutorConfig{
					Settings: cfg.Settings, Cluster: cl, ID: fmt.Sprintf("e%02d", n), Node: node, Pool: p.Name,
					MaxSlots: min(2, p.Capacity), Upstream: (ni + k) % cl.Size(), Seed: cfg.Seed*1000 + uint64(n),
					Recorder: s.rec, MaxWait: cfg.MaxWait, MaxHold: cfg.MaxHold, LongHolds: cfg.LongHolds, LongHold: cfg.LongHold,
				})
				n++
				s.execs = append(s.execs, e)
				ewg.Go(func() {
					if err := e.Run(runCtx); err != nil {
						s.fail("executor %s: %v", e.ID(), err)
					}
				})
			}
		}
	}

	s.start = time.Now()
	cfg.Logf("seed %d: %d nodes x %d candidates, %d executors, %v", cfg.Seed, cfg.Nodes, cfg.CandidatesPerNode, len(s.execs), cfg.Duration)
	if cfg.Rolling {
		s.rollingRestart(ctx)
	}
	s.faultLoop(ctx)

	// Heal everything, let the executors finish their work and release.
	s.runAgenda(ctx, true)
	if s.serverOut >= 0 {
		s.waitServerBack(ctx)
	}
	if err := s.waitServing(ctx, 30*time.Second); err != nil {
		s.fail("after healing: %v", err)
	}
	stopExecs()
	ewg.Wait()
	runEnd := time.Now()

	// Drain: every record goes (released, or expired after a TTL), every
	// queue entry goes (its wait bound passes), every pool reads idle.
	drainBy := time.Now().Add(cfg.LeaseTTL + cfg.MaxWait + 10*time.Second)
	// A live waiter's queue entry goes within its wait bound; one still
	// there after that was forgotten by its manager (known problem 4).
	queuedBy := time.Now().Add(cfg.MaxWait + 3*time.Second)
	var liveLeases, liveQueued []string
	for {
		liveLeases, liveQueued = aud.Live()
		if len(liveLeases) == 0 && (len(liveQueued) == 0 || time.Now().After(queuedBy)) || time.Now().After(drainBy) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	busy := s.waitIdle(ctx, drainBy.Add(5*time.Second))
	// Let the auditor see the last markers, then stop it.
	time.Sleep(200 * time.Millisecond)
	cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
	if err := aud.CatchUp(cctx); err != nil {
		s.fail("%v", err)
	}
	ccancel()
	aud.Stop()
	auditorStopped = true

	leases, leaders, events := aud.Observations()
	stalls := aud.StoreStalls(probeStallMin)
	leaderless := leaderWatch.end(probeStallMin)
	holds, calls, nf := s.rec.Snapshot()
	capacity := map[string]map[string]int64{}
	for _, node := range s.nodes {
		capacity[node] = map[string]int64{}
		for _, p := range cfg.Pools {
			capacity[node][p.Name] = p.Capacity
		}
	}
	rep := Audit(AuditInput{
		Capacity: capacity, Rates: rateLimits(s.nodes, cfg.Pools), LeaseTTL: cfg.LeaseTTL, LeaderTTL: cfg.LeaderTTL, DisconnectGrace: cfg.DisconnectGrace, Leases: leases, Leaders: leaders, Events: events,
		Holds: holds, Calls: calls, NetFaults: nf, Servers: s.servers, Terms: s.terms.All(), Overlaps: s.terms.Overlaps(),
		RunEnd: runEnd, HangGrace: 2 * time.Second, StrictKill: !cfg.ExcuseServerKills, StrictOrphans: cfg.StrictOrphans,
		StrictStalls: cfg.StrictOrphans, Instances: s.instances, Pools: aud.PoolChanges(), StoreStalls: stalls, Leaderless: leaderless,
	})
	for _, k := range liveLeases {
		rep.violate("leaked lease record after the drain: %s", k)
	}
	for _, k := range liveQueued {
		// Known problem 4: a queue entry whose delete failed stays, with
		// no TTL, until a later manager of the node restores it.
		msg := "queue entry left after the drain: " + k
		rep.LeakedQueueEntries = append(rep.LeakedQueueEntries, msg)
		if cfg.StrictOrphans {
			rep.violate("%s", msg)
		}
	}
	for _, b := range busy {
		rep.violate("pool not idle after the drain (manager's own stats): %s", b)
	}
	s.errMu.Lock()
	for _, e := range s.errs {
		rep.violate("%s", e)
	}
	s.errMu.Unlock()
	res := &SuiteResult{Report: rep, Faults: s.faults, Grants: len(holds), Servers: s.servers, StoreStalls: stalls, Leaderless: leaderless, leaseTTL: cfg.LeaseTTL}
	for _, f := range s.servers {
		if !f.LeaseLeaderAt.IsZero() {
			res.LeaseLeaderBack = append(res.LeaseLeaderBack, f.LeaseLeaderAt.Sub(f.Start))
		}
	}
	res.Takeovers, res.Handovers = s.takeovers()
	return res, nil
}

// Provision creates the buckets and the event stream at the configured
// replica count, as the first leasemgr of a cluster does.
func Provision(ctx context.Context, url string, auth natsconn.Auth, st Settings) error {
	st.defaults()
	nc, err := dial(ctx, url, "provision", auth)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := OpenStores(ctx, nc, st); err != nil {
		return err
	}
	// The audit stream's create is bounded per try like the buckets'.
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, tryTimeout(attempt))
		err := jetstream.EnsureAuditStream(tctx, nc, jetstream.AuditConfig{
			Stream: jetstream.NamesFor(st.Prefix).Events, Subjects: st.Prefix + ".events.>", MaxAge: time.Hour, Replicas: st.Replicas,
		})
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("audit stream: %w (before that: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *suite) logf(format string, args ...any) {
	now := time.Now()
	s.cfg.Logf("%7.3fs %s "+format, append([]any{now.Sub(s.start).Seconds(), now.Format(tsFormat)}, args...)...)
}

func (s *suite) startCandidate(ctx context.Context, node string) error {
	s.candSeq++
	inst := fmt.Sprintf("%s-c%d", node, s.candSeq)
	// Two minutes only catch a candidate that never starts: beside the
	// integration tests, opening the buckets once took over 30s (CI, in
	// TestRollingRestart, right after a server's restart).
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := StartCandidate(sctx, CandidateConfig{
		Settings: s.cfg.Settings, Cluster: s.cluster, Node: node, Instance: inst,
		Pools: s.cfg.Pools, Terms: s.terms, Upstream: s.candSeq % s.cluster.Size(),
	})
	if err != nil {
		return fmt.Errorf("start candidate %s: %w", inst, err)
	}
	s.cands[node] = append(s.cands[node], c)
	s.instances[inst] = true
	return nil
}

func (s *suite) removeCandidate(c *Candidate) {
	s.cands[c.Node] = slices.DeleteFunc(s.cands[c.Node], func(x *Candidate) bool { return x == c })
	delete(s.holed, c.Proxy)
}

// waitServing waits until every node has an active manager.
func (s *suite) waitServing(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		missing := ""
		for _, node := range s.nodes {
			if !slices.ContainsFunc(s.cands[node], (*Candidate).Serving) {
				missing = node
				break
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("node %s has no active manager after %v", missing, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitIdle asks every node's manager for its stats (through the protocol)
// until every pool reads in_use 0 and queued 0, and returns the pools that
// did not by the deadline.
func (s *suite) waitIdle(ctx context.Context, deadline time.Time) []string {
	nc, err := dial(ctx, s.cluster.URL(), "stats", s.cluster.Auth(config.RoleReader))
	if err != nil {
		return []string{err.Error()}
	}
	defer nc.Close()
	for {
		var busy []string
		for _, node := range s.nodes {
			c, err := lease.NewClient(nc, node, lease.WithPrefix(s.cfg.Prefix))
			if err != nil {
				return []string{err.Error()}
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			stats, err := c.Stats(rctx)
			cancel()
			_ = c.Close()
			if err != nil {
				busy = append(busy, fmt.Sprintf("%s: stats: %v", node, err))
				continue
			}
			for _, p := range stats {
				if p.InUse != 0 || p.QueuedRequests != 0 {
					busy = append(busy, fmt.Sprintf("%s.%s in_use %d queued %d", node, p.Name, p.InUse, p.QueuedRequests))
				}
			}
		}
		if len(busy) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return busy
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// takeovers measures, for every fault that took an active manager out,
// how long until another candidate of its node served.
func (s *suite) takeovers() (crash, clean []time.Duration) {
	terms := s.terms.All()
	for _, f := range s.leaderOut {
		// The faulted term must have ended because of the fault: a short
		// partition may heal before the leadership lapses.
		ended := false
		for _, t := range terms {
			if t.Node == f.node && t.Instance == f.instance && !t.Start.After(f.at) && !t.End.IsZero() && !t.End.Before(f.at) && t.End.Sub(f.at) < 5*time.Second {
				ended = true
			}
		}
		if !ended {
			continue
		}
		var next time.Time
		for _, t := range terms {
			if t.Node == f.node && t.Instance != f.instance && t.Start.After(f.at) && (next.IsZero() || t.Start.Before(next)) {
				next = t.Start
			}
		}
		if next.IsZero() {
			continue
		}
		if f.clean {
			clean = append(clean, next.Sub(f.at))
		} else {
			crash = append(crash, next.Sub(f.at))
		}
	}
	return crash, clean
}

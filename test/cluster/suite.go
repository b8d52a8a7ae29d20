package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/pools"
)

// SuiteConfig configures one randomized fault run.
type SuiteConfig struct {
	Settings
	Seed     uint64
	Duration time.Duration // how long executors work under faults
	Dir      string        // stores; required

	Nodes             int                  // lease-manager nodes; 3
	CandidatesPerNode int                  // 2: an active manager and a hot standby
	Pools             []manager.PoolConfig // every node's pools
	ExecutorsPerPool  int                  // 3
	MaxWait, MaxHold  time.Duration        // per Acquire bound and per (short) hold
	// LongHolds of the holds last up to LongHold instead: several TTLs, so
	// their renewals must survive the faults.
	LongHolds float64
	LongHold  time.Duration
	// FaultEvery is the mean pause between two faults.
	FaultEvery time.Duration
	// Weights of the fault kinds (see faultKinds); nil for the defaults.
	Weights map[string]int
	// ExcuseServerKills lets a NATS server kill excuse a lost lease. By
	// default it does not: the cluster keeps quorum and its raft leaders
	// step down on shutdown, so renewals must get through.
	ExcuseServerKills bool
	// StrictOrphans fails the run on the known problems 1, 3, 4 and 5 of
	// docs/guarantees.md (over-grants by orphan records, leases lost to
	// stalled takeovers, queue entries left after the drain, live leases
	// refused on renewal), which are otherwise only reported.
	StrictOrphans bool
	// Logf receives the fault log; nil discards it.
	Logf func(format string, args ...any)
	// Rolling runs a rolling restart of every NATS server and every
	// manager candidate (restartfaults.go) before the random faults.
	Rolling bool
}

// Fault kinds the suite injects.
var faultKinds = []string{
	"exec-kill",      // SIGKILL an executor that holds a lease
	"exec-cut",       // reset an executor's connection
	"exec-blackhole", // partition an executor from NATS for 0.5-5s
	"mgr-crash",      // kill a manager candidate (the active one more often), restart it later
	"mgr-stop",       // stop a candidate cleanly (SIGTERM), restart it later
	"mgr-cut",        // reset a candidate's connection
	"mgr-blackhole",  // partition a candidate from NATS for 0.5-4s
	"mgr-duplicate",  // start an extra candidate for a node, stop or kill it later
	"server-kill",    // shut one NATS server down, restart it 1-4s later
	"exec-forge",     // publish a forged disconnect advisory naming a live executor's connection
	"node-restart",   // stop every candidate of a node cleanly, start them again 0.5-3s later (restartfaults.go)
}

var defaultWeights = map[string]int{
	"exec-kill": 3, "exec-cut": 2, "exec-blackhole": 2,
	"mgr-crash": 3, "mgr-stop": 1, "mgr-cut": 2, "mgr-blackhole": 2, "mgr-duplicate": 1,
	"server-kill": 2, "exec-forge": 2, "node-restart": 1,
}

func (c *SuiteConfig) defaults() {
	c.Settings.defaults()
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.CandidatesPerNode == 0 {
		c.CandidatesPerNode = 2
	}
	if len(c.Pools) == 0 {
		// cpu also has a start rate, which binds most after a takeover,
		// when the restored queue meets the new manager's empty bucket.
		c.Pools = []manager.PoolConfig{{Name: "gpu", Capacity: 1},
			{Name: "cpu", Capacity: 3, Options: pools.Options{Rate: pools.Rate{Slots: 2, Per: time.Second}, Burst: 3}}}
	}
	if c.ExecutorsPerPool == 0 {
		c.ExecutorsPerPool = 3
	}
	if c.MaxWait == 0 {
		c.MaxWait = 3 * time.Second
	}
	if c.MaxHold == 0 {
		c.MaxHold = c.LeaseTTL / 2 // a hold past TTL/3 renews once
	}
	if c.LongHold == 0 {
		c.LongHolds, c.LongHold = 0.25, 2*c.LeaseTTL
	}
	if c.FaultEvery == 0 {
		c.FaultEvery = 1500 * time.Millisecond
	}
	if c.Weights == nil {
		c.Weights = defaultWeights
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// SuiteResult is what a run found.
type SuiteResult struct {
	Report *Report
	Faults map[string]int // faults applied, by kind
	// Takeovers after the active manager crashed or was partitioned, and
	// after it stopped cleanly (gave its leadership up).
	Takeovers, Handovers []time.Duration
	// LeaseLeaderBack: after killing the server that led the lease
	// bucket's stream, how long until another server led it.
	LeaseLeaderBack []time.Duration
	Servers         []ServerFault
	Grants          int
	// StoreStalls: when the auditor's probe saw no store write
	// acknowledged for longer than probeStallMin.
	StoreStalls []StoreStall
	// Leaderless: when the lease or leadership bucket's stream had no
	// leader for longer than probeStallMin (leaderwatch.go).
	Leaderless []Leaderless
	leaseTTL   time.Duration
}

func (r *SuiteResult) serverSummary() string {
	var parts []string
	for _, f := range r.Servers {
		led := strings.Join(f.Led, "+")
		if led == "" {
			led = "nothing"
		}
		parts = append(parts, fmt.Sprintf("n%d (led %s, healthy after %v)", f.Server, led, f.End.Sub(f.Start).Round(time.Millisecond)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// stallSummary lists the store stalls longer than over, each with its
// start, and names the longest of all.
func (r *SuiteResult) stallSummary(over time.Duration) string {
	var parts []string
	longest := time.Duration(0)
	for _, s := range r.StoreStalls {
		if s.Duration() > over {
			parts = append(parts, fmt.Sprintf("from %s for %v", s.Start.Format(tsFormat), s.Duration().Round(time.Millisecond)))
		}
		longest = max(longest, s.Duration())
	}
	if longest == 0 {
		return fmt.Sprintf("0 (none over %v)", probeStallMin)
	}
	return fmt.Sprintf("%d %v, longest %v (excusing a lost lease takes %v)", len(parts), parts, longest.Round(time.Millisecond), storeStallBound(r.leaseTTL))
}

// Summary is a few lines for the test log.
func (r *SuiteResult) Summary() string {
	var b strings.Builder
	rep := r.Report
	fmt.Fprintf(&b, "faults: %v\n", sortedCounts(r.Faults))
	fmt.Fprintf(&b, "acquires: %v\n", sortedCounts(rep.Outcomes))
	fmt.Fprintf(&b, "holds: %d (record seen for %d), KV grants %d, granted events %d (verified against KV %d)\n", rep.Holds, rep.HoldsCovered, rep.KVLeases, rep.GrantedEvents, rep.EventsVerified)
	fmt.Fprintf(&b, "lost leases: %d, excused %v\n", rep.Lost, sortedCounts(rep.LostExcused))
	fmt.Fprintf(&b, "expiry markers after last write + TTL: %s\n", durations(rep.ExpiryLags))
	fmt.Fprintf(&b, "takeovers after a crash/partition: %s; after a clean stop: %s\n", durations(r.Takeovers), durations(r.Handovers))
	fmt.Fprintf(&b, "store stalls (no probe write acknowledged) over 1s: %s; buckets without a stream leader over 1s: %s\n", r.stallSummary(time.Second), leaderlessSummary(r.Leaderless, time.Second))
	fmt.Fprintf(&b, "grants stored just after the granter's leadership lapsed (nobody else leading): %d, latest by %v; grants whose leader the auditor could not see: %d\n", rep.LateGrants, rep.LateGrantMax, rep.LeaderUnverified)
	fmt.Fprintf(&b, "server kills: %s; lease bucket leader re-elected after killing its leader: %s\n", r.serverSummary(), durations(r.LeaseLeaderBack))
	fmt.Fprintf(&b, "known problems: KV-view over-grants by orphan records (1): %d; leases lost to a stalled takeover (3): %d; queue entries left after the drain (4): %d; live leases refused on renewal (5): %d\n",
		len(rep.OrphanOvergrants), len(rep.StalledTakeovers), len(rep.LeakedQueueEntries), len(rep.RefusedRenewals))
	fmt.Fprintf(&b, "peak slots in use without orphans, KV view: %v; holders' view: %v\n", sortedCounts64(rep.MaxKVInUse), sortedCounts64(rep.MaxHeldInUse))
	fmt.Fprintf(&b, "grants of pools with a start rate: %v; most of the rate's bound (burst + rate x window) used: %s", sortedCounts(rep.RateStarts), rateUse(rep.MaxRateUse))
	return b.String()
}

// sortedMap writes m as "k1=v1 k2=v2" by key, each value in format.
func sortedMap[V any](m map[string]V, format string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+fmt.Sprintf(format, m[k]))
	}
	return strings.Join(parts, " ")
}

func sortedCounts(m map[string]int) string     { return sortedMap(m, "%d") }
func sortedCounts64(m map[string]int64) string { return sortedMap(m, "%d") }

// rateUse is MaxRateUse as "node1.cpu=0.93 ...".
func rateUse(m map[string]float64) string { return sortedMap(m, "%.2f") }

func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("n=%d min %v median %v max %v", len(s), s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

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

func (s *suite) schedule(after time.Duration, what string, do func(ctx context.Context)) {
	s.agenda = append(s.agenda, action{at: time.Now().Add(after), what: what, do: do})
}

// runAgenda runs the due actions, or all of them when all is set.
func (s *suite) runAgenda(ctx context.Context, all bool) {
	for {
		sort.SliceStable(s.agenda, func(i, j int) bool { return s.agenda[i].at.Before(s.agenda[j].at) })
		if len(s.agenda) == 0 || (!all && time.Now().Before(s.agenda[0].at)) {
			return
		}
		a := s.agenda[0]
		s.agenda = s.agenda[1:]
		s.logf("%s", a.what)
		a.do(ctx)
	}
}

func (s *suite) faultLoop(ctx context.Context) {
	end := s.start.Add(s.cfg.Duration)
	next := time.Now().Add(s.pause())
	hung := map[string]bool{}
	for time.Now().Before(end) && ctx.Err() == nil {
		s.runAgenda(ctx, false)
		for _, c := range s.rec.Overdue(time.Now(), 2*time.Second) {
			if !hung[c.RequestID] {
				hung[c.RequestID] = true
				s.logf("HANG: acquire %s by %s started %v ago with a %v bound", c.RequestID, c.Executor, time.Since(c.Start).Round(time.Millisecond), c.Bound)
			}
		}
		if s.serverOut >= 0 {
			f := &s.servers[len(s.servers)-1]
			if slices.Contains(f.Led, jetstream.NamesFor(s.cfg.Prefix).Leases) && f.LeaseLeaderAt.IsZero() && s.cluster.StreamLeader("KV_"+jetstream.NamesFor(s.cfg.Prefix).Leases) >= 0 {
				f.LeaseLeaderAt = time.Now()
			}
			if s.cluster.Up(s.serverOut) {
				s.checkServerBack(ctx)
			}
		}
		if time.Now().After(next) {
			s.inject(ctx)
			next = time.Now().Add(s.pause())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *suite) pause() time.Duration {
	return s.cfg.FaultEvery/2 + time.Duration(s.rng.Int64N(int64(s.cfg.FaultEvery)))
}

func (s *suite) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

// inject picks a fault by weight and applies it if its preconditions hold.
func (s *suite) inject(ctx context.Context) {
	total := 0
	for _, k := range faultKinds {
		total += s.cfg.Weights[k]
	}
	if total == 0 {
		return
	}
	pick := s.rng.IntN(total)
	kind := ""
	for _, k := range faultKinds {
		if pick < s.cfg.Weights[k] {
			kind = k
			break
		}
		pick -= s.cfg.Weights[k]
	}
	if s.apply(ctx, kind) {
		s.faults[kind]++
	}
}

func (s *suite) apply(ctx context.Context, kind string) bool {
	switch kind {
	case "exec-kill":
		// Try a few executors: only one that holds a lease can be killed.
		for range 4 {
			e := s.execs[s.rng.IntN(len(s.execs))]
			if e.Kill(ctx) {
				s.logf("exec-kill %s", e.ID())
				return true
			}
		}
	case "exec-cut":
		e := s.execs[s.rng.IntN(len(s.execs))]
		if p := e.Proxy(); p != nil && !s.holed[p] {
			s.rec.AddNetFault(e.ID(), "", "cut", time.Now())
			p.Cut()
			s.logf("exec-cut %s", e.ID())
			return true
		}
	case "exec-blackhole":
		e := s.execs[s.rng.IntN(len(s.execs))]
		p := e.Proxy()
		if p == nil || s.holed[p] {
			return false
		}
		d := s.between(500*time.Millisecond, 5*time.Second)
		done := s.rec.AddNetFault(e.ID(), "", "blackhole", time.Now())
		p.Blackhole()
		s.holed[p] = true
		s.logf("exec-blackhole %s for %v", e.ID(), d.Round(time.Millisecond))
		s.schedule(d, "heal executor "+e.ID(), func(context.Context) {
			p.Heal()
			delete(s.holed, p)
			done(time.Now())
		})
		return true
	case "mgr-crash", "mgr-stop", "mgr-blackhole", "mgr-cut":
		node := s.nodes[s.rng.IntN(len(s.nodes))]
		c := s.pickCandidate(node)
		if c == nil {
			return false
		}
		if kind != "mgr-cut" && !s.hasHealthyStandby(node, c) {
			return false // with no standby the node's leases are lost: not what this fault tests
		}
		serving := c.Serving()
		switch kind {
		case "mgr-cut":
			s.rec.AddNetFault(c.Instance, node, "cut", time.Now())
			c.Proxy.Cut()
			s.logf("mgr-cut %s (active: %v)", c.Instance, serving)
		case "mgr-blackhole":
			d := s.between(500*time.Millisecond, 4*time.Second)
			healed := s.rec.AddNetFault(c.Instance, node, "blackhole", time.Now())
			c.Proxy.Blackhole()
			s.holed[c.Proxy] = true
			if serving {
				s.leaderOut = append(s.leaderOut, leaderFault{node: node, instance: c.Instance, at: time.Now()})
			}
			s.logf("mgr-blackhole %s (active: %v) for %v", c.Instance, serving, d.Round(time.Millisecond))
			p := c.Proxy
			s.schedule(d, "heal candidate "+c.Instance, func(context.Context) {
				p.Heal()
				delete(s.holed, p)
				healed(time.Now())
			})
		case "mgr-crash", "mgr-stop":
			at := time.Now()
			if kind == "mgr-crash" {
				c.Crash()
			} else {
				c.Stop()
			}
			s.removeCandidate(c)
			if serving {
				s.leaderOut = append(s.leaderOut, leaderFault{node: node, instance: c.Instance, at: at, clean: kind == "mgr-stop"})
			}
			d := s.between(500*time.Millisecond, 3*time.Second)
			s.logf("%s %s (active: %v), restart in %v", kind, c.Instance, serving, d.Round(time.Millisecond))
			s.schedule(d, "restart a candidate for "+node, func(ctx context.Context) {
				if err := s.startCandidate(ctx, node); err != nil {
					s.fail("%v", err)
				}
			})
		}
		return true
	case "mgr-duplicate":
		node := s.nodes[s.rng.IntN(len(s.nodes))]
		if len(s.cands[node]) >= s.cfg.CandidatesPerNode+1 {
			return false
		}
		if err := s.startCandidate(ctx, node); err != nil {
			s.fail("%v", err)
			return false
		}
		dup := s.cands[node][len(s.cands[node])-1]
		crash := s.rng.IntN(2) == 0
		d := s.between(2*time.Second, 6*time.Second)
		s.logf("mgr-duplicate %s, to be %s in %v", dup.Instance, map[bool]string{true: "killed", false: "stopped"}[crash], d.Round(time.Millisecond))
		s.schedule(d, "end duplicate "+dup.Instance, func(context.Context) {
			if !slices.Contains(s.cands[node], dup) {
				return
			}
			if !s.hasHealthyStandby(node, dup) {
				return // it is the node's only healthy manager now; keep it
			}
			if dup.Serving() {
				s.leaderOut = append(s.leaderOut, leaderFault{node: node, instance: dup.Instance, at: time.Now(), clean: !crash})
			}
			if crash {
				dup.Crash()
			} else {
				dup.Stop()
			}
			s.removeCandidate(dup)
		})
		return true
	case "exec-forge":
		// An advisory published in the managers' account, as any client of
		// a single-account NATS could make appear (manager/forgeddisconnect_test.go;
		// in the suite's account layout no executor can reach that subject):
		// one naming a live holder's connection must cost it nothing, the
		// close check stops it. The auditor excuses no lease lost to it (its
		// connection was not down).
		e := s.execs[s.rng.IntN(len(s.execs))]
		server, id, ok := e.ConnIdentity()
		if !ok || s.forger == nil {
			return false
		}
		adv := fmt.Appendf(nil, `{"type":"io.nats.server.advisory.v1.client_disconnect","server":{"id":%q},"client":{"id":%d}}`, server, id)
		if s.forger.Publish(s.cluster.DisconnectSubject(), adv) != nil {
			return false
		}
		s.logf("exec-forge %s (conn %d on %s)", e.ID(), id, server)
		return true
	case "node-restart":
		return s.restartNode(ctx)
	case "server-kill":
		if s.serverOut >= 0 || time.Since(s.lastKill) < 3*time.Second {
			return false
		}
		i := s.rng.IntN(s.cluster.Size())
		led := s.led(i)
		at := time.Now()
		s.cluster.Kill(i)
		s.serverOut, s.lastKill = i, at
		s.servers = append(s.servers, ServerFault{Server: i, Start: at, Led: led})
		d := s.between(time.Second, 4*time.Second)
		s.logf("server-kill n%d (led %v), restart in %v", i, led, d.Round(time.Millisecond))
		s.schedule(d, fmt.Sprintf("restart server n%d", i), func(context.Context) {
			if err := s.cluster.Restart(i); err != nil {
				s.fail("%v", err)
			}
		})
		return true
	}
	return false
}

// led names the raft groups server i leads: the meta group and the streams
// of the buckets.
func (s *suite) led(i int) []string {
	var out []string
	if s.cluster.MetaLeader() == i {
		out = append(out, "meta")
	}
	for _, b := range []string{jetstream.NamesFor(s.cfg.Prefix).Leases, jetstream.NamesFor(s.cfg.Prefix).Leaders} {
		if s.cluster.StreamLeader("KV_"+b) == i {
			out = append(out, b)
		}
	}
	return out
}

// checkServerBack closes the server fault once the cluster is healthy.
func (s *suite) checkServerBack(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if s.cluster.WaitHealthy(hctx) == nil {
		f := &s.servers[len(s.servers)-1]
		f.End = time.Now()
		s.logf("server n%d back, cluster healthy %v after the kill", f.Server, f.End.Sub(f.Start).Round(time.Millisecond))
		s.serverOut = -1
	}
}

func (s *suite) waitServerBack(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := s.cluster.WaitHealthy(hctx); err != nil {
		s.fail("%v", err)
	}
	s.checkServerBack(ctx)
}

// pickCandidate picks a live, unpartitioned candidate of node, the active
// one two times in three.
func (s *suite) pickCandidate(node string) *Candidate {
	cs := slices.DeleteFunc(slices.Clone(s.cands[node]), func(c *Candidate) bool { return s.holed[c.Proxy] })
	if len(cs) == 0 {
		return nil
	}
	if s.rng.IntN(3) < 2 {
		for _, c := range cs {
			if c.Serving() {
				return c
			}
		}
	}
	return cs[s.rng.IntN(len(cs))]
}

// hasHealthyStandby reports whether node has a live candidate other than
// c that is not partitioned.
func (s *suite) hasHealthyStandby(node string, c *Candidate) bool {
	for _, o := range s.cands[node] {
		if o != c && !s.holed[o.Proxy] {
			return true
		}
	}
	return false
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

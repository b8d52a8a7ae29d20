package cluster

// What a fault run is told (SuiteConfig, with its defaults) and what it
// tells (SuiteResult, and the summary a test logs).

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/slotlease/slotlease/manager"
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

package cluster

import (
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/harness"
)

// The fault suite. The short version runs in every `go test ./...`: two
// fresh seeds, 20s each. Reproduce a run with its printed seed:
//
//	go test ./test/cluster -run TestFaultSuite -seed 1234        (or FAULT_SEED=1234)
//
// The long version runs more nodes and executors for minutes per seed:
//
//	go test ./test/cluster -run TestFaultSuite -long -timeout 30m   (or FAULT_LONG=1)
//
// FAULT_SEEDS=n runs n seeds; FAULT_DURATION=90s sets each run's length.
// FAULT_LEASE_TTL, FAULT_LEADER_TTL and FAULT_DISCONNECT_GRACE change the
// timings (15s, 1s and 4s in the short version; 8s, 1s and 2s in the
// long one): FAULT_LEASE_TTL=1s shows what too short a lease
// TTL costs, FAULT_DISCONNECT_GRACE=800ms runs the product's default grace.
// The run also fails on the once-known problems 1, 3, 4 and 5 of
// docs/guarantees.md (over-grants by orphan records, leases lost to a
// takeover stalled by a connection reset, queue entries left after the
// drain, live leases refused on renewal), all fixed now; FAULT_LENIENT=1
// only logs them, to look at other failures first.
// LEASE_TEST_LOG=1 shows the managers' logs. A seed fixes the fault
// schedule and every executor's choices; goroutine scheduling is not
// reproducible, so a rerun follows the same script, not the same trace.
var (
	seedFlag     = flag.Uint64("seed", 0, "fault suite: run this seed only (also FAULT_SEED)")
	longFlag     = flag.Bool("long", false, "fault suite: the long version (also FAULT_LONG=1)")
	durationFlag = flag.Duration("fault.duration", 0, "fault suite: length of each run (also FAULT_DURATION)")
	seedsFlag    = flag.Int("fault.seeds", 0, "fault suite: number of seeds (also FAULT_SEEDS)")
)

func envOr(name string, flagSet bool, v string) string {
	if flagSet {
		return v
	}
	return os.Getenv(name)
}

func TestFaultSuite(t *testing.T) {
	t.Parallel()
	faultSuiteTurn(t)
	long := *longFlag || os.Getenv("FAULT_LONG") != ""
	// The short version runs inside every `go test ./...`, beside the
	// integration tests on two cores, with fresh seeds: at the product's
	// default 15s TTL (an 8s budget), with the holds of the suite's 8s. At
	// 8s (a 4s budget) a takeover slowed by that load cost two leases in
	// a CI run (seed 862245: a node unserved for about 5s after a server
	// kill; it passes alone and beside another suite), which says more
	// about the machine than the product. And with a 4s grace: at 2s a
	// lease granted just as its server was killed had 0.2s to move before
	// its holder's dropped clock ran out (seed 885429 beside the
	// integration tests). The long version keeps 8s and 2s.
	cfg := SuiteConfig{Duration: 20 * time.Second, MaxHold: 4 * time.Second, LongHold: 16 * time.Second, LongHolds: 0.25}
	cfg.LeaseTTL, cfg.DisconnectGrace = 15*time.Second, 4*time.Second
	nSeeds := 2
	if long {
		cfg = SuiteConfig{Duration: 3 * time.Minute, Nodes: 6, ExecutorsPerPool: 4}
		cfg.Pools = nil // defaults
		nSeeds = 3
	}
	if v := envOr("FAULT_DURATION", *durationFlag != 0, durationFlag.String()); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FAULT_DURATION: %v", err)
		}
		cfg.Duration = d
	}
	if v := envOr("FAULT_SEEDS", *seedsFlag != 0, strconv.Itoa(*seedsFlag)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("FAULT_SEEDS: %v", err)
		}
		nSeeds = n
	}
	for _, v := range []struct {
		env string
		to  *time.Duration
	}{{"FAULT_LEASE_TTL", &cfg.LeaseTTL}, {"FAULT_LEADER_TTL", &cfg.LeaderTTL}, {"FAULT_DISCONNECT_GRACE", &cfg.DisconnectGrace}} {
		if e := os.Getenv(v.env); e != "" {
			d, err := time.ParseDuration(e)
			if err != nil {
				t.Fatalf("%s: %v", v.env, err)
			}
			*v.to = d
		}
	}
	var seeds []uint64
	if v := envOr("FAULT_SEED", *seedFlag != 0, strconv.FormatUint(*seedFlag, 10)); v != "" {
		for _, f := range strings.Split(v, ",") {
			s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("FAULT_SEED: %v", err)
			}
			seeds = append(seeds, s)
		}
	} else {
		for range nSeeds {
			seeds = append(seeds, rand.Uint64()%1_000_000)
		}
	}
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			runSeed(t, cfg, seed)
		})
	}
}

func runSeed(t *testing.T, cfg SuiteConfig, seed uint64) {
	t.Logf("FAULT_SEED=%d (reproduce: go test ./test/cluster -run 'TestFaultSuite' -seed %d)", seed, seed)
	cfg.Seed = seed
	cfg.Dir = t.TempDir()
	cfg.StrictOrphans = os.Getenv("FAULT_LENIENT") == ""
	cfg.Logger = harness.Logger()
	suiteLog(t, &cfg)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+3*time.Minute)
	defer cancel()
	res, err := RunSuite(ctx, cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	t.Logf("seed %d:\n%s", seed, res.Summary())
	for _, o := range res.Report.OrphanOvergrants {
		t.Logf("KNOWN PROBLEM 1 (FAULT_LENIENT is set): %s", o)
	}
	for _, o := range res.Report.StalledTakeovers {
		t.Logf("KNOWN PROBLEM 3 (FAULT_LENIENT is set): %s", o)
	}
	for _, o := range res.Report.LeakedQueueEntries {
		t.Logf("KNOWN PROBLEM 4 (FAULT_LENIENT is set): %s", o)
	}
	for _, o := range res.Report.RefusedRenewals {
		t.Logf("KNOWN PROBLEM 5 (FAULT_LENIENT is set): %s", o)
	}
	for _, n := range res.Report.Notes {
		t.Logf("note: %s", n)
	}
	for _, v := range res.Report.Violations {
		t.Errorf("seed %d: %s", seed, v)
	}
}

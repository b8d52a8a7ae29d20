package cluster

import (
	"os"
	"testing"

	"github.com/slotlease/slotlease/test/harness"
	"github.com/slotlease/slotlease/test/raceexit"
)

// The tests spend their time waiting on TTLs, graces and restarts, not on
// the CPU: four at once, each with a cluster of its own, the fault suites
// one at a time among them (docs/testing.md).
func TestMain(m *testing.M) {
	harness.DefaultParallel("4")
	raceexit.Set() // the -race binaries exit at once
	os.Exit(m.Run())
}

// faultSuites lets one of the suites that break a cluster on purpose run
// at a time (beside the short tests, and beside the other packages): they
// judge each lease by its holder's clocks, and on a machine starved by
// several of them at once (two at a time, beside test/integration) a
// holder's renewals missed their deadline, a lost lease the audit counts.
var faultSuites = make(chan struct{}, 1)

// faultSuitesEnv turns the fault suites on. Taking turns, they hold the
// package for five to seven minutes (the rolling restart alone a minute
// and a half), so the README's `go test ./...` leaves them out, and
// .ci/run runs them after it with FAULT_SUITES=1 (docs/testing.md). -long
// and FAULT_LONG turn them on too.
const faultSuitesEnv = "FAULT_SUITES"

// faultSuiteTurn skips a fault suite unless the suites are on, then waits
// for one of their turns, given back when the test ends.
func faultSuiteTurn(t *testing.T) {
	t.Helper()
	if os.Getenv(faultSuitesEnv) == "" && os.Getenv("FAULT_LONG") == "" && !*longFlag {
		t.Skipf("a fault suite: set %s=1 to run it (.ci/run does, after the README's test command)", faultSuitesEnv)
	}
	faultSuites <- struct{}{}
	t.Cleanup(func() { <-faultSuites })
}

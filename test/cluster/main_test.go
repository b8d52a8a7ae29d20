package cluster

import (
	"os"
	"testing"

	"github.com/slotlease/slotlease/test/harness"
)

// The suites spend their time waiting on TTLs, graces and restarts, not on
// the CPU: four at once, each with a cluster of its own (docs/testing.md).
func TestMain(m *testing.M) {
	harness.DefaultParallel("4")
	os.Exit(m.Run())
}

// faultSuites lets two of the suites that break a cluster on purpose run
// at once (beside the short tests): they judge each lease by its holder's
// clocks, and a machine starved by more of them than that can make a
// holder's reconnect miss its grace, a lost lease the audit counts.
var faultSuites = make(chan struct{}, 2)

// faultSuiteTurn waits for one of the fault suites' turns, given back when
// the test ends.
func faultSuiteTurn(t *testing.T) {
	t.Helper()
	faultSuites <- struct{}{}
	t.Cleanup(func() { <-faultSuites })
}

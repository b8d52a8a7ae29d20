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

package lease_test

import (
	"os"
	"testing"

	"github.com/slotlease/slotlease/test/harness"
)

// Most tests here wait on timers and servers, each with its own: eight at
// once keep two cores busy without starving any (docs/testing.md).
func TestMain(m *testing.M) {
	harness.DefaultParallel("8")
	os.Exit(m.Run())
}

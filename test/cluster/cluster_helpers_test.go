package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/slotlease/slotlease/config"
)

// provisionedCluster starts a 3-server cluster running the accounts
// layout, shut down when the test ends (after the cleanups registered
// later: the connections close first), and makes the buckets and streams
// of st, whose defaults it fills in.
func provisionedCluster(ctx context.Context, t *testing.T, st *Settings) *Cluster {
	t.Helper()
	cl, err := StartCluster(ctx, ClusterConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown)
	st.defaults()
	if err := Provision(ctx, cl.URL(), cl.Auth(config.RoleManager), *st); err != nil {
		t.Fatal(err)
	}
	return cl
}

// suiteLog sends the suite's timeline to the test log: as it happens when
// verbose (or FAULT_LOG is set), else kept and written only if the test
// fails, so a failure in CI shows what led to it.
func suiteLog(t *testing.T, cfg *SuiteConfig) {
	if testing.Verbose() || os.Getenv("FAULT_LOG") != "" {
		cfg.Logf = t.Logf
		return
	}
	var mu sync.Mutex
	var lines []string
	cfg.Logf = func(format string, args ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("the suite's timeline:\n%s", strings.Join(lines, "\n"))
	})
}

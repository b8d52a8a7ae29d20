package integration

import (
	"encoding/json"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// Issue 41: how a pool's leases ended, as an operator reads it with the
// real binaries: executor runs granted and completed, a --no-wait refused
// (rejected), in `leasemgr pools` (text and --json), /v1/pools and
// /metrics, and all of it still there after leasemgr restarts.
func TestPoolCountsSurviveALeasemgrRestart(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "counts", "gpu=1", "15s")
	m := startManager(t, env, httpAddr)
	for range 2 {
		if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--", "true"); code != 0 {
			t.Fatalf("executor run: exit %d:\n%s", code, out)
		}
	}
	h := start(t, env, "executor", "run", "--pool", "gpu", "--", "sleep", "120")
	eventually(t, 30*time.Second, "the holder's lease", func() bool { return regexp.MustCompile(`granted: 1 slot\(s\) of pool gpu`).MatchString(h.Output()) })
	if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--no-wait", "--", "true"); code != 75 {
		t.Fatalf("executor run --no-wait on a busy pool: exit %d, want 75:\n%s", code, out)
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	h.Wait(t, 30*time.Second)

	want := lease.PoolCounts{Granted: 3, Completed: 3, Rejected: 1}
	eventually(t, 30*time.Second, "the counts in /v1/pools", func() bool {
		c := httpPools(t, httpAddr)["gpu"].Counts
		return c != nil && *c == want
	})
	checkMetrics := func(when string) {
		t.Helper()
		for o, v := range map[lease.Outcome]float64{lease.OutcomeGranted: 3, lease.OutcomeCompleted: 3, lease.OutcomeFailed: 0,
			lease.OutcomeRejected: 1, lease.OutcomeDropped: 0, lease.OutcomeCancelled: 0} {
			if got := metricValue(t, httpAddr, "lease_pool_outcomes_total", "node", "counts", "pool", "gpu", "outcome", string(o)); got != v {
				t.Errorf("%s: lease_pool_outcomes_total{outcome=%q} = %v, want %v", when, o, got, v)
			}
		}
	}
	checkMetrics("before the restart")

	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := m.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("leasemgr exit %d after SIGTERM:\n%s", code, m.Output())
	}
	startManager(t, env, httpAddr)

	code, out := runLeasemgr(t, env, "pools", "--json")
	var np lease.NodePools
	if code != 0 || json.Unmarshal([]byte(out), &np) != nil {
		t.Fatalf("leasemgr pools --json after the restart: exit %d:\n%s", code, out)
	}
	var got *lease.PoolCounts
	for _, s := range np.Pools {
		if s.Name == "gpu" {
			got = s.Counts
		}
	}
	if got == nil || *got != want {
		t.Fatalf("leasemgr pools --json after the restart: gpu counts %+v, want %+v:\n%s", got, want, out)
	}
	code, out = runLeasemgr(t, env, "pools")
	if re := `(?m)^NODE\s+POOL\s+GRANTED\s+COMPLETED\s+FAILED\s+REJECTED\s+DROPPED\s+CANCELLED\n(.*\n)*counts\s+gpu\s+3\s+3\s+0\s+1\s+0\s+0\s*$`; code != 0 || !regexp.MustCompile(re).MatchString(out) {
		t.Fatalf("leasemgr pools after the restart: exit %d, want the counts table:\n%s", code, out)
	}
	checkMetrics("after the restart")
}

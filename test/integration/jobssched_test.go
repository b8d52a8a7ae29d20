package integration

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/pools"
)

// `executor jobs` shows, for each fair pool its jobs use, the scheduler
// the lease manager reports: the pool's counts, and per key its credit,
// slots and queue. Key acme holds fair pool f's only slot; key beta
// waits its turn; pool g is fifo and has no scheduler.
func TestJobsShowsFairScheduler(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "sched", "f=1,g=1", "15s")
	env = append(env, "POOL_POLICIES=f=fair", "TENANT_WEIGHTS=beta:3")
	startManager(t, env, httpAddr)
	start(t, env, "executor", "run", "--pool", "f", "--key", "acme", "--", "sleep", "60") // the test's cleanup stops it
	eventually(t, 20*time.Second, "acme to hold f's slot", func() bool { return httpPools(t, httpAddr)["f"].InUse == 1 })
	start(t, env, "executor", "run", "--pool", "f", "--key", "beta", "--", "true")
	eventually(t, 20*time.Second, "beta to wait", func() bool { return httpPools(t, httpAddr)["f"].QueuedRequests == 1 })
	for _, pool := range []string{"f", "g"} {
		if code, out := runExecutor(t, env, "submit", "--pool", pool, "--", "true"); code != 0 {
			t.Fatalf("submit to %s: exit %d\n%s", pool, code, out)
		}
	}

	code, out := runExecutor(t, env, "jobs", "--json")
	var listing struct {
		Scheduler []struct {
			Node    string         `json:"node"`
			Pool    string         `json:"pool"`
			Weights map[string]int `json:"weights"`
			pools.SchedulerStats
		} `json:"scheduler"`
	}
	if err := json.Unmarshal([]byte(out), &listing); code != 0 || err != nil {
		t.Fatalf("jobs --json: exit %d, %v\n%s", code, err, out)
	}
	if len(listing.Scheduler) != 1 {
		t.Fatalf("scheduler %+v, want fair pool f alone\n%s", listing.Scheduler, out)
	}
	s := listing.Scheduler[0]
	if s.Node != "sched" || s.Pool != "f" || s.Strategy != "deficit_round_robin" || s.Quantum != 1 || s.Weights["beta"] != 3 || s.Selected != 1 || len(s.Keys) != 2 {
		t.Fatalf("scheduler of f: %+v\n%s", s, out)
	}
	acme, beta := s.Keys[0], s.Keys[1]
	if acme.Key != "acme" || acme.InUse != 1 || acme.Selected != 1 || acme.Queued != 0 {
		t.Errorf("acme: %+v, want 1 in use, selected once", acme)
	}
	if beta.Key != "beta" || beta.Weight != 3 || beta.Queued != 1 || beta.Ready != 1 || beta.Deficit != 3 || beta.Selected != 0 || beta.OldestReadyAgeMs <= 0 {
		t.Errorf("beta: %+v, want weight 3, 1 queued and ready with its quantum of 3", beta)
	}

	code, out = runExecutor(t, env, "jobs")
	for _, line := range []string{
		`SCHEDULER f \(node sched\): deficit_round_robin quantum=1 selected=1 deferred=0 starvation_promotions=0`,
		`  key acme: weight=1 deficit=0 in_use=1 queued=0 ready=0 selected=1 deferred=0`,
		`  key beta: weight=3 deficit=3 in_use=0 queued=1 ready=1 selected=0 deferred=0 oldest_ready=\S+`,
	} {
		if code != 0 || !regexp.MustCompile(`(?m)^`+line+`\s*$`).MatchString(out) {
			t.Fatalf("jobs: exit %d, no line %q:\n%s", code, line, out)
		}
	}
	if strings.Contains(out, "SCHEDULER g") {
		t.Errorf("jobs shows a scheduler for fifo pool g:\n%s", out)
	}
}

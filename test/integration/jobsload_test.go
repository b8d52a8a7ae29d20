package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
)

// `executor jobs` and leasemgr's /metrics show, per pool, the jobs queued by priority and tenant,
// the jobs running by tenant, and how long the oldest ready job has
// waited, exactly, for a known queue: one job of tenant r holds pool p's
// only slot, so nothing else is taken.
func TestJobsShowsTenantsAndOldestReady(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "load", "p=1,q=1", "15s")
	startManager(t, env, httpAddr)
	dir := openTempDir(t) // the holder, with ids of its own, must see stop
	submit := func(args ...string) string {
		t.Helper()
		code, out := runExecutor(t, env, append([]string{"submit"}, args...)...)
		if code != 0 {
			t.Fatalf("submit %v: exit %d\n%s", args, code, out)
		}
		return strings.TrimSpace(out)
	}
	// Before any job: no pools, in the JSON as an empty list.
	var empty struct {
		Pools []jobs.PoolLoad `json:"pools"`
	}
	if code, out := runExecutor(t, env, "jobs", "--json"); code != 0 || json.Unmarshal([]byte(out), &empty) != nil || empty.Pools == nil || len(empty.Pools) != 0 {
		t.Fatalf("jobs --json before any job: exit %d\n%s", code, out)
	}

	// On /metrics, every pool's series exist at 0 before any job.
	for _, pool := range []string{"p", "q"} {
		for _, pr := range jobs.Priorities {
			if v := metricValue(t, httpAddr, "jobs_queued", "node", "load", "pool", pool, "priority", string(pr), "tenant", ""); v != 0 {
				t.Fatalf("jobs_queued{pool=%q,priority=%q,tenant=\"\"} = %v before any job, want 0", pool, pr, v)
			}
		}
		if v := metricValue(t, httpAddr, "jobs_running", "node", "load", "pool", pool, "tenant", ""); v != 0 {
			t.Fatalf("jobs_running{pool=%q} = %v before any job, want 0", pool, v)
		}
		if v := metricValue(t, httpAddr, "jobs_oldest_ready_seconds", "node", "load", "pool", pool); v != 0 {
			t.Fatalf("jobs_oldest_ready_seconds{pool=%q} = %v before any job, want 0", pool, v)
		}
	}

	holder := submit("--pool", "p", "--tenant", "r", "--env", "DIR="+dir, "--", "sh", "-c", `while [ ! -e "$DIR/stop" ]; do sleep 0.05; done`)
	q := jobQueue(t, env)
	start(t, env, "executor", "serve", "--pools", "p", "--poll", "100ms")
	eventually(t, 20*time.Second, "the holder to run", func() bool { return record(q, holder).State == jobs.StateRunning })

	before := time.Now()
	oldest := submit("--pool", "p", "--priority", "low", "--tenant", "b", "--", "true")
	submitted := time.Now()
	submit("--pool", "p", "--priority", "low", "--tenant", "b", "--", "true")
	submit("--pool", "p", "--priority", "high", "--tenant", "a", "--", "true")
	submit("--pool", "p", "--priority", "high", "--tenant", "a", "--", "true")
	submit("--pool", "p", "--priority", "high", "--", "true")
	submit("--pool", "q", "--tenant", "a", "--", "true") // nobody serves q

	asked := time.Now()
	code, out := runExecutor(t, env, "jobs", "--json")
	answered := time.Now()
	var listing struct {
		Pools []jobs.PoolLoad `json:"pools"`
	}
	if err := json.Unmarshal([]byte(out), &listing); code != 0 || err != nil {
		t.Fatalf("jobs --json: exit %d, %v\n%s", code, err, out)
	}
	want := []jobs.PoolLoad{
		{Pool: "p", Queued: []jobs.TenantCount{{Priority: "high", Tenant: "", Jobs: 1}, {Priority: "high", Tenant: "a", Jobs: 2}, {Priority: "low", Tenant: "b", Jobs: 2}},
			Running: []jobs.TenantCount{{Tenant: "r", Jobs: 1}}, OldestReady: oldest},
		{Pool: "q", Queued: []jobs.TenantCount{{Priority: "normal", Tenant: "a", Jobs: 1}}, Running: []jobs.TenantCount{}},
	}
	if len(listing.Pools) != 2 {
		t.Fatalf("pools %+v, want p and q", listing.Pools)
	}
	age := time.Duration(listing.Pools[0].OldestReadySeconds * float64(time.Second))
	if age < asked.Sub(submitted) || age > answered.Sub(before) {
		t.Fatalf("oldest ready age %v, want between %v and %v", age, asked.Sub(submitted), answered.Sub(before))
	}
	qAge := listing.Pools[1].OldestReadySeconds
	listing.Pools[0].OldestReadySeconds, listing.Pools[1].OldestReadySeconds = 0, 0
	listing.Pools[1].OldestReady = "" // q's one job, checked by its age
	got, _ := json.Marshal(listing.Pools)
	if w, _ := json.Marshal(want); string(got) != string(w) || qAge <= 0 {
		t.Fatalf("pools:\n%s\nwant:\n%s (and a positive age for q, got %v)", got, w, qAge)
	}

	code, out = runExecutor(t, env, "jobs")
	for _, line := range []string{`p\s+queued\s+high\s+-\s+1\s+\d+s \(` + oldest + `\)`, `p\s+queued\s+high\s+a\s+2`, `p\s+queued\s+low\s+b\s+2`, `p\s+running\s+-\s+r\s+1`, `q\s+queued\s+normal\s+a\s+1\s+\d+s \(\w+\)`} {
		if code != 0 || !regexp.MustCompile(`(?m)^`+line+`\s*$`).MatchString(out) {
			t.Fatalf("jobs: exit %d, no line %q:\n%s", code, line, out)
		}
	}
	// /metrics has the same figures (read again at most every 5s).
	series := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"jobs_queued", []string{"node", "load", "pool", "p", "priority", "high", "tenant", ""}, 1},
		{"jobs_queued", []string{"node", "load", "pool", "p", "priority", "high", "tenant", "a"}, 2},
		{"jobs_queued", []string{"node", "load", "pool", "p", "priority", "low", "tenant", "b"}, 2},
		{"jobs_queued", []string{"node", "load", "pool", "p", "priority", "normal", "tenant", ""}, 0},
		{"jobs_running", []string{"node", "load", "pool", "p", "tenant", "r"}, 1},
		{"jobs_running", []string{"node", "load", "pool", "p", "tenant", ""}, 0},
		{"jobs_queued", []string{"node", "load", "pool", "q", "priority", "normal", "tenant", "a"}, 1},
	}
	eventually(t, 15*time.Second, "/metrics to show the queue", func() bool {
		for _, s := range series {
			if metricValue(t, httpAddr, s.name, s.labels...) != s.want {
				return false
			}
		}
		return metricValue(t, httpAddr, "jobs_oldest_ready_seconds", "node", "load", "pool", "p") > 0
	})
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/test/harness"
)

// existsIn reports whether dir/name exists.
func existsIn(dir, name string) bool { return exists(filepath.Join(dir, name)) }

// waitFile waits for the file a worker writes.
func waitFile(t *testing.T, dir, name string, p *proc) {
	t.Helper()
	eventually(t, 30*time.Second, name+" to be written", func() bool {
		select {
		case <-p.done:
			t.Fatalf("exited before writing %s:\n%s", name, p.Output())
		default:
		}
		return existsIn(dir, name)
	})
}

// groupStops is the node's lease_group_stops_total for pool p.
func groupStops(t *testing.T, httpAddr, node, pool string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^lease_group_stops_total\{[^}]*node="` + node + `",pool="` + pool + `"[^}]*\} (\d+)$`).FindStringSubmatch(harness.GetOK(t, "http://"+httpAddr+"/metrics"))
	if m == nil {
		return ""
	}
	return m[1]
}

// A group's second `executor run --cancel-in-progress` stops the first
// within its kill grace (its worker gets SIGTERM and exits on it), which
// exits 77 and releases; the second then runs. A run of another tenant
// with the same group name stops nothing.
func TestGroupCancelInProgressStopsTheRunningOne(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "grp", "p=1", "15s")
	startManager(t, env, httpAddr)
	dir := sharedDir(t)
	run := func(name string, args ...string) *proc {
		script := `trap 'touch "$DIR/` + name + `-term"; exit 0' TERM; touch "$DIR/` + name + `-ran"; while [ ! -e "$DIR/` + name + `-go" ]; do sleep 0.05; done`
		args = append([]string{"run", "--pool", "p", "--writable", dir, "--env", "DIR=" + dir}, args...)
		return start(t, env, "executor", append(args, "--", "sh", "-c", script)...)
	}
	first := run("first", "--group", "g", "--tenant", "a", "--kill-grace", "20s")
	waitFile(t, dir, "first-ran", first)

	// Tenant b's run of a group named g queues behind, and asks nothing.
	other := run("other", "--group", "g", "--tenant", "b", "--cancel-in-progress")
	eventually(t, 30*time.Second, "tenant b's run to queue", func() bool { return strings.Contains(other.Output(), "position 1 in queue") })
	if n := groupStops(t, httpAddr, "grp", "p"); n != "0" {
		t.Fatalf("lease_group_stops_total %q after tenant b's run, want 0", n)
	}

	asked := time.Now()
	second := run("second", "--group", "g", "--tenant", "a", "--cancel-in-progress")
	code := first.Wait(t, time.Minute)
	took := time.Since(asked)
	if out := first.Output(); code != 77 || !strings.Contains(out, "asked the holder to stop") || !strings.Contains(out, `of group "g"`) {
		t.Fatalf("first run: exit %d, want 77 saying it was asked to stop:\n%s", code, first.Output())
	}
	if !existsIn(dir, "first-term") {
		t.Fatalf("the first run's worker got no SIGTERM:\n%s", first.Output())
	}
	if took > 20*time.Second {
		t.Fatalf("the first run stopped %v after the second started, past its 20s kill grace", took)
	}
	t.Logf("first run stopped %v after the second started:\n%s", took.Round(time.Millisecond), first.Output())
	// FIFO: tenant b's run queued first and gets the slot first.
	waitFile(t, dir, "other-ran", other)
	if err := os.WriteFile(filepath.Join(dir, "other-go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := other.Wait(t, time.Minute); code != 0 {
		t.Fatalf("tenant b's run: exit %d:\n%s", code, other.Output())
	}
	waitFile(t, dir, "second-ran", second)
	if err := os.WriteFile(filepath.Join(dir, "second-go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := second.Wait(t, time.Minute); code != 0 || existsIn(dir, "second-term") {
		t.Fatalf("second run: exit %d:\n%s", code, second.Output())
	}
	if n := groupStops(t, httpAddr, "grp", "p"); n != "1" {
		t.Fatalf("lease_group_stops_total %q, want 1", n)
	}
}

// `--cancel-pending` replaces a queued run of its group, which exits 77
// naming the group and the run that replaced it; the running one runs on.
// Bad group flags are refused.
func TestGroupCancelPendingReplacesTheQueuedOne(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "grq", "p=1", "15s")
	startManager(t, env, httpAddr)
	dir := sharedDir(t)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--cancel-pending"}, "need --group"},
		{[]string{"--group", "g", "--cancel-pending", "--cancel-in-progress"}, "give one of them"},
		{[]string{"--group", strings.Repeat("x", 129)}, "--group: longer than 128 bytes"},
	} {
		if code, out := runExecutor(t, env, append(append([]string{"run"}, tc.args...), "--", "true")...); code != 2 || !strings.Contains(out, tc.says) {
			t.Errorf("run %v: exit %d, want 2 saying %q:\n%s", tc.args, code, tc.says, out)
		}
	}
	holder := start(t, env, "executor", "run", "--pool", "p", "--group", "g", "--writable", dir, "--env", "DIR="+dir, "--",
		"sh", "-c", `touch "$DIR/holder-ran"; while [ ! -e "$DIR/go" ]; do sleep 0.05; done`)
	waitFile(t, dir, "holder-ran", holder)
	queued := start(t, env, "executor", "run", "--pool", "p", "--group", "g", "--", "true")
	eventually(t, 30*time.Second, "the first queued run to queue", func() bool { return strings.Contains(queued.Output(), "position 1 in queue") })
	newer := start(t, env, "executor", "run", "--pool", "p", "--group", "g", "--cancel-pending", "--", "true")
	code := queued.Wait(t, time.Minute)
	if out := queued.Output(); code != 77 || !strings.Contains(out, "superseded") || !strings.Contains(out, `group "g"`) {
		t.Fatalf("replaced run: exit %d, want 77 saying superseded in group g:\n%s", code, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := holder.Wait(t, time.Minute); code != 0 {
		t.Fatalf("the running one: exit %d, want 0 (cancel_pending stops no holder):\n%s", code, holder.Output())
	}
	if code := newer.Wait(t, time.Minute); code != 0 {
		t.Fatalf("the newer run: exit %d:\n%s", code, newer.Output())
	}
}

// A job submitted with a group and --cancel-in-progress stops the running
// job of its group, which ends cancelled (superseded), and runs: on a pool
// of one slot, which the running job holds, so the newer job is never
// taken by an executor before the older one ends (no hoarding); its submit
// cancels it (docs/jobs.md, "Concurrency groups").
func TestGroupJobCancelsTheRunningJob(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "grj", "p=1", "15s")
	startManager(t, env, httpAddr)
	dir := sharedDir(t)
	submit := func(name string, args ...string) string {
		script := `touch "$DIR/` + name + `-ran"; while :; do sleep 0.05; done`
		if name == "second" {
			script = `touch "$DIR/second-ran"`
		}
		args = append([]string{"submit", "--pool", "p", "--max-attempts", "1", "--writable", dir, "--env", "DIR=" + dir}, args...)
		code, out := runExecutor(t, env, append(args, "--", "sh", "-c", script)...)
		if code != 0 {
			t.Fatalf("submit: exit %d\n%s", code, out)
		}
		id, said, _ := strings.Cut(strings.TrimSpace(out), "\n")
		if name == "second" && !strings.Contains(said, "cancelled: job "+id+" replaces it") {
			t.Errorf("the second submit did not say which job it replaced:\n%s", out)
		}
		return id
	}
	q := jobQueue(t, env)
	first := submit("first", "--group", "g")
	serve := start(t, env, "executor", "serve", "--pools", "p", "--poll", "100ms", "--kill-grace", "5s")
	waitFile(t, dir, "first-ran", serve)
	second := submit("second", "--group", "g", "--cancel-in-progress")
	eventually(t, time.Minute, "the second job to succeed", func() bool { return record(q, second).State == jobs.StateSucceeded })
	eventually(t, 30*time.Second, "the first job to end", func() bool { return record(q, first).State.Final() })
	rec := record(q, first)
	if rec.State != jobs.StateCancelled || !strings.Contains(rec.Error, "superseded") {
		t.Fatalf("first job: %s, %q; want cancelled (superseded)\n%s", rec.State, rec.Error, serve.Output())
	}
}

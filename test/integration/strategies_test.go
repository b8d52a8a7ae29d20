package integration

import (
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Queue strategies and the executor-pool system's variable names, as a
// user of that system meets them with the real binaries: its
// MIRROR_NEURON_EXECUTOR_* variables honoured with a note at start (and a
// conflict refused), a lifo ring buffer (drop_oldest) whose dropped
// waiter's executor run exits 75 saying so, and a fail-fast pool whose
// busy slot is refused at once with exit 75.
func TestStrategiesAndSeedNamesAsAUserRunsThem(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "qs", "", "15s")
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "POOL_CAPACITIES=") })
	env = append(env, "MIRROR_NEURON_EXECUTOR_POOL_CAPACITIES=gpu=1,ff=1", "MIRROR_NEURON_EXECUTOR_MAX_CONCURRENCY=3",
		"POOL_POLICIES=gpu=lifo", "POOL_MAX_QUEUE=gpu=1,ff=0", "POOL_ON_FULL=gpu=drop_oldest")

	// Both names set, unlike: refused at once, naming both.
	code, out := runLeasemgr(t, append(slices.Clone(env), "EXECUTOR_MAX_CONCURRENCY=4"))
	if code != 2 || !strings.Contains(out, `MIRROR_NEURON_EXECUTOR_MAX_CONCURRENCY: "3": conflicts with EXECUTOR_MAX_CONCURRENCY="4"`) {
		t.Fatalf("conflicting alias: exit %d, want 2 naming both variables:\n%s", code, out)
	}

	m := startManager(t, env, httpAddr)
	for _, note := range []string{
		"MIRROR_NEURON_EXECUTOR_POOL_CAPACITIES is read as POOL_CAPACITIES=gpu=1,ff=1",
		"MIRROR_NEURON_EXECUTOR_MAX_CONCURRENCY is read as EXECUTOR_MAX_CONCURRENCY=3",
	} {
		if !strings.Contains(m.Output(), note) {
			t.Errorf("leasemgr's log lacks the note %q:\n%s", note, m.Output())
		}
	}
	code, out = runLeasemgr(t, env, "pools")
	for _, re := range []string{`qs\s+default\s+3\s`, `qs\s+gpu\s+1\s+0\s+1\s+0\s+0\s+lifo max_queue=1 on_full=drop_oldest`, `qs\s+ff\s+1\s+0\s+1\s+0\s+0\s+fifo fail_fast`} {
		if code != 0 || !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("leasemgr pools: exit %d, lacks %s:\n%s", code, re, out)
		}
	}
	code, out = runLeasemgr(t, env, "pools", "--json")
	for _, re := range []string{`"policy":\s*"lifo"`, `"on_full":\s*"drop_oldest"`, `"fail_fast":\s*true`} {
		if code != 0 || !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("leasemgr pools --json: exit %d, lacks %s:\n%s", code, re, out)
		}
	}

	hold := func(pool string) *proc {
		p := start(t, env, "executor", "run", "--pool", pool, "--", "sleep", "120")
		eventually(t, 30*time.Second, "the holder's lease of "+pool, func() bool { return strings.Contains(p.Output(), "granted: 1 slot(s) of pool "+pool) })
		return p
	}
	stop := func(p *proc) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.Wait(t, 30*time.Second)
	}

	// Fail fast: the slot is busy, and the pool has no queue.
	h := hold("ff")
	code, out = runExecutor(t, env, "run", "--pool", "ff", "--", "true")
	if code != 75 || !strings.Contains(out, "would_wait") || !strings.Contains(out, "the pool has no queue") {
		t.Fatalf("run on a busy fail-fast pool: exit %d, want 75 would_wait saying the pool has no queue:\n%s", code, out)
	}
	stop(h)

	// drop_oldest: a queue of one keeps the newest waiter.
	h = hold("gpu")
	old := start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
	eventually(t, 30*time.Second, "the first waiter to queue", func() bool { return strings.Contains(old.Output(), "position 1 in queue") })
	newer := start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
	if code := old.Wait(t, 30*time.Second); code != 75 || !strings.Contains(old.Output(), "dropped") || !strings.Contains(old.Output(), `dropped from pool "gpu"`) {
		t.Fatalf("the dropped waiter: exit %d, want 75 saying it was dropped:\n%s", code, old.Output())
	}
	eventually(t, 30*time.Second, "the newer waiter to queue", func() bool { return strings.Contains(newer.Output(), "position 1 in queue") })
	stop(h)
	if code := newer.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the newer waiter: exit %d, want it run once the slot was free:\n%s", code, newer.Output())
	}
}

package integration

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKeyLimitAsAUserRunsIt: a fair pool of 4 with POOL_KEY_LIMITS=gpu=2,
// driven by executor run --key as a user runs it. Customer a's third run
// waits with two slots free, customer b's runs go past it, and a's third
// starts once one of a's own runs ends. Bad keys and the variable on a
// pool that is not fair are refused, naming what is wrong.
func TestKeyLimitAsAUserRunsIt(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "keys", "gpu=4,plain=1", "15s")
	env = append(env, "POOL_POLICIES=gpu=fair", "POOL_KEY_LIMITS=gpu=2", "POOL_FAIR_QUANTUM=gpu=2", "POOL_STARVATION_AGE=gpu=1m")
	startManager(t, env, httpAddr)

	a1 := start(t, env, "executor", "run", "--pool", "gpu", "--key", "cust-a", "--", "sleep", "120")
	a2 := start(t, env, "executor", "run", "--pool", "gpu", "--key", "cust-a", "--", "sleep", "120")
	eventually(t, 20*time.Second, "a's two runs to hold their slots", func() bool { return httpPools(t, httpAddr)["gpu"].InUse == 2 })
	a3 := start(t, env, "executor", "run", "--pool", "gpu", "--key", "cust-a", "--", "echo", "a3 ran")
	eventually(t, 20*time.Second, "a's third run to wait", func() bool { return httpPools(t, httpAddr)["gpu"].QueuedRequests == 1 })

	code, out := runLeasemgr(t, env, "pools")
	if code != 0 || !regexp.MustCompile(`keys\s+gpu\s+4\s+2\s+2\s+1\s+1\s+fair key_cap=2`).MatchString(out) ||
		!regexp.MustCompile(`key cust-a\s+2\s+1\s+1\s+weight=1 deficit=0 ready=0 capped selected=2 deferred=1`).MatchString(out) {
		t.Fatalf("leasemgr pools: exit %d, want gpu with 2 in use, 1 waiting, fair key_cap=2, and cust-a capped (selected twice, deferred by its cap once):\n%s", code, out)
	}
	if sc := httpPools(t, httpAddr)["gpu"].Scheduler; sc == nil || sc.Quantum != 2 || sc.StarvationAgeMs != 60000 || len(sc.Keys) != 1 || !sc.Keys[0].Capped {
		t.Fatalf("/v1/pools gpu scheduler: %+v, want quantum 2, age 60000 ms, cust-a capped", sc)
	}
	// b is not held up by a's waiting run, twice over.
	for i := range 2 {
		if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--key", "cust-b", "--wait", "20s", "--", "true"); code != 0 {
			t.Fatalf("b's run %d behind a's waiting one: exit %d:\n%s", i+1, code, out)
		}
	}
	select {
	case <-a3.done:
		t.Fatalf("a's third run ended while a held its limit:\n%s", a3.Output())
	default:
	}
	if s := httpPools(t, httpAddr)["gpu"]; s.InUse != 2 || s.QueuedRequests != 1 || s.KeyCap != 2 {
		t.Fatalf("after b's runs: %+v, want a's 2 in use and its third still waiting", s.Stats)
	}

	// One of a's runs ends: its third starts.
	if err := a1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a1.Wait(t, 30*time.Second)
	if code := a3.Wait(t, 30*time.Second); code != 0 || !strings.Contains(a3.Output(), "a3 ran") {
		t.Fatalf("a's third run: exit %d:\n%s", code, a3.Output())
	}
	_ = a2.cmd.Process.Signal(syscall.SIGTERM)
	a2.Wait(t, 30*time.Second)

	// Bad input, named.
	if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--key", strings.Repeat("k", 129), "--", "true"); code == 0 || !strings.Contains(out, "key is longer than 128 bytes") {
		t.Fatalf("a key of 129 bytes: exit %d:\n%s", code, out)
	}
	if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--slots", "3", "--key", "cust-c", "--", "true"); code == 0 || !strings.Contains(out, "exceeds_capacity") {
		t.Fatalf("3 slots over a key limit of 2: exit %d:\n%s", code, out)
	}
	bad, _ := managerEnv(t, "keys2", "gpu=4,plain=1", "15s")
	bad = append(bad, "POOL_POLICIES=gpu=fair", "POOL_KEY_LIMITS=plain=1", "POOL_FAIR_QUANTUM=plain=2")
	if code, out := runLeasemgr(t, bad); code != 2 || !strings.Contains(out, `POOL_KEY_LIMITS: entry "plain=1": pool "plain" is fifo, not fair: a per-key limit needs POOL_POLICIES=plain=fair`) ||
		!strings.Contains(out, `POOL_FAIR_QUANTUM: entry "plain=2": pool "plain" is fifo, not fair`) {
		t.Fatalf("POOL_KEY_LIMITS on a fifo pool: exit %d:\n%s", code, out)
	}
}

package integration

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestResizeCommand(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "rs", "gpu=1", "15s")
	startManager(t, env, httpAddr)

	p := start(t, env, "leasemgr", "resize", "gpu=3", "io=2")
	if code := p.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("resize exit %d", code)
	}
	if !regexp.MustCompile(`rs\s+gpu\s+3\s`).MatchString(p.Output()) || !regexp.MustCompile(`rs\s+io\s+2\s`).MatchString(p.Output()) {
		t.Fatalf("resize output:\n%s", p.Output())
	}
	if s := httpPools(t, httpAddr); s["gpu"].Capacity != 3 || s["io"].Capacity != 2 {
		t.Fatalf("pools after resize: %+v", s)
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"resize"}, 2, "nothing to change"},
		// A command-line argument is named as one, not as POOL_CAPACITIES.
		{[]string{"resize", "gpu=0"}, 2, `argument "gpu=0": capacity must be a positive integer`},
		{[]string{"resize", "--remove", "nope"}, 1, "unknown_pool"},
	} {
		p := start(t, env, "leasemgr", tc.args...)
		if code := p.Wait(t, 10*time.Second); code != tc.code || !strings.Contains(p.Output(), tc.says) || strings.Contains(p.Output(), "POOL_CAPACITIES") {
			t.Fatalf("%v: exit %d, want %d saying %q:\n%s", tc.args, code, tc.code, tc.says, p.Output())
		}
	}
	reset := start(t, env, "leasemgr", "resize", "--reset")
	if code := reset.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("reset exit %d:\n%s", code, reset.Output())
	}
	if s := httpPools(t, httpAddr); s["gpu"].Capacity != 1 || len(s) != 2 {
		t.Fatalf("pools after reset: %+v", s)
	}
}

func TestPolicyConfigShowsInPools(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "pol", "gpu=1,io=2", "15s")
	env = append(env, "POOL_POLICIES=gpu=fair,io=priority", "POOL_MAX_QUEUE=io=5", "TENANT_CAPS=gpu=1", "TENANT_WEIGHTS=a:3")
	startManager(t, env, httpAddr)
	hold := start(t, env, "executor", "run", "--pool", "gpu", "--tenant", "a", "--", "sleep", "3")
	eventually(t, 10*time.Second, "slot held", func() bool { return httpPools(t, httpAddr)["gpu"].InUse == 1 })
	p := start(t, env, "leasemgr", "pools")
	if code := p.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("pools exit %d", code)
	}
	for _, re := range []string{`pol\s+gpu\s+1\s+1\s+0\s+0\s+0\s+fair tenant_cap=1`, `pol\s+io\s+2\s+0\s+2\s+0\s+0\s+priority max_queue=5`, `tenant a\s+1\s+0\s+0\s+weight=3`} {
		if !regexp.MustCompile(re).MatchString(p.Output()) {
			t.Fatalf("pools output lacks %s:\n%s", re, p.Output())
		}
	}
	busy := start(t, env, "executor", "run", "--pool", "gpu", "--no-wait", "--", "true")
	if code := busy.Wait(t, 10*time.Second); code != 75 || !strings.Contains(busy.Output(), "would_wait") {
		t.Fatalf("--no-wait on a full pool: exit %d:\n%s", code, busy.Output())
	}
	bad := start(t, env, "executor", "run", "--pool", "io", "--priority", "urgent", "--", "true")
	if code := bad.Wait(t, 10*time.Second); code != 2 || !strings.Contains(bad.Output(), "--priority") {
		t.Fatalf("bad --priority: exit %d:\n%s", code, bad.Output())
	}
	hold.Wait(t, 10*time.Second)
}

package integration

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestResizeCommand(t *testing.T) {
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
		{[]string{"resize", "gpu=0"}, 2, `entry "gpu=0": capacity must be a positive integer`},
		{[]string{"resize", "--remove", "nope"}, 1, "unknown_pool"},
	} {
		p := start(t, env, "leasemgr", tc.args...)
		if code := p.Wait(t, 10*time.Second); code != tc.code || !strings.Contains(p.Output(), tc.says) {
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

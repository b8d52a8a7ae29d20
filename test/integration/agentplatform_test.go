package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/test/harness"
)

// Issue 42's "done when", in one story through the real binaries: an
// agent platform says "at most 200,000 tokens a minute to this provider,
// at most 8 calls at once, only the newest run per conversation", tries
// the budget in shadow mode first, then turns it on.
//
//  1. In shadow mode two runs of 120,000 tokens each hold the pool at
//     once: the budget would have queued the second, and says so
//     (budget/queued), while granting it; each settles what its command
//     wrote to $LEASE_USAGE_FILE.
//  2. Restarted without shadow mode, the window the shadow runs spent is
//     kept: a try of 1 unit is refused (exit 75), naming the budget.
//  3. Two runs of one conversation, the second --cancel-in-progress: the
//     first is stopped (exit 77) and the second runs — on a pool whose
//     budget the window left no room in, so this part has a pool of its own
//     (POOL_BUDGETS applies per pool).
func TestAgentPlatformLimits(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "agents", "llm=8,chat=8", "15s")
	env = append(env, "POOL_BUDGETS=llm=200000/m", "POOL_SHADOW=llm")
	mgr := startManager(t, env, httpAddr)
	dir := sharedDir(t)
	run := func(e []string, name string, args ...string) *proc {
		// The command writes what it used, then holds its lease until
		// the test lets it go (or is asked to stop: TERM).
		script := `echo "$USED" > "$LEASE_USAGE_FILE"; trap 'exit 0' TERM; touch "$DIR/` + name + `-ran"; while [ ! -e "$DIR/` + name + `-go" ]; do sleep 0.05; done`
		args = append([]string{"run", "--writable", dir, "--env", "DIR=" + dir}, args...)
		return start(t, e, "executor", append(args, "--", "sh", "-c", script)...)
	}
	let := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name+"-go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// 1. Shadow mode: both run at once.
	a := run(env, "a", "--pool", "llm", "--units", "120000", "--env", "USED=120000")
	waitFile(t, dir, "a-ran", a)
	b := run(env, "b", "--pool", "llm", "--units", "120000", "--env", "USED=120000")
	waitFile(t, dir, "b-ran", b)
	llm := httpPools(t, httpAddr)["llm"]
	if !llm.Shadow || llm.InUse != 2 || llm.BudgetReserved != 240000 || llm.ShadowCounts.Of(pools.ShadowBudget, pools.ShadowQueued) != 1 {
		t.Fatalf("llm in shadow mode with both runs: %+v (shadow counts %v); want shadow, 2 in use, 240000 reserved, budget/queued 1", llm.Stats, llm.ShadowCounts)
	}
	// The cluster page reads /v1/cluster: the pool's budget, its use and
	// its shadow mode are there.
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(harness.GetOK(t, "http://"+httpAddr+"/v1/cluster"))); err != nil {
		t.Fatal(err)
	}
	if page := compact.String(); !strings.Contains(page, `"name":"llm","capacity":8,"in_use":2`) || !strings.Contains(page, `"budget":"200000/m"`) ||
		!strings.Contains(page, `"budget_reserved":240000`) || !strings.Contains(page, `"shadow":true`) {
		t.Errorf("/v1/cluster does not show llm's budget and shadow mode:\n%s", page)
	}
	let("a")
	let("b")
	for name, p := range map[string]*proc{"a": a, "b": b} {
		if code := p.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("shadow run %s: exit %d:\n%s", name, code, p.Output())
		}
	}
	eventually(t, 10*time.Second, "the two settlements in the window", func() bool {
		return httpPools(t, httpAddr)["llm"].BudgetUsed == 240000
	})

	// 2. The budget on: the window the shadow runs spent is kept.
	stopManager(t, mgr)
	on := append(append([]string(nil), env...), "POOL_SHADOW=")
	startManager(t, on, httpAddr)
	if llm := httpPools(t, httpAddr)["llm"]; llm.Shadow || llm.BudgetUsed != 240000 {
		t.Fatalf("llm after the restart without shadow mode: %+v; want no shadow, 240000 used", llm.Stats)
	}
	try := start(t, on, "executor", "run", "--pool", "llm", "--units", "1", "--no-wait", "--", "true")
	if code := try.Wait(t, 30*time.Second); code != 75 || !strings.Contains(try.Output(), "budget") {
		t.Fatalf("a try of 1 unit on the spent budget: exit %d, want 75 naming the budget:\n%s", code, try.Output())
	}

	// 3. The newest run of a conversation wins.
	first := run(on, "first", "--pool", "chat", "--group", "conv-1", "--env", "USED=0")
	waitFile(t, dir, "first-ran", first)
	second := run(on, "second", "--pool", "chat", "--group", "conv-1", "--cancel-in-progress", "--env", "USED=0")
	if code := first.Wait(t, time.Minute); code != 77 {
		t.Fatalf("the older run of conv-1: exit %d, want 77 (stopped by the newer):\n%s", code, first.Output())
	}
	waitFile(t, dir, "second-ran", second)
	let("second")
	if code := second.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the newer run of conv-1: exit %d:\n%s", code, second.Output())
	}
}

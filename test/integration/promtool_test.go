package integration

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/debpkg"
)

// promtool is Debian's prometheus package's linter; the test installs the
// package when it is missing. SLOTLEASE_SKIP_PROMTOOL=1 skips the test.
var promtool = debpkg.Tool{Path: "/usr/bin/promtool", Pkg: "prometheus", SkipEnv: "SLOTLEASE_SKIP_PROMTOOL", Test: "the promtool test"}

// The real leasemgr's /metrics, after some traffic (a grant, one that
// waited, a rejection), passes `promtool check metrics`: base units, counter
// names, help texts. The traffic first, so the histograms have samples and
// the rejection series carries its code.
func TestMetricsPassPromtool(t *testing.T) {
	t.Parallel()
	tool := promtool.Ensure(t)
	const node = "prom"
	env, httpAddr := managerEnv(t, node, "gpu=1,idle=3,fair=2", "15s")
	env = append(env, "POOL_POLICIES=fair=fair", // the fair scheduler's families too
		"POOL_BUDGETS=tokens=1000/m", // the budgets'
		"POOL_SHADOW=idle")           // and shadow mode's
	startManager(t, env, httpAddr)

	// The first scrape, before any traffic: the histograms of every pool
	// are there at zero (issue 31: they were absent until their first
	// observation), and so is the build information.
	first := scrapeMetrics(t, httpAddr)
	for _, want := range []string{
		`lease_queue_wait_seconds_count{node="prom",pool="gpu"} 0`,
		`lease_queue_wait_seconds_bucket{node="prom",pool="idle",le="+Inf"} 0`,
		`lease_grant_latency_seconds_count{node="prom",pool="idle"} 0`,
		`lease_grant_latency_seconds_sum{node="prom",pool="default"} 0`,
		`lease_scheduler_selections_total{key="_other",node="prom",pool="fair",tenant="_other"} 0`,
		`lease_scheduler_starvation_promotions_total{node="prom",pool="fair"} 0`,
		`lease_shadow_total{action="queued",node="prom",pool="idle",reason="capacity"} 0`,
		`slotlease_build_info{`,
		`lease_budget_limit{node="prom",pool="tokens"} 1000`,
		`lease_budget_window_seconds{node="prom",pool="tokens"} 60`,
		`lease_budget_used{node="prom",pool="tokens"} 0`,
		`lease_budget_reserved{node="prom",pool="tokens"} 0`,
	} {
		if !strings.Contains(first, want) {
			t.Errorf("the first scrape of /metrics has no line %q", want)
		}
	}
	promtoolCheck(t, tool, first)

	holder := start(t, env, "executor", "run", "--pool", "gpu", "--", "sleep", "2")
	keyed := start(t, env, "executor", "run", "--pool", "fair", "--key", "acme", "--", "sleep", "2")
	eventually(t, 15*time.Second, "the first run to hold the gpu slot", func() bool { return httpPools(t, httpAddr)["gpu"].InUse == 1 })
	eventually(t, 15*time.Second, "the keyed run to hold a slot of the fair pool", func() bool { return httpPools(t, httpAddr)["fair"].InUse == 1 })
	held := scrapeMetrics(t, httpAddr)
	for _, want := range []string{
		`lease_scheduler_selections_total{key="acme",node="prom",pool="fair",tenant=""} 1`,
		`lease_scheduler_deferrals_total{key="acme",node="prom",pool="fair",tenant=""} 0`,
		`lease_scheduler_deficit{key="acme",node="prom",pool="fair",tenant=""} 0`,
	} {
		if !strings.Contains(held, want) {
			t.Errorf("/metrics while a keyed run holds a slot has no line %q", want)
		}
	}
	promtoolCheck(t, tool, held)
	if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--wait", "25s", "--", "true"); code != 0 {
		t.Fatalf("executor run that waits for the slot: exit %d\n%s", code, out)
	}
	if code := holder.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the holding run: exit %d\n%s", code, holder.Output())
	}
	if code := keyed.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the keyed run: exit %d\n%s", code, keyed.Output())
	}
	if code, _ := runExecutor(t, env, "run", "--pool", "gpu", "--slots", "2", "--", "true"); code == 0 {
		t.Fatal("executor run for 2 slots of a 1-slot pool succeeded")
	}

	body := scrapeMetrics(t, httpAddr)
	for _, want := range []string{
		`lease_grant_latency_seconds_count{node="prom",pool="gpu"} 2`,
		`lease_queue_wait_seconds_count{node="prom",pool="gpu"} 2`,
		`lease_rejections_total{code="exceeds_capacity",node="prom",pool="gpu"} 1`,
		`lease_rejections_total{code="queue_full",node="prom",pool="idle"} 0`, // a pool without traffic has its counters
		`lease_grants_total{node="prom",pool="idle"} 0`,
		`lease_queue_wait_seconds_count{node="prom",pool="idle"} 0`, // still at zero beside the observed
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no line %q", want)
		}
	}
	if strings.Contains(body, "milliseconds") {
		t.Error("/metrics still has a series in milliseconds")
	}

	promtoolCheck(t, tool, body)
}

// promtoolCheck runs promtool check metrics on body.
func promtoolCheck(t *testing.T, tool, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || out.Len() != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", tail([]byte(body), 20000))
	}
}

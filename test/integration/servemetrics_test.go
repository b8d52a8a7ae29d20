package integration

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// executor serve exports its metrics on EXECUTOR_METRICS_ADDR (or
// --metrics-addr): its attempts by outcome and those running, per pool,
// at 0 from the start, and the build information (issue 31: it exported
// none).
func TestServeExportsMetrics(t *testing.T) {
	t.Parallel()
	tool := promtool.Ensure(t)
	env, httpAddr := managerEnv(t, "servemetrics", "p=1", "15s")
	startManager(t, env, httpAddr)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start(t, append(env, "EXECUTOR_METRICS_ADDR="+addr), "executor", "serve", "--pools", "p", "--poll", "100ms")
	var first string
	eventually(t, 20*time.Second, "serve's /metrics", func() bool {
		first = scrapeOrEmpty(addr)
		return first != ""
	})
	for _, want := range []string{
		`executor_job_attempts_total{node="servemetrics",outcome="succeeded",pool="p"} 0`,
		`executor_job_attempts_total{node="servemetrics",outcome="dead",pool="p"} 0`,
		`executor_jobs_running{node="servemetrics",pool="p"} 0`,
		`slotlease_build_info{`,
		`go_goroutines `,
	} {
		if !strings.Contains(first, want) {
			t.Errorf("serve's first /metrics has no line %q", want)
		}
	}
	promtoolCheck(t, tool, first)

	if code, out := runExecutor(t, env, "submit", "--pool", "p", "--", "true"); code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	eventually(t, 30*time.Second, "the succeeded attempt on serve's /metrics", func() bool {
		return strings.Contains(scrapeOrEmpty(addr), `executor_job_attempts_total{node="servemetrics",outcome="succeeded",pool="p"} 1`)
	})

	// A bad address is refused at start, naming the variable.
	bad := start(t, append(env, "EXECUTOR_METRICS_ADDR=no-port"), "executor", "serve", "--pools", "p")
	if code := bad.Wait(t, 30*time.Second); code != 2 || !strings.Contains(bad.Output(), `EXECUTOR_METRICS_ADDR: "no-port": must be host:port`) {
		t.Errorf("EXECUTOR_METRICS_ADDR=no-port: exit %d, want 2 naming it:\n%s", code, bad.Output())
	}
}

// scrapeOrEmpty is GET http://addr/metrics, "" on any failure.
func scrapeOrEmpty(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

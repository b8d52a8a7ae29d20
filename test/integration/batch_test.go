package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
)

// joinNode is the environment of a second node's leasemgr on the first
// node's NATS (with the same home, so it finds the credentials) and of the
// executors of that node.
func joinNode(t *testing.T, first []string, node, pools string) (env []string, httpAddr string) {
	t.Helper()
	httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return []string{
		"NODE_ID=" + node, "POOL_CAPACITIES=" + pools, "LEASE_TTL=" + envValue(first, "LEASE_TTL"),
		"NATS_URL=" + natsURL(first), "HTTP_ADDR=" + httpAddr, "HOME=" + envValue(first, "HOME"),
	}, httpAddr
}

// batchScript is every job of the fan-out batch (run as sh SCRIPT): below
// level 3 it submits two children in one in-job `executor submit --specs -`
// (idempotency keys, so a retried attempt adds none), and the job started
// with KILLME=1 SIGKILLs itself on its first attempt, after its children
// are in.
const batchScript = `set -u
if [ "$LEVEL" -lt 3 ]; then
	for i in 1 2; do
		printf '{"idempotency_key":"%s-%d","pool":"p","command":["sh","%s"],"env":{"LEVEL":"%d"}}\n' "$JOB_ID" $i "$0" $((LEVEL + 1))
	done | executor submit --specs - > /dev/null || exit 1
fi
if [ "${KILLME:-}" = 1 ] && [ "$JOB_ATTEMPT" = 1 ]; then kill -KILL $$; fi
exit 0
`

// Three nodes on one NATS; root jobs submitted as one batch from a JSON
// Lines file fan out through the in-job executor submit to depth 3, 15
// jobs per root: 300 jobs with BATCH_LONG=1 (about 100 s on 2 cores, CPU
// bound: every job starts race-built binaries), 60 in the normal run.
// executor wait --batch returns when, and only when, the last of them has
// ended, with exact counts; the job SIGKILLed on its first attempt is
// retried and counted once.
func TestBatchFanOutWaitAcrossNodes(t *testing.T) {
	t.Parallel()
	roots := 4
	if os.Getenv("BATCH_LONG") != "" {
		roots = 20
	}
	total := roots * 15
	env1, http1 := managerEnv(t, "b1", "p=4", "15s")
	startManager(t, env1, http1)
	envs := [][]string{env1}
	for _, n := range []string{"b2", "b3"} {
		env, httpAddr := joinNode(t, env1, n, "p=4")
		startManager(t, env, httpAddr)
		envs = append(envs, env)
	}
	for _, env := range envs {
		start(t, env, "executor", "serve", "--pools", "p", "--poll", "100ms")
	}

	script := filepath.Join(openTempDir(t), "batch.sh")
	if err := os.WriteFile(script, []byte(batchScript), 0o644); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range roots {
		spec := map[string]any{"pool": "p", "command": []string{"sh", script}, "env": map[string]string{"LEVEL": "0"}}
		if i == roots/2 {
			spec["env"].(map[string]string)["KILLME"] = "1"
		}
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	specs := filepath.Join(t.TempDir(), "roots.jsonl")
	if err := os.WriteFile(specs, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := runExecutor(t, env1, "submit", "--batch", "big", "--specs", specs)
	if ids := strings.Fields(out); code != 0 || len(ids) != roots {
		t.Fatalf("submit --specs: exit %d, want %d ids:\n%s", code, roots, out)
	}

	started := time.Now()
	wait := start(t, env1, "executor", "wait", "--batch", "big", "--timeout", "4m")
	code = wait.Wait(t, 5*time.Minute)
	returned := time.Now()
	if code != 0 {
		t.Fatalf("executor wait: exit %d\n%s", code, wait.Output())
	}
	t.Logf("executor wait returned after %v:\n%s", returned.Sub(started).Round(time.Millisecond), wait.Output())
	if want := fmt.Sprintf("batch big: %d job(s): %d succeeded, 0 dead, 0 cancelled; 1 retried", total, total); !strings.Contains(wait.Output(), want) {
		t.Fatalf("summary, want %q:\n%s", want, wait.Output())
	}

	q := jobQueue(t, env1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := q.Batch(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	perDepth, perNode := map[int]int{}, map[string]int{}
	var last time.Time
	for _, r := range recs {
		if r.State != jobs.StateSucceeded {
			t.Fatalf("job %s is %s after executor wait returned", r.ID, r.State)
		}
		perDepth[r.Spec.Depth]++
		perNode[r.Node]++
		if r.UpdatedAt.After(last) {
			last = r.UpdatedAt
		}
		if r.Spec.Env["KILLME"] == "1" && (r.Attempts != 2 || r.Spec.Depth != 0) {
			t.Fatalf("the self-killing job: %d attempts, want 2", r.Attempts)
		}
	}
	if len(recs) != total || perDepth[0] != roots || perDepth[1] != 2*roots || perDepth[2] != 4*roots || perDepth[3] != 8*roots {
		t.Fatalf("%d jobs, per depth %v: want %d as %d, %d, %d, %d", len(recs), perDepth, total, roots, 2*roots, 4*roots, 8*roots)
	}
	if returned.Before(last) {
		t.Fatalf("executor wait returned at %v, before the last job ended at %v", returned, last)
	}
	t.Logf("jobs per node: %v", perNode)
	if len(perNode) != 3 {
		t.Fatalf("jobs ran on %d nodes, want 3: %v", len(perNode), perNode)
	}
}

// Control through the CLI: cancel a queued and a running job, purge a
// pool, a batch's --fail-fast, and wait's --timeout.
func TestJobControlCLI(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "ctl", "p=1", "15s")
	startManager(t, env, httpAddr)
	dir := sharedDir(t)
	run := func(wantCode int, args ...string) string {
		t.Helper()
		code, out := runExecutor(t, env, args...)
		if code != wantCode {
			t.Fatalf("executor %v: exit %d, want %d\n%s", args, code, wantCode, out)
		}
		return out
	}
	submit := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(run(0, append([]string{"submit"}, args...)...))
	}
	holder := submit("--pool", "p", "--writable", dir, "--env", "DIR="+dir, "--", "sh", "-c", `touch "$DIR/holder-ran"; while :; do sleep 0.05; done`)
	start(t, env, "executor", "serve", "--pools", "p", "--poll", "100ms")
	q := jobQueue(t, env)
	eventually(t, 20*time.Second, "the holder to run", func() bool { return record(q, holder).State == jobs.StateRunning })
	queued := submit("--pool", "p", "--writable", dir, "--env", "DIR="+dir, "--", "sh", "-c", `touch "$DIR/queued-ran"`)

	if out := run(0, "cancel", queued); !strings.Contains(out, queued+"\tcancelled") {
		t.Fatalf("cancel of the queued job:\n%s", out)
	}
	if out := run(0, "cancel", "--reason", "enough", holder); !strings.Contains(out, holder+"\tstopping (running on node ctl)") {
		t.Fatalf("cancel of the running job:\n%s", out)
	}
	eventually(t, 10*time.Second, "the running job to be cancelled and its slot freed", func() bool {
		return record(q, holder).State == jobs.StateCancelled && httpPools(t, httpAddr)["p"].InUse == 0
	})
	if out := run(0, "status", holder); !strings.Contains(out, "cancelled: enough") {
		t.Fatalf("status of the cancelled job:\n%s", out)
	}
	if out := run(0, "cancel", holder); !strings.Contains(out, holder+"\talready cancelled") {
		t.Fatalf("second cancel:\n%s", out)
	}
	if out := run(1, "cancel", "no-such-job"); !strings.Contains(out, "no-such-job\tnot found") {
		t.Fatalf("cancel of an unknown job:\n%s", out)
	}
	// A job submitted after the cancelled one runs in the freed slot: the
	// queue is served in order, so by the time it has run, the cancelled job
	// would have run before it.
	after := submit("--pool", "p", "--writable", dir, "--env", "DIR="+dir, "--", "sh", "-c", `touch "$DIR/after-ran"`)
	eventually(t, 30*time.Second, "the job submitted after the cancelled one to run", func() bool {
		return record(q, after).State == jobs.StateSucceeded
	})
	if _, err := os.Stat(filepath.Join(dir, "after-ran")); err != nil {
		t.Fatalf("the later job left no mark: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "queued-ran")); err == nil {
		t.Fatal("the job cancelled while queued ran")
	}
	if _, err := os.Stat(filepath.Join(dir, "holder-ran")); err != nil {
		t.Fatalf("the holder could not leave its mark, so the check above proves nothing: %v", err)
	}

	// Purge: only with --confirm; jobs of a pool nobody serves.
	for range 3 {
		submit("--pool", "q", "--no-pool-check", "--", "true") // a pool nobody has
	}
	if _, out := runExecutor(t, env, "purge", "--pool", "q"); !strings.Contains(out, "add --confirm") {
		t.Fatalf("purge without --confirm:\n%s", out)
	}
	if out := run(0, "purge", "--pool", "q", "--confirm"); !strings.HasPrefix(out, "3\n") {
		t.Fatalf("purge:\n%s", out)
	}
	if out := run(0, "jobs", "--state", "cancelled", "--json"); strings.Count(out, `"state": "cancelled"`) != 5 {
		t.Fatalf("jobs --state cancelled: want 5 cancelled jobs:\n%s", out)
	}

	// --fail-fast: the failing job cancels the rest of its batch.
	bad := submit("--batch", "ff", "--pool", "p", "--max-attempts", "1", "--", "sh", "-c", "echo broken >&2; exit 3")
	for range 2 {
		submit("--batch", "ff", "--pool", "p", "--", "sleep", "60")
	}
	out := run(1, "wait", "--batch", "ff", "--fail-fast")
	if !strings.Contains(out, "batch ff: 3 job(s): 0 succeeded, 1 dead, 2 cancelled") || !strings.Contains(out, "dead "+bad+" after 1 attempt(s): exit code 3: broken") ||
		!strings.Contains(out, "did not succeed") {
		t.Fatalf("wait --fail-fast:\n%s", out)
	}

	// --timeout: exit 124, saying what is left.
	slow := submit("--batch", "slow", "--pool", "p", "--", "sleep", "60")
	if out := run(124, "wait", "--timeout", "1s", slow); !strings.Contains(out, "1 of 1 job(s) have not ended") {
		t.Fatalf("wait --timeout:\n%s", out)
	}
	run(0, "cancel", "--batch", "slow")
	if out := run(1, "wait", "--batch", "slow"); !strings.Contains(out, "0 succeeded, 0 dead, 1 cancelled") {
		t.Fatalf("wait for the cancelled batch:\n%s", out)
	}
}

package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
)

// fanOutScript runs as every job of the fan-out: it records its
// environment, what it sees of the credential directory and which
// executor it finds, then submits two children with the in-job `executor
// submit` (no flags but the pool, no credentials) until level 3, where
// the depth limit refuses it.
const fanOutScript = `set -u
env > "$OUT/env-$JOB_ID"
ls -A "$HIDDEN" > "$OUT/hidden-$JOB_ID" 2>&1
command -v executor > "$OUT/which-$JOB_ID"
if [ "$LEVEL" -lt 3 ]; then
	for i in 1 2; do
		executor submit --pool p --writable "$OUT" --env OUT="$OUT" --env HIDDEN="$HIDDEN" --env LEVEL=$((LEVEL + 1)) --env SCRIPT="$SCRIPT" -- sh -c "$SCRIPT" || exit 1
	done
else
	executor submit --pool p -- true > "$OUT/deep-$JOB_ID" 2>&1
	echo "exit $?" >> "$OUT/deep-$JOB_ID"
fi`

// A job run by `executor serve` fans out to depth 3 through the in-job
// `executor submit`: every follow-up records its parent, its depth and the
// root's batch; no job holds a NATS credential in its environment or can
// read the credential directory; at --max-depth 3 the leaves are refused
// with a clear error.
func TestFollowUpsFromInsideJobs(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "fan", "p=4", "15s")
	startManager(t, env, httpAddr)
	out := sharedDir(t)
	hidden := authDirFor(t, envValue(env, "HOME"), natsURL(env))
	if entries, err := os.ReadDir(hidden); err != nil || len(entries) == 0 {
		t.Fatalf("the credential directory %s is empty or missing (%v): the test would prove nothing", hidden, err)
	}

	root, _ := json.Marshal(map[string]any{
		"pool": "p", "batch": "fan", "command": []string{"sh", "-c", fanOutScript}, "writable": []string{out},
		"env": map[string]string{"OUT": out, "HIDDEN": hidden, "LEVEL": "0", "SCRIPT": fanOutScript},
	})
	specFile := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(specFile, root, 0o600); err != nil {
		t.Fatal(err)
	}
	code, o := runExecutor(t, env, "submit", "--spec", specFile)
	rootID := strings.TrimSpace(o)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, o)
	}
	start(t, env, "executor", "serve", "--pools", "p", "--max-depth", "3", "--poll", "100ms")

	q := jobQueue(t, env)
	var recs []jobs.Record
	eventually(t, 90*time.Second, "15 jobs of batch fan to succeed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		all, err := q.List(ctx, 0, jobs.StateSucceeded)
		recs = recs[:0]
		for _, r := range all {
			if r.Spec.Batch == "fan" {
				recs = append(recs, r)
			}
		}
		return err == nil && len(recs) == 15
	})

	byID := map[string]jobs.Record{}
	for _, r := range recs {
		byID[r.ID] = r
	}
	perDepth := map[int]int{}
	children := map[string]int{}
	for _, r := range recs {
		perDepth[r.Spec.Depth]++
		if r.ID == rootID {
			if r.Spec.Parent != "" || r.Spec.Depth != 0 {
				t.Fatalf("root: parent %q depth %d", r.Spec.Parent, r.Spec.Depth)
			}
			continue
		}
		p, ok := byID[r.Spec.Parent]
		if !ok || r.Spec.Depth != p.Spec.Depth+1 || r.Spec.Env["LEVEL"] != strconv.Itoa(r.Spec.Depth) {
			t.Fatalf("job %s: parent %q (found %v), depth %d, LEVEL %s", r.ID, r.Spec.Parent, ok, r.Spec.Depth, r.Spec.Env["LEVEL"])
		}
		children[r.Spec.Parent]++
	}
	if perDepth[0] != 1 || perDepth[1] != 2 || perDepth[2] != 4 || perDepth[3] != 8 {
		t.Fatalf("jobs per depth %v, want 1, 2, 4, 8", perDepth)
	}
	for id, n := range children {
		if n != 2 {
			t.Fatalf("job %s has %d children, want 2", id, n)
		}
	}

	for _, r := range recs {
		envDump, err := os.ReadFile(filepath.Join(out, "env-"+r.ID))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(envDump), "\n") {
			name, _, _ := strings.Cut(line, "=")
			if strings.HasPrefix(name, "NATS_") || strings.Contains(line, "SU") && strings.Contains(line, "-----") {
				t.Fatalf("job %s sees %q in its environment", r.ID, line)
			}
		}
		if !strings.Contains(string(envDump), jobs.SocketEnv+"=") {
			t.Fatalf("job %s has no %s:\n%s", r.ID, jobs.SocketEnv, envDump)
		}
		// Hidden: an empty directory, none at all (a parent is hidden or
		// masked), or one the job's own ids may not enter.
		if b, _ := os.ReadFile(filepath.Join(out, "hidden-"+r.ID)); len(b) != 0 && !strings.Contains(string(b), "No such file or directory") &&
			!strings.Contains(string(b), "Permission denied") {
			t.Fatalf("job %s sees the credential directory %s: %q", r.ID, hidden, b)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "which-"+r.ID)); !strings.HasSuffix(strings.TrimSpace(string(b)), "/bin/executor") {
			t.Fatalf("job %s finds executor at %q", r.ID, b)
		}
		if r.Spec.Depth == 3 {
			b, _ := os.ReadFile(filepath.Join(out, "deep-"+r.ID))
			if !strings.Contains(string(b), "more than the executor's --max-depth 3") || !strings.HasSuffix(string(b), "exit 1\n") {
				t.Fatalf("job %s at depth 3 was not refused by the depth limit:\n%s", r.ID, b)
			}
		}
	}
}

// limitsProbe reports what a job runs with: its network interfaces, its
// process, data and address-space rlimits and, where it has cgroups, its
// memory.max and pids.max (v2) or memory.limit_in_bytes and pids.max (v1);
// then it sleeps past any short timeout.
const limitsProbe = `{
tail -n +3 /proc/net/dev | cut -d: -f1 | sed 's/^ */iface /'
grep -E '^Max (processes|address space|data size)' /proc/self/limits
cg=$(sed -n 's/^0:://p' /proc/self/cgroup)
for root in /sys/fs/cgroup /sys/fs/cgroup/unified; do
	[ -f "$root$cg/memory.max" ] && echo "memory.max $(cat "$root$cg/memory.max")"
	[ -f "$root$cg/pids.max" ] && echo "pids.max $(cat "$root$cg/pids.max")"
done
v1() { awk -F: -v c="$1" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print $3 }' /proc/self/cgroup; }
m=$(v1 memory); [ -n "$m" ] && [ -f "/sys/fs/cgroup/memory$m/memory.limit_in_bytes" ] && echo "memory.limit_in_bytes $(cat "/sys/fs/cgroup/memory$m/memory.limit_in_bytes")"
p=$(v1 pids); [ -n "$p" ] && [ -f "/sys/fs/cgroup/pids$p/pids.max" ] && echo "v1 pids.max $(cat "/sys/fs/cgroup/pids$p/pids.max")"
} > "$OUT/child-limits"
sleep 30`

// Issue 29, point 4: a job without a network, with memory, process and
// time limits and one attempt submits a follow-up asking for none of
// that; the follow-up's record holds the parent's limits, and it runs
// with them: only loopback, the memory and process limits in force,
// stopped at the parent's timeout after its one attempt. The timeout is
// 15 s: the probe must write its report before it, and beside three other
// agents' test runs 4 s were not enough for its dozen commands. (The parent
// submits with an executor built without -race: where the memory limit
// is RLIMIT_DATA, the race detector's writable shadow mappings exceed any
// sane one.)
func TestFollowUpIsNoLooserThanItsParent(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "tight", "p=2", "15s")
	startManager(t, env, httpAddr)
	out := sharedDir(t)
	submitter := filepath.Join(openTempDir(t), "executor")
	if b, err := exec.Command("go", "build", "-o", submitter, "../../cmd/executor").CombinedOutput(); err != nil {
		t.Fatalf("building executor without -race: %v\n%s", err, b)
	}
	parent := `"$SUBMITTER" submit --pool p --writable "$OUT" --env OUT="$OUT" -- sh -c "$PROBE" > "$OUT/child-id"`
	code, o := runExecutor(t, env, "submit", "--pool", "p", "--no-network", "--memory", "1G", "--max-procs", "64", "--timeout", "15s",
		"--max-attempts", "1", "--writable", out, "--env", "OUT="+out, "--env", "PROBE="+limitsProbe, "--env", "SUBMITTER="+submitter, "--", "sh", "-c", parent)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, o)
	}
	start(t, env, "executor", "serve", "--pools", "p", "--poll", "100ms")
	q := jobQueue(t, env)
	var child string
	// Budgets that only catch a stuck queue: under a full run's load the
	// serve's start (its confinement probe, its consumers) and the two
	// jobs took more than 30 s.
	eventually(t, 3*time.Minute, "the parent to submit its follow-up", func() bool {
		b, _ := os.ReadFile(filepath.Join(out, "child-id"))
		child = strings.TrimSpace(string(b))
		return child != ""
	})
	var rec *jobs.Record
	eventually(t, 3*time.Minute, "the follow-up to end", func() bool {
		rec = record(q, child)
		return rec.State.Final()
	})
	if s := rec.Spec; !s.NoNetwork || s.MemoryBytes != 1<<30 || s.MaxProcs != 64 || s.Timeout != jobs.Duration(15*time.Second) || s.MaxAttempts != 1 {
		t.Errorf("the follow-up's record: no_network %v, memory_bytes %d, max_procs %d, timeout %v, max_attempts %d; want the parent's true, %d, 64, 15s, 1",
			s.NoNetwork, s.MemoryBytes, s.MaxProcs, time.Duration(s.Timeout), s.MaxAttempts, 1<<30)
	}
	if rec.State != jobs.StateDead || rec.Attempts != 1 || rec.StoppedBy != "timeout" {
		t.Errorf("the follow-up ended %s after %d attempt(s), stopped by %q; want dead after 1, stopped by its (the parent's) timeout", rec.State, rec.Attempts, rec.StoppedBy)
	}
	b, err := os.ReadFile(filepath.Join(out, "child-limits"))
	if err != nil {
		t.Fatalf("the follow-up left no report of its limits: %v", err)
	}
	limits := string(b)
	t.Logf("the follow-up runs with:\n%s", limits)
	if ifaces := regexp.MustCompile(`(?m)^iface (\S+)`).FindAllStringSubmatch(limits, -1); len(ifaces) != 1 || ifaces[0][1] != "lo" {
		t.Errorf("the follow-up has network interfaces %v, want only lo", ifaces)
	}
	if !regexp.MustCompile(`(?m)^(memory\.max 1073741824|memory\.limit_in_bytes 1073741824|Max data size\s+1073741824\s)`).MatchString(limits) {
		t.Errorf("the follow-up runs without the parent's memory limit:\n%s", limits)
	}
	// A cgroup v2 pids.max counts the supervisor too (65); a v1 one holds
	// the worker alone (sandbox/cgroupv1_linux.go).
	if !regexp.MustCompile(`(?m)^(pids\.max 65|v1 pids\.max 64|Max processes\s+64\s)`).MatchString(limits) {
		t.Errorf("the follow-up runs without the parent's process limit:\n%s", limits)
	}
}

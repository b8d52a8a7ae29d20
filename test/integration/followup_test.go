package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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
		// Hidden: an empty directory, or none at all (a parent is hidden).
		if b, _ := os.ReadFile(filepath.Join(out, "hidden-"+r.ID)); len(b) != 0 && !strings.Contains(string(b), "No such file or directory") {
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

package jobs_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// lastActJob is a job whose last act is submitting child through its
// command channel: it exits the moment the submit is answered.
func lastActJob(t *testing.T, batch, child string) jobs.Spec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := spec("p", exe)
	s.Batch, s.Env = batch, map[string]string{followUpEnv: child}
	return s
}

// servedNode is one node with pool p of 2 slots, an executor serving it,
// and the queue; ctx ends with the test or after a minute.
func servedNode(t *testing.T) (*jobs.Queue, context.Context) {
	t.Helper()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}})
	q := openQueue(t, srv.URL)
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return q, ctx
}

// Wait for a batch returns when, and only when, every job of it has ended,
// counting follow-ups made at any depth, also one made by the batch's last
// running job as it ends.
func TestWaitCountsFollowUpsMadeAtTheEnd(t *testing.T) {
	t.Parallel()
	q, ctx := servedNode(t)

	// root -> child (submitted as root's last act) -> grandchild (the
	// same), which sleeps: the batch is not done before it has.
	grandchild := `{"pool":"p","command":["sleep","0.5"]}`
	child, err := json.Marshal(lastActJob(t, "", grandchild))
	if err != nil {
		t.Fatal(err)
	}
	root := submit(t, q, lastActJob(t, "b", string(child)))
	sum, err := q.Wait(ctx, jobs.WaitFor{Batch: "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Jobs != 3 || sum.Succeeded != 3 || sum.Pending != 0 || !sum.OK() {
		t.Fatalf("summary %+v: want 3 jobs, all succeeded", sum)
	}
	all, err := q.Batch(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	depths := map[int]int{}
	for _, r := range all {
		if r.State != jobs.StateSucceeded {
			t.Fatalf("job %s (depth %d) is %s when Wait returned", r.ID, r.Spec.Depth, r.State)
		}
		depths[r.Spec.Depth]++
	}
	if depths[0] != 1 || depths[1] != 1 || depths[2] != 1 {
		t.Fatalf("depths %v, want one job at each of 0, 1, 2", depths)
	}
	if len(sum.Slowest) != 3 || sum.Slowest[0].DurationMs < sum.Slowest[2].DurationMs {
		t.Fatalf("slowest: %d jobs, want all 3, longest first", len(sum.Slowest))
	}

	// Waiting for the root by id follows its follow-ups too.
	sum, err = q.Wait(ctx, jobs.WaitFor{IDs: []string{root}}, nil)
	if err != nil || sum.Jobs != 3 || !sum.OK() {
		t.Fatalf("wait for %s: %+v, %v", root, sum, err)
	}
	if _, err := q.Wait(ctx, jobs.WaitFor{Batch: "nobody"}, nil); err == nil || !strings.Contains(err.Error(), "batch nobody has no jobs") {
		t.Fatalf("wait for an empty batch: %v", err)
	}
}

// With FailFast, the first dead job of the batch cancels the rest; the
// summary says which failed.
func TestWaitFailFast(t *testing.T) {
	t.Parallel()
	q, ctx := servedNode(t)
	long := spec("p", "sleep", "60")
	long.Batch = "ff"
	longID := submit(t, q, long)
	waitState(t, q, longID, jobs.StateRunning, 10*time.Second)
	bad := spec("p", "sh", "-c", "echo broken >&2; exit 1")
	bad.Batch, bad.MaxAttempts = "ff", 1
	badID := submit(t, q, bad) // takes the free slot, and dies
	var queued []string
	for range 3 {
		s := spec("p", "sleep", "60")
		s.Batch = "ff"
		queued = append(queued, submit(t, q, s))
	}

	start := time.Now()
	sum, err := q.Wait(ctx, jobs.WaitFor{Batch: "ff", FailFast: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fail-fast batch ended %v after the wait began", time.Since(start).Round(time.Millisecond))
	if sum.Jobs != 5 || sum.Dead != 1 || sum.Cancelled != 4 || sum.OK() {
		t.Fatalf("summary %+v: want 1 dead, 4 cancelled", sum)
	}
	if sum.Failed[0].ID != badID || !strings.Contains(sum.Failed[0].Error, "broken") {
		t.Fatalf("first failed %+v, want %s with its stderr", sum.Failed[0], badID)
	}
	// A queued job the executor took just as fail-fast cancelled it shows
	// "running" for a moment (the executor's write lands after the
	// cancel's) until the cancel marker stops it: wait for the records to
	// settle, each cancelled by fail-fast.
	for _, id := range append(queued, longID) {
		var r *jobs.Record
		harness.Eventually(t, 10*time.Second, "job "+id+" cancelled by fail-fast", func() bool {
			r = get(t, q, id)
			return r.State == jobs.StateCancelled
		})
		if !strings.Contains(r.Error, "fail-fast: job "+badID+" failed") {
			t.Fatalf("job %s: %s %q", id, r.State, r.Error)
		}
	}
}

package jobs_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// jobEvents collects the job events of the default prefix.
func jobEvents(t *testing.T, url string) chan jobs.Event {
	t.Helper()
	ch := make(chan jobs.Event, 100)
	nc := harness.Connect(t, url)
	_, err := nc.Subscribe(jobs.NamesFor(lease.DefaultPrefix).EventSubjects(), func(m *nats.Msg) {
		var ev jobs.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			ch <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

func nextEvent(t *testing.T, ch chan jobs.Event) jobs.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no job event")
	}
	return jobs.Event{}
}

// A queued job that is cancelled never runs: its state is cancelled at
// once, its message leaves the stream, and an event says so. A running job
// that is cancelled is stopped through its sandbox, its slot comes back,
// and it is stored cancelled, not retried.
func TestCancelQueuedAndRunning(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	n := harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	q := openQueue(t, srv.URL)
	events := jobEvents(t, srv.URL)
	ctx := t.Context()
	dir := t.TempDir()

	// Queued, no executor yet.
	marker := filepath.Join(dir, "queued-ran")
	queued := submit(t, q, spec("p", "touch", marker))
	rec, err := q.Cancel(ctx, queued, "changed my mind")
	if err != nil || rec.State != jobs.StateCancelled || !strings.Contains(rec.Error, "changed my mind") {
		t.Fatalf("cancel of a queued job: %+v, %v", rec, err)
	}
	if ev := nextEvent(t, events); ev.Kind != jobs.EventCancelled || ev.Job != queued || ev.Reason != "changed my mind" {
		t.Fatalf("event %+v", ev)
	}
	if n, _ := stored(t, q, "p"); n != 0 {
		t.Fatalf("%d jobs left in the stream after the cancel, want 0", n)
	}
	if _, err := q.Cancel(ctx, queued, "again"); !errors.Is(err, jobs.ErrFinal) {
		t.Fatalf("cancel of a cancelled job: %v, want ErrFinal", err)
	}
	if _, err := q.Cancel(ctx, "nope", "x"); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("cancel of an unknown job: %v, want ErrNotFound", err)
	}

	// Running.
	sv := startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	running := submit(t, q, spec("p", "sleep", "60"))
	waitState(t, q, running, jobs.StateRunning, 10*time.Second)
	harness.Eventually(t, 10*time.Second, "the job's slot to be taken", func() bool { return n.Manager.Stats()[0].InUse == 1 })
	start := time.Now()
	rec, err = q.Cancel(ctx, running, "stop it")
	if err != nil || rec.State != jobs.StateRunning || !rec.CancelRequested {
		t.Fatalf("cancel of a running job: %+v, %v", rec, err)
	}
	rec = waitState(t, q, running, jobs.StateCancelled, 10*time.Second)
	t.Logf("running job cancelled %v after the request", time.Since(start).Round(time.Millisecond))
	if rec.Attempts != 1 || rec.StoppedBy != "cancel" || !strings.Contains(rec.Error, "stop it") {
		t.Fatalf("cancelled running job: %+v", rec)
	}
	harness.Eventually(t, 5*time.Second, "the cancelled job's slot to come back", func() bool { return n.Manager.Stats()[0].InUse == 0 })
	if ev := nextEvent(t, events); ev.Kind != jobs.EventCancelled || ev.Job != running {
		t.Fatalf("event %+v", ev)
	}
	harness.Eventually(t, 5*time.Second, "the cancelled job's message to be acknowledged", func() bool {
		n, _ := stored(t, q, "p")
		return n == 0
	})
	// Acknowledged, it is never delivered again; its run has ended.
	harness.Eventually(t, 5*time.Second, "the executor's run to end", func() bool { return sv.srv.Running() == 0 })
	if rec := get(t, q, running); rec.State != jobs.StateCancelled || rec.Attempts != 1 {
		t.Fatalf("the cancelled job ran again: %+v", rec)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the job cancelled while queued ran")
	}
}

// Purge cancels every waiting job of a pool, deletes their messages and
// counts them; the running job and other pools are left alone.
func TestPurgeLeavesRunningJobs(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}, {Name: "other", Capacity: 1}}})
	q := openQueue(t, srv.URL)
	events := jobEvents(t, srv.URL)
	ctx := t.Context()
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	running := submit(t, q, spec("p", "sleep", "1"))
	waitState(t, q, running, jobs.StateRunning, 10*time.Second)
	var waiting []string
	for range 5 {
		waiting = append(waiting, submit(t, q, spec("p", "true")))
	}
	other := submit(t, q, spec("nopool", "true")) // a pool nobody serves

	n, err := q.Purge(ctx, "p", "mistaken batch")
	if err != nil || n != 5 {
		t.Fatalf("purge: %d, %v; want 5", n, err)
	}
	for _, id := range waiting {
		if rec := get(t, q, id); rec.State != jobs.StateCancelled {
			t.Fatalf("purged job %s is %s", id, rec.State)
		}
	}
	waitState(t, q, running, jobs.StateSucceeded, 10*time.Second)
	if rec := get(t, q, other); rec.State != jobs.StateQueued {
		t.Fatalf("a job of another pool was touched: %+v", rec)
	}
	var purged *jobs.Event
	for purged == nil {
		if ev := nextEvent(t, events); ev.Kind == jobs.EventPurged {
			purged = &ev
		}
	}
	if purged.Pool != "p" || purged.Count != 5 {
		t.Fatalf("purge event %+v", purged)
	}
	// The succeeded job's message is acknowledged just after its record
	// is stored; the purged ones were deleted.
	harness.Eventually(t, 5*time.Second, "no job of the purged pool left in the stream", func() bool {
		n, _ := stored(t, q, "p")
		return n == 0
	})
	if _, err := q.Purge(ctx, "bad.pool", "x"); !errors.Is(err, jobs.ErrInvalidSpec) {
		t.Fatalf("purge of a bad pool name: %v", err)
	}
}

// A job cancelled after an executor took it, while the executor waits for
// its leases, never runs and stays cancelled: the executor's writes are
// conditional on the revision it read, find the job cancelled, and it lets
// go of the leases and the message without running the job or writing
// over the cancel. Whether the leases then come (granted) or not (the
// executor stops while it waits, and would give the job back).
func TestCancelWhileTakenNeverRuns(t *testing.T) {
	for _, ending := range []string{"granted", "executor stops"} {
		t.Run(ending, func(t *testing.T) {
			t.Parallel()
			cancelWhileTaken(t, ending == "granted")
		})
	}
}

func cancelWhileTaken(t *testing.T, granted bool) {
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	cluster := harness.StartManager(t, srv.URL, manager.Config{Node: lease.ClusterNode, Pools: []manager.PoolConfig{{Name: "api", Capacity: 1}}})
	q := openQueue(t, srv.URL)
	ctx := t.Context()
	gate, err := harness.Client(t, srv.URL, lease.ClusterNode).Acquire(ctx, "api", 1)
	if err != nil {
		t.Fatal(err)
	}
	nc := harness.Connect(t, srv.URL)
	released, err := nc.SubscribeSync(lease.EventSubject(lease.DefaultPrefix, "n1", "p", lease.EventReleased))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	marker := filepath.Join(t.TempDir(), "ran")
	s := spec("p", "touch", marker)
	s.Pools = []jobs.PoolSlots{{Pool: "api", Slots: 1}}
	id := submit(t, q, s)
	sv := startServing(t, srv.URL, "n1", jobs.ServerConfig{AcquireWait: time.Minute})
	harness.Eventually(t, 10*time.Second, "the executor to wait for the api slot", func() bool {
		return harness.PoolStats(t, cluster.Manager, "api").QueuedRequests == 1
	})
	rec, err := q.Cancel(ctx, id, "not now")
	if err != nil || rec.State != jobs.StateCancelled {
		t.Fatalf("cancel of a taken job not yet running: %+v, %v", rec, err)
	}
	if granted {
		if err := gate.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The executor is granted both leases, finds the job cancelled,
		// and gives its p lease back.
		ev, _, err := harness.ReadEvents(released).Next(10 * time.Second)
		if err != nil {
			t.Fatalf("the executor's p lease was never released: %v", err)
		}
		if ev.LeaseID != id+"-d1-p" {
			t.Fatalf("released %+v (%v), want lease %s-d1-p", ev, err, id)
		}
		harness.Eventually(t, 10*time.Second, "the executor's run to end", func() bool { return sv.srv.Running() == 0 })
	} else if _, err := sv.stop(); err != nil { // waits for the taken job to be let go
		t.Fatal(err)
	}
	rec = get(t, q, id)
	if rec.State != jobs.StateCancelled || rec.Attempts != 0 || rec.Returned != 0 || rec.StoppedBy != "" || !strings.Contains(rec.Error, "not now") {
		t.Fatalf("the executor wrote over the cancel: %+v", rec)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the cancelled job ran")
	}
	if n, _ := stored(t, q, "p"); n != 0 {
		t.Fatalf("%d jobs left in the stream, want 0", n)
	}
}

package jobs_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/sandbox"
	"github.com/slotlease/slotlease/test/harness"
	"github.com/slotlease/slotlease/test/raceexit"
)

func TestMain(m *testing.M) {
	sandbox.Init() // the sandbox re-executes the test binary to apply limits
	if spec := os.Getenv(followUpEnv); spec != "" {
		os.Exit(submitFollowUpAndExit(spec))
	}
	// The tests wait on jobs and servers, each with its own: six at once.
	harness.DefaultParallel("6")
	raceexit.Set() // the sandbox's helper stages exit at once
	os.Exit(m.Run())
}

// followUpEnv makes the test binary a job that submits the follow-up it
// holds through its command channel as its very last act, then exits 0
// (non-zero if the submit was refused): the race of a job that ends as it
// adds to its batch.
const followUpEnv = "JOBS_TEST_FOLLOWUP"

func submitFollowUpAndExit(spec string) int {
	r, err := jobs.SubmitFollowUp(context.Background(), os.Getenv(jobs.SocketEnv), os.Getenv(jobs.TokenEnv), []byte(spec))
	if err != nil || r.Error != "" {
		fmt.Fprintln(os.Stderr, "follow-up:", err, r)
		return 1
	}
	return 0
}

// testEnv stands in for the executor's workerEnv: the job's variables, the
// lease variables and PATH.
func testEnv(leases []*lease.Lease, env map[string]string) map[string]string {
	l := leases[0]
	out := maps.Clone(env)
	out["PATH"] = os.Getenv("PATH")
	out["LEASE_ID"], out["LEASE_TOKEN"] = l.ID(), strconv.FormatUint(l.Token(), 10)
	out["LEASE_POOL"], out["LEASE_SLOTS"], out["LEASE_NODE"] = l.Pool(), strconv.FormatInt(l.Slots(), 10), l.Node()
	return out
}

func openQueue(t *testing.T, url string) *jobs.Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := jobs.Open(ctx, harness.Connect(t, url), jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ensureBroker(t, url)
	return q
}

// serving is a running Server; stop ends it and waits for Serve to return.
type serving struct {
	srv  *jobs.Server
	stop func() (took time.Duration, err error)
}

func startServing(t *testing.T, url, node string, cfg jobs.ServerConfig) *serving {
	t.Helper()
	nc := harness.Connect(t, url)
	q := openQueue(t, url)
	cfg.Queue, cfg.Conn, cfg.Env = q, nc, testEnv
	cfg.Leases = harness.Client(t, url, node)
	if cfg.Pools == nil {
		cfg.Pools = []string{"p"}
	}
	cfg.PollInterval = cmp(cfg.PollInterval, 50*time.Millisecond)
	cfg.Backoff = cmp(cfg.Backoff, 50*time.Millisecond)
	cfg.KillGrace = cmp(cfg.KillGrace, 200*time.Millisecond)
	cfg.Logger = harness.Logger()
	srv, err := jobs.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	var took time.Duration
	var serr error
	stop := func() (time.Duration, error) {
		once.Do(func() {
			start := time.Now()
			cancel()
			serr = <-done
			took = time.Since(start)
		})
		return took, serr
	}
	t.Cleanup(func() { _, _ = stop() })
	return &serving{srv: srv, stop: stop}
}

func cmp(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func submit(t *testing.T, q *jobs.Queue, spec jobs.Spec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := q.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return rec.ID
}

func spec(pool string, cmd ...string) jobs.Spec {
	s := jobs.NewSpec()
	s.Pool, s.Command = pool, cmd
	return s
}

func get(t *testing.T, q *jobs.Queue, id string) *jobs.Record {
	t.Helper()
	rec, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func waitState(t *testing.T, q *jobs.Queue, id string, want jobs.State, timeout time.Duration) *jobs.Record {
	t.Helper()
	var rec *jobs.Record
	harness.Eventually(t, timeout, fmt.Sprintf("job %s to be %s", id, want), func() bool {
		r, err := q.Get(context.Background(), id)
		rec = r
		return err == nil && r.State == want
	})
	return rec
}

// stored returns the number of jobs of pool left in the stream.
func stored(t *testing.T, q *jobs.Queue, pool string) (n uint64, inFlight int) {
	t.Helper()
	ds, err := q.Depths(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Pool == pool {
			n += d.Stored
			inFlight += d.InFlight
		}
	}
	return n, inFlight
}

// capacityWatch checks every lease event of pool against its capacity.
func capacityWatch(t *testing.T, url, pool string) (violations *atomic.Int64, events *atomic.Int64) {
	t.Helper()
	violations, events = new(atomic.Int64), new(atomic.Int64)
	nc := harness.Connect(t, url)
	_, err := nc.Subscribe(lease.EventFilter(lease.DefaultPrefix, "", pool, ""), func(m *nats.Msg) {
		evs, err := lease.DecodeEvents(m.Data)
		if err != nil {
			violations.Add(1)
		}
		for _, ev := range evs {
			if ev.Stats.InUse > ev.Stats.Capacity {
				violations.Add(1)
			}
			events.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return violations, events
}

// Three nodes, one NATS, pool p of capacity 2 on each: three servers drain
// 200 jobs. Every job ends succeeded with a stored result, no pool ever
// holds more than its capacity, and every node runs a fair share.
func TestThreeNodesDrain(t *testing.T) {
	t.Parallel()
	// 90 jobs on 3 nodes of 2 slots: 15 rounds, enough to show each node
	// takes its share (200 took two minutes of the package's run under
	// -race, each job a run of the race-built test binary).
	const total = 90
	srv := harness.StartServer(t)
	nodes := []string{"n1", "n2", "n3"}
	for _, n := range nodes {
		harness.StartManager(t, srv.URL, manager.Config{Node: n, TTL: 5 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}})
	}
	violations, events := capacityWatch(t, srv.URL, "p")
	q := openQueue(t, srv.URL)
	for _, n := range nodes {
		startServing(t, srv.URL, n, jobs.ServerConfig{})
	}

	start := time.Now()
	ids := make([]string, total)
	for i := range ids {
		ids[i] = submit(t, q, spec("p", "sh", "-c", `echo "$LEASE_NODE"`))
	}
	// A bound only a stuck drain reaches: 200 jobs took a minute on two
	// busy cores (load average 15), and two at load 20-25.
	harness.Eventually(t, 5*time.Minute, "all jobs drained", func() bool {
		n, _ := stored(t, q, "p")
		return n == 0
	})
	t.Logf("%d jobs drained in %v; %d lease events", total, time.Since(start), events.Load())

	perNode := map[string]int{}
	for _, id := range ids {
		rec := get(t, q, id)
		if rec.State != jobs.StateSucceeded || rec.ExitCode == nil || *rec.ExitCode != 0 || rec.Attempts != 1 {
			t.Fatalf("job %s: state %s, attempts %d, error %q", id, rec.State, rec.Attempts, rec.Error)
		}
		if got := strings.TrimSpace(rec.StdoutTail); got != rec.Node {
			t.Fatalf("job %s ran on %s but its worker saw LEASE_NODE=%q", id, rec.Node, got)
		}
		perNode[rec.Node]++
	}
	t.Logf("jobs per node: %v", perNode)
	for _, n := range nodes {
		if perNode[n] < total/5 {
			t.Errorf("node %s ran %d of %d jobs, want at least 20%%: %v", n, perNode[n], total, perNode)
		}
	}
	if v := violations.Load(); v != 0 || events.Load() < total {
		t.Fatalf("%d of %d lease events showed a pool over capacity (or were unreadable)", v, events.Load())
	}
}

// A job that always fails is retried up to max_attempts, then lands in the
// dead-letter bucket with its last error; so does a job that can never get
// a lease on the node that takes it.
func TestDeadLetter(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	q := openQueue(t, srv.URL)
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})

	failing := spec("p", "sh", "-c", `echo "attempt $JOB_ATTEMPT"; echo boom >&2; exit 3`)
	failing.MaxAttempts = 3
	id := submit(t, q, failing)
	tooBig := spec("p", "true")
	tooBig.Slots, tooBig.MaxAttempts = 2, 2
	bigID := submit(t, q, tooBig)

	rec := waitState(t, q, id, jobs.StateDead, 20*time.Second)
	if rec.Attempts != 3 || rec.Error != "exit code 3: boom" || *rec.ExitCode != 3 || strings.TrimSpace(rec.StdoutTail) != "attempt 3" {
		t.Fatalf("dead record: attempts %d, error %q, exit %v, stdout %q", rec.Attempts, rec.Error, rec.ExitCode, rec.StdoutTail)
	}
	dl, err := q.DeadLetter(context.Background(), id)
	if err != nil || dl.Attempts != 3 || dl.Error != "exit code 3: boom" || dl.Spec.Command[2] != failing.Command[2] {
		t.Fatalf("dead letter: %+v, %v", dl, err)
	}

	big := waitState(t, q, bigID, jobs.StateDead, 20*time.Second)
	if big.Attempts != 2 || !strings.Contains(big.Error, "needs 2 slots, but pool p on node n1 has 1") {
		t.Fatalf("too-big job: attempts %d, error %q", big.Attempts, big.Error)
	}
	// A message that is not a job at all is dead-lettered under its
	// stream sequence, not retried forever.
	js, err := jetstream.New(harness.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(context.Background(), q.Names().Subject("p", jobs.Normal, ""), []byte("not json"))
	if err != nil {
		t.Fatal(err)
	}
	junk := waitState(t, q, fmt.Sprintf("malformed-%d", ack.Sequence), jobs.StateDead, 10*time.Second)
	if !strings.Contains(junk.Error, "not a valid job message") {
		t.Fatalf("malformed message's dead letter: %q", junk.Error)
	}
	harness.Eventually(t, 5*time.Second, "dead jobs to leave the stream", func() bool {
		n, _ := stored(t, q, "p")
		return n == 0
	})
}

// startedOrder waits for every job to succeed and returns them by start.
func startedOrder(t *testing.T, q *jobs.Queue, names map[string]string) []string {
	t.Helper()
	type run struct {
		name string
		at   time.Time
	}
	var runs []run
	for id, name := range names {
		rec := waitState(t, q, id, jobs.StateSucceeded, 20*time.Second)
		runs = append(runs, run{name, rec.StartedAt})
	}
	for i := range runs {
		for j := i + 1; j < len(runs); j++ {
			if runs[j].at.Before(runs[i].at) {
				runs[i], runs[j] = runs[j], runs[i]
			}
		}
	}
	var out []string
	for _, r := range runs {
		out = append(out, r.name)
	}
	return out
}

// With the only slot busy, queued jobs are taken high first, then normal,
// then low; and none is taken (hoarded) while the slot is busy. With aging,
// a low job that waited two aging periods goes before a fresh high one.
func TestPriorityAndAging(t *testing.T) {
	t.Parallel()
	// setup also counts the executor's looks at the pool (a stats request
	// to the manager, each poll).
	setup := func(t *testing.T, aging time.Duration) (*jobs.Queue, *lease.Lease, *atomic.Int32) {
		var polls atomic.Int32
		srv := harness.StartServer(t)
		harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
		q := openQueue(t, srv.URL)
		busy, err := harness.Client(t, srv.URL, "n1").Acquire(context.Background(), "p", 1)
		if err != nil {
			t.Fatal(err)
		}
		spy := harness.Connect(t, srv.URL)
		if _, err := spy.Subscribe(lease.StatsSubject(lease.DefaultPrefix, "n1"), func(*nats.Msg) { polls.Add(1) }); err != nil {
			t.Fatal(err)
		}
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		startServing(t, srv.URL, "n1", jobs.ServerConfig{Aging: aging})
		return q, busy, &polls
	}
	submitAt := func(t *testing.T, q *jobs.Queue, names map[string]string, name string, p jobs.Priority) {
		s := spec("p", "true")
		s.Priority = p
		names[submit(t, q, s)] = name
	}

	t.Run("high first", func(t *testing.T) {
		q, busy, polls := setup(t, -1)
		names := map[string]string{}
		submitAt(t, q, names, "low", jobs.Low)
		submitAt(t, q, names, "normal", jobs.Normal)
		submitAt(t, q, names, "high", jobs.High)
		// Several chances to hoard: three looks at the pool after the
		// last submit, each of which finds the only slot busy.
		looked := polls.Load()
		harness.Eventually(t, 10*time.Second, "the executor to look at the pool three times", func() bool { return polls.Load() >= looked+3 })
		if _, inFlight := stored(t, q, "p"); inFlight != 0 {
			t.Fatalf("a job was taken while the node's only slot was busy")
		}
		if err := busy.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(startedOrder(t, q, names), ","); got != "high,normal,low" {
			t.Fatalf("run order %s, want high,normal,low", got)
		}
	})

	t.Run("aging promotes an old low job", func(t *testing.T) {
		const aging = 300 * time.Millisecond
		q, busy, _ := setup(t, aging)
		names := map[string]string{}
		submitAt(t, q, names, "old-low", jobs.Low)
		submitted := time.Now()
		// Two aging periods make the low job count as high, and as the
		// older of two equals it goes first.
		for time.Since(submitted) < 2*aging+100*time.Millisecond {
			time.Sleep(20 * time.Millisecond)
		}
		submitAt(t, q, names, "high", jobs.High)
		submitAt(t, q, names, "normal", jobs.Normal)
		if err := busy.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(startedOrder(t, q, names), ","); got != "old-low,high,normal" {
			t.Fatalf("run order %s, want old-low,high,normal", got)
		}
	})
}

// On stop, a server takes no new job, lets a running job finish within the
// grace period, and stops and gives back one that does not: it releases its
// lease at once, and another server runs it without it using up an attempt.
func TestShutdownGraceAndGiveBack(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	n := harness.StartManager(t, srv.URL, manager.Config{Node: "n1", TTL: 10 * time.Second, Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}})
	q := openQueue(t, srv.URL)
	const grace = 2 * time.Second
	a := startServing(t, srv.URL, "n1", jobs.ServerConfig{Grace: grace})

	dir := t.TempDir()
	quick := spec("p", "sh", "-c", `touch "$DIR/quick.started"; sleep 0.2`)
	quick.Env = map[string]string{"DIR": dir}
	// The long job finishes at once when run a second time.
	long := spec("p", "sh", "-c", `[ -e "$DIR/long.ran" ] && exit 0; touch "$DIR/long.ran"; sleep 60`)
	long.Env = map[string]string{"DIR": dir}
	longID := submit(t, q, long)
	waitState(t, q, longID, jobs.StateRunning, 10*time.Second)
	quickID := submit(t, q, quick)
	harness.Eventually(t, 10*time.Second, "the quick job to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "quick.started"))
		return err == nil
	})

	took, err := a.stop()
	if err != nil {
		t.Fatal(err)
	}
	if took < grace || took > grace+5*time.Second {
		t.Fatalf("Serve returned %v after its context ended; want the %v grace plus the kill", took, grace)
	}
	// Taken no new job: one submitted now stays queued.
	lateID := submit(t, q, spec("p", "true"))

	if rec := get(t, q, quickID); rec.State != jobs.StateSucceeded {
		t.Fatalf("quick job: %s (%s), want succeeded within the grace period", rec.State, rec.Error)
	}
	rec := get(t, q, longID)
	if rec.State != jobs.StateQueued || rec.Returned != 1 || rec.Attempts != 1 {
		t.Fatalf("long job after shutdown: state %s, returned %d, attempts %d", rec.State, rec.Returned, rec.Attempts)
	}
	// Released, not left to expire: well before the 10s TTL. (The manager
	// answers a release before its delete is stored, so poll briefly.)
	harness.Eventually(t, 5*time.Second, "the stopped job's slot to be released", func() bool {
		for _, ps := range n.Manager.Stats() {
			if ps.Name == "p" {
				return ps.InUse == 0
			}
		}
		return false
	})
	if rec := get(t, q, lateID); rec.State != jobs.StateQueued {
		t.Fatalf("job submitted after shutdown: %s, want queued", rec.State)
	}

	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	rec = waitState(t, q, longID, jobs.StateSucceeded, 10*time.Second)
	if rec.Attempts != 1 || rec.Returned != 1 {
		t.Fatalf("long job rerun: attempts %d, returned %d; a job given back must not use up an attempt", rec.Attempts, rec.Returned)
	}
	waitState(t, q, lateID, jobs.StateSucceeded, 10*time.Second)
}

// Submitting with a client-chosen id is idempotent, and an unknown id is
// ErrNotFound.
func TestSubmitIdempotentAndNotFound(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	q := openQueue(t, srv.URL)
	s := spec("p", "true")
	s.ID = "build-42"
	a := submit(t, q, s)
	b := submit(t, q, s)
	if a != "build-42" || b != a {
		t.Fatalf("ids %q, %q", a, b)
	}
	if n, _ := stored(t, q, "p"); n != 1 {
		t.Fatalf("%d jobs stored, want 1", n)
	}
	if _, err := q.Get(context.Background(), "nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Get(nope): %v", err)
	}
	recs, err := q.List(context.Background(), 10, "")
	if err != nil || len(recs) != 1 || recs[0].ID != "build-42" {
		t.Fatalf("List: %v, %v", recs, err)
	}
}

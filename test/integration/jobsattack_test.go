package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/test/harness"
)

// Issue 38: with the executor credential, one durable consumer without a
// filter on the job stream made every `executor serve` exit at start, and
// 1,000 consumers on the results bucket's stream made `executor wait` fail
// for everyone. Executors now make no consumer at all (the broker makes
// the product's own, jobs/broker.go), and read the buckets without one: an
// attacker holding the executor credential gets every such request
// refused, and serve and wait go on working.
func TestExecutorsMakeNoConsumers(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "nc", "p=1", "15s")
	startManager(t, env, httpAddr)
	url := natsURL(env)
	home := envValue(env, "HOME")
	// The queue exists once leasemgr serves; the attacker binds it.
	q := jobQueue(t, env)
	names := q.Names()

	// Its refusals are expected: not printed (nats.go's default handler
	// would, a thousand times).
	attacker := mustConnectAs(t, home, url, config.RoleExecutor, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	js, err := jetstream.New(attacker)
	if err != nil {
		t.Fatal(err)
	}
	try := func(what string, cfg jetstream.ConsumerConfig, stream string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.CreateOrUpdateConsumer(ctx, stream, cfg); err == nil {
			t.Fatalf("%s: made with the executor credential", what)
		}
	}
	try("an unfiltered durable on the job stream", jetstream.ConsumerConfig{Durable: "hog", AckPolicy: jetstream.AckExplicitPolicy}, names.Stream)
	try("the product's own durable, made by an executor", jetstream.ConsumerConfig{Durable: names.Consumer("p", jobs.Normal, ""),
		FilterSubject: names.Subject("p", jobs.Normal, ""), AckPolicy: jetstream.AckExplicitPolicy}, names.Stream)
	try("a filtered consumer with a wildcard", jetstream.ConsumerConfig{Durable: "wild", FilterSubject: names.Prefix + ".jobs.queue.*.*",
		AckPolicy: jetstream.AckExplicitPolicy}, names.Stream)
	// 1,000 consumers on the buckets' streams, sent at once: a request the
	// server's permissions refuse gets no answer, only its timeout.
	var wg sync.WaitGroup
	var made atomic.Int32
	began := time.Now()
	for i := range 1000 {
		stream := "KV_" + names.Results
		if i%2 == 1 {
			stream = "KV_" + names.Dead
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Name: fmt.Sprintf("c%d", i)}); err == nil {
				made.Add(1)
			}
		})
	}
	wg.Wait()
	if n := made.Load(); n != 0 {
		t.Fatalf("%d of 1,000 consumers on the buckets' streams made with the executor credential", n)
	}
	t.Logf("1,000 consumers refused in %v", time.Since(began).Round(time.Millisecond))
	// No consumer on the job stream but the product's own.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, names.Stream)
	if err != nil {
		t.Fatal(err)
	}
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if name := ci.Name; !strings.HasPrefix(name, "p_") && !strings.HasPrefix(name, "default_") {
			t.Errorf("consumer %q on the job stream: not the product's", name)
		}
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}

	// Another executor (the same credential: the default layout has one)
	// serves, and a waiter waits, as before.
	serve := start(t, env, "executor", "serve", "--pools", "p", "--poll", "100ms")
	defer func() { _ = serve.cmd.Process.Kill() }()
	code, out := runExecutor(t, env, "submit", "--pool", "p", "--", "echo", "hi")
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	id := strings.TrimSpace(out)
	if code, out := runExecutor(t, env, "wait", "--timeout", "60s", id); code != 0 || !strings.Contains(out, "1 succeeded") {
		t.Fatalf("executor wait: exit %d\n%s", code, out)
	}
}

// Issue 38: the executor credential could rewrite another tenant's queued
// job record to "succeeded", and `executor wait` exited 0 though the job
// never ran. The forged record is refused: wait does not report success
// (it runs out of time, naming the refused record), status says so, and
// once an executor serves the pool the job runs and its real outcome
// counts.
func TestForgedJobOutcomeIsRefused(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "fo", "p=1", "15s")
	startManager(t, env, httpAddr)
	code, out := runExecutor(t, env, "submit", "--pool", "p", "--", "sh", "-c", "echo ran")
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	id := strings.TrimSpace(out)
	q := jobQueue(t, env)
	rec := record(q, id)
	if rec.State != jobs.StateQueued {
		t.Fatalf("job %s is %s, want queued", id, rec.State)
	}

	// The forgery, with the executor credential: a plain put, as any
	// executor may write the results bucket.
	attacker := mustConnectAs(t, envValue(env, "HOME"), natsURL(env), config.RoleExecutor)
	zero := 0
	rec.State, rec.ExitCode, rec.StdoutTail = jobs.StateSucceeded, &zero, "never ran"
	data, _ := json.Marshal(rec)
	if _, err := attacker.Request("$KV."+q.Names().Results+"."+id, data, 5*time.Second); err != nil {
		t.Fatalf("the forged put: %v", err)
	}
	if got := record(q, id); got.State != jobs.StateSucceeded {
		t.Fatalf("the forged record is not stored (%s): the test shows nothing", got.State)
	}

	code, out = runExecutor(t, env, "wait", "--timeout", "3s", id)
	if code == 0 || strings.Contains(out, "1 succeeded") || !strings.Contains(out, "refused "+id) {
		t.Fatalf("executor wait over a forged outcome: exit %d\n%s\nwant no success, and the record named refused", code, out)
	}
	code, out = runExecutor(t, env, "status", id)
	if code != 0 || !strings.Contains(out, "REFUSED") {
		t.Fatalf("executor status: exit %d\n%s\nwant the outcome refused", code, out)
	}

	serve := start(t, env, "executor", "serve", "--pools", "p", "--poll", "100ms")
	defer func() { _ = serve.cmd.Process.Kill() }()
	code, out = runExecutor(t, env, "wait", "--timeout", "60s", id)
	if code != 0 || !strings.Contains(out, "1 succeeded") {
		t.Fatalf("executor wait once served: exit %d\n%s", code, out)
	}
	if got := record(q, id); strings.TrimSpace(got.StdoutTail) != "ran" {
		t.Fatalf("the job's stored output %q: want the real run's", got.StdoutTail)
	}
}

// On a NATS of one account (no users: the cluster demo's, say), nobody can
// be given as JOBS_NATS_*: leasemgr serves the job queue on its own
// connection once the queue exists there, and an `executor serve` started
// first waits for it instead of exiting. A job submitted then runs, and
// `executor wait` believes its signed outcome.
func TestJobQueueOnANATSOfOneAccount(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	env, httpAddr := managerEnv(t, "one", "p=1", "15s")
	env = append(env, "NATS_URL="+srv.URL)
	m := startManager(t, env, httpAddr)
	serve := start(t, env, "executor", "serve", "--pools", "p", "--poll", "100ms")
	defer func() { _ = serve.cmd.Process.Kill() }()
	code, out := runExecutor(t, env, "submit", "--pool", "p", "--", "echo", "one account")
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	id := strings.TrimSpace(out)
	if code, out := runExecutor(t, env, "wait", "--timeout", "2m", id); code != 0 || !strings.Contains(out, "1 succeeded") {
		t.Fatalf("executor wait: exit %d\n%s\nleasemgr:\n%s\nserve:\n%s", code, out, m.Output(), serve.Output())
	}
	if !strings.Contains(m.Output(), "serving the job queue found in leasemgr's own account") {
		t.Errorf("leasemgr did not say it serves the job queue of its own account:\n%s", m.Output())
	}
}

package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// forge stores rec under its id in the results bucket the way any executor
// may write it: a plain put, no broker.
func forge(t *testing.T, nc *nats.Conn, q *jobs.Queue, rec *jobs.Record) {
	t.Helper()
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := nc.RequestWithContext(ctx, "$KV."+q.Names().Results+"."+rec.ID, data); err != nil {
		t.Fatalf("forging %s: %v", rec.ID, err)
	}
}

// A record rewritten to "succeeded" by someone other than the executor that
// took the job (issue 38: `executor wait` exited 0 and the job never ran)
// is refused: Wait does not count it as the job's end, GetChecked marks
// it, and an executor that takes the job runs it and stores its real
// outcome over the forgery, which Wait then believes.
func TestForgedOutcomeIsRefused(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	q := openQueue(t, srv.URL)
	id := submit(t, q, spec("p", "sh", "-c", "echo ran"))
	rec := get(t, q, id)
	code := 0
	rec.State, rec.ExitCode, rec.StdoutTail = jobs.StateSucceeded, &code, "never ran"
	forge(t, harness.Connect(t, srv.URL), q, rec)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sum, err := q.Wait(ctx, jobs.WaitFor{IDs: []string{id}}, nil)
	if !errors.Is(err, jobs.ErrWaitTimeout) || sum.Succeeded != 0 || sum.Pending != 1 || len(sum.Refused) != 1 || sum.Refused[0] != id {
		t.Fatalf("Wait over a forged outcome: %+v, %v; want it pending, refused, and no success", sum, err)
	}
	checked, err := q.GetChecked(context.Background(), id)
	if err != nil || !checked.Unsigned {
		t.Fatalf("GetChecked: %+v, %v; want Unsigned", checked, err)
	}

	// The job runs all the same, and its signed outcome counts.
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	sum, err = q.Wait(wctx, jobs.WaitFor{IDs: []string{id}}, nil)
	if err != nil || !sum.OK() {
		t.Fatalf("Wait once the job ran: %+v, %v", sum, err)
	}
	if got := get(t, q, id); strings.TrimSpace(got.StdoutTail) != "ran" {
		t.Fatalf("the job's output %q: want the real run's", got.StdoutTail)
	}
	if checked, err := q.GetChecked(context.Background(), id); err != nil || checked.Unsigned {
		t.Fatalf("GetChecked after the run: %+v, %v", checked, err)
	}
}

// brokerAsk sends a raw broker request, as any executor can.
func brokerAsk(t *testing.T, nc *nats.Conn, q *jobs.Queue, verb string, body string) map[string]any {
	t.Helper()
	msg, err := nc.Request(q.Names().BrokerSubject(verb), []byte(body), 10*time.Second)
	if err != nil {
		t.Fatalf("broker %s: %v", verb, err)
	}
	var out map[string]any
	if err := json.Unmarshal(msg.Data, &out); err != nil {
		t.Fatalf("broker %s answered %q: %v", verb, msg.Data, err)
	}
	return out
}

// The broker takes nothing on trust: a settle needs the bind token of the
// delivery it names (a token for another job, or none, is refused), and
// every malformed request gets an error naming what is wrong.
func TestBrokerRefusesWhatItShould(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	q := openQueue(t, srv.URL)
	nc := harness.Connect(t, srv.URL)
	a := submit(t, q, spec("p", "true"))
	b := submit(t, q, spec("p", "true"))

	// A fetch, as executor serve makes it.
	got := brokerAsk(t, nc, q, "fetch", `{"pool":"p","priority":"normal","ack_wait_ms":30000}`)
	reply, _ := got["reply"].(string)
	bind, _ := got["bind"].(string)
	data, _ := json.Marshal(got["data"])
	if reply == "" || bind == "" {
		t.Fatalf("fetch: %v", got)
	}
	var raw []byte
	_ = json.Unmarshal(data, &raw)
	var job jobs.Job
	if err := json.Unmarshal(raw, &job); err != nil || (job.ID != a && job.ID != b) {
		t.Fatalf("fetched %q: %v", raw, err)
	}
	other := a
	if job.ID == a {
		other = b
	}
	settle := func(id, bind string) map[string]any {
		code := 0
		rec, _ := json.Marshal(jobs.Record{ID: id, State: jobs.StateSucceeded, ExitCode: &code})
		body, _ := json.Marshal(map[string]any{"reply": reply, "bind": bind, "any": true, "record": json.RawMessage(rec)})
		return brokerAsk(t, nc, q, "settle", string(body))
	}
	for name, out := range map[string]map[string]any{
		"the other job's record":  settle(other, bind),
		"a made-up token":         settle(job.ID, "AAAA"),
		"no token":                settle(job.ID, ""),
		"a token of another kind": settle(job.ID, bind[1:]+"A"),
	} {
		if e, _ := out["error"].(string); !strings.Contains(e, "bind token") {
			t.Errorf("settle with %s: %v; want refused for its bind token", name, out)
		}
	}
	for _, id := range []string{a, b} {
		if rec, err := q.GetChecked(context.Background(), id); err != nil || rec.State != jobs.StateQueued {
			t.Fatalf("job %s after refused settles: %+v, %v; want it queued", id, rec, err)
		}
	}
	// The right token settles, signed.
	if out := settle(job.ID, bind); out["error"] != nil || out["rev"] == nil {
		t.Fatalf("settle with the delivery's token: %v", out)
	}
	if rec, err := q.GetChecked(context.Background(), job.ID); err != nil || rec.State != jobs.StateSucceeded || rec.Unsigned {
		t.Fatalf("the settled job: %+v, %v; want succeeded and signed", rec, err)
	}

	for verb, body := range map[string]string{
		"consumer": `{"pool":"p","priority":"urgent"}`,
		"fetch":    `{"pool":"a.b","priority":"normal"}`,
	} {
		if e, _ := brokerAsk(t, nc, q, verb, body)["error"].(string); !strings.HasPrefix(e, "bad request") {
			t.Errorf("%s %s: %q; want a bad request", verb, body, e)
		}
	}
	for _, body := range []string{
		`{"pool":"p","priority":"normal","tenant_key":"x_1"}`,
		`{"pool":"p","priority":"normal","ack_wait_ms":1}`,
		`{"pool":"p","priority":"normal","ack_wait_ms":999999999}`,
		`{"pool":"p","priority":"normal","extra":1}`,
		`not json`,
	} {
		if e, _ := brokerAsk(t, nc, q, "consumer", body)["error"].(string); !strings.HasPrefix(e, "bad request") {
			t.Errorf("consumer %s: %q; want a bad request", body, e)
		}
	}
	items := make([]string, 1025)
	for i := range items {
		items[i] = fmt.Sprintf(`{"id":"j%d","digest":"x","sig":"y"}`, i)
	}
	if e, _ := brokerAsk(t, nc, q, "verify", `{"items":[`+strings.Join(items, ",")+`]}`)["error"].(string); !strings.Contains(e, "at most 1024") {
		t.Errorf("verify of 1025 records: %q; want refused", e)
	}
	if e, _ := brokerAsk(t, nc, q, "nonsense", `{}`)["error"].(string); e == "" {
		t.Error("an unknown verb got no error")
	}
}

// A serve that starts with another --ack-wait gives the shared consumer its
// own (the last to start sets it, docs/jobs.md "Known limits"), and a
// request without one keeps it: a fetch that reset it to the default kept
// a dead executor's job claimed for 30 s instead of its serve's --ack-wait
// (TestServeKilledMidJob found it).
func TestConsumerAckWaitFollowsTheLastServe(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	q := openQueue(t, srv.URL)
	nc := harness.Connect(t, srv.URL)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ackWait := func() time.Duration {
		c, err := js.Consumer(context.Background(), q.Names().Stream, q.Names().Consumer("p", jobs.Normal, ""))
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo().Config.AckWait
	}
	for _, step := range []struct {
		verb, body string
		want       time.Duration
	}{
		{"consumer", `{"pool":"p","priority":"normal","ack_wait_ms":2000}`, 2 * time.Second},
		{"fetch", `{"pool":"p","priority":"normal"}`, 2 * time.Second},
		{"consumer", `{"pool":"p","priority":"normal","ack_wait_ms":5000}`, 5 * time.Second},
		{"fetch", `{"pool":"p","priority":"normal","ack_wait_ms":7000}`, 7 * time.Second},
		{"consumer", `{"pool":"p","priority":"normal"}`, 7 * time.Second},
	} {
		if out := brokerAsk(t, nc, q, step.verb, step.body); out["error"] != nil {
			t.Fatalf("%s %s: %v", step.verb, step.body, out)
		}
		if got := ackWait(); got != step.want {
			t.Fatalf("after %s %s: ack wait %v, want %v", step.verb, step.body, got, step.want)
		}
	}
}

// One job subject whose consumer cannot be made (the stream's consumers
// used up, say, by a flood of tenants) holds up only its own jobs: the
// pool's other jobs are served. Here the tenant's consumer name is taken by
// a consumer the broker cannot turn into the product's.
func TestAnUnservableSubjectHoldsUpOnlyItsOwnJobs(t *testing.T) {
	t.Parallel()
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	q := openQueue(t, srv.URL)
	nc := harness.Connect(t, srv.URL)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stream, err := js.Stream(ctx, q.Names().Stream)
	if err != nil {
		t.Fatal(err)
	}
	blocked := jobs.TenantKey("blocked")
	if _, err := stream.CreateConsumer(ctx, natsjs.ConsumerConfig{Durable: q.Names().Consumer("p", jobs.Normal, blocked),
		FilterSubject: q.Names().Subject("p", jobs.Normal, "blocked"), DeliverSubject: "nowhere", AckPolicy: natsjs.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	bad := spec("p", "true")
	bad.Tenant = "blocked"
	badID := submit(t, q, bad)
	good := spec("p", "true")
	good.Tenant = "fine"
	goodID := submit(t, q, good)
	plain := submit(t, q, spec("p", "true"))
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	waitState(t, q, goodID, jobs.StateSucceeded, time.Minute)
	waitState(t, q, plain, jobs.StateSucceeded, time.Minute)
	if rec := get(t, q, badID); rec.State != jobs.StateQueued {
		t.Fatalf("the unservable tenant's job is %s, want still queued", rec.State)
	}
}

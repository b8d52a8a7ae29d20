package jobs_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"github.com/slotlease/slotlease/test/harness"
)

// spanOf returns the ended span named name whose job.id is id, or nil.
func spanOf(rec *tracetest.SpanRecorder, name, id string) sdktrace.ReadOnlySpan {
	for _, s := range rec.Ended() {
		if s.Name() != name {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == telemetry.KeyJobID && a.Value.AsString() == id {
				return s
			}
		}
	}
	return nil
}

// A job's submit span is linked to its run span across the queue (the run
// in a trace of its own); a follow-up submitted from inside the job is
// submitted in the trace of its parent's run, and linked to its own run.
func TestJobSpansLinkedAcrossTheQueue(t *testing.T) {
	rec := harness.RecordSpans(t)

	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 2}}})
	q := openQueue(t, srv.URL)
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	dir := t.TempDir()

	parent := submit(t, q, channelJob(dir, "parent"))
	socket, token := readChannel(t, dir, "parent")
	r := followUp(t, socket, token, `{"pool":"p","command":["true"]}`)
	if r.Error != "" {
		t.Fatalf("follow-up: %+v", r)
	}
	if err := os.WriteFile(filepath.Join(dir, "parent.stop"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitState(t, q, parent, jobs.StateSucceeded, 20*time.Second)
	waitState(t, q, r.ID, jobs.StateSucceeded, 20*time.Second)

	harness.Eventually(t, 10*time.Second, "both runs' spans to end", func() bool {
		return spanOf(rec, telemetry.SpanJobRun, parent) != nil && spanOf(rec, telemetry.SpanJobRun, r.ID) != nil
	})
	for _, id := range []string{parent, r.ID} {
		sub, run := spanOf(rec, telemetry.SpanJobSubmit, id), spanOf(rec, telemetry.SpanJobRun, id)
		if sub == nil {
			t.Fatalf("job %s: no submit span", id)
		}
		if links := run.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != sub.SpanContext().SpanID() ||
			links[0].SpanContext.TraceID() != sub.SpanContext().TraceID() {
			t.Fatalf("job %s: run span links %+v, want one to the submit span %v", id, links, sub.SpanContext())
		}
		if run.SpanContext().TraceID() == sub.SpanContext().TraceID() || run.Parent().IsValid() {
			t.Fatalf("job %s: the run span is not the root of a trace of its own", id)
		}
	}
	parentRun, childSubmit := spanOf(rec, telemetry.SpanJobRun, parent), spanOf(rec, telemetry.SpanJobSubmit, r.ID)
	if childSubmit.Parent().SpanID() != parentRun.SpanContext().SpanID() {
		t.Fatalf("the follow-up's submit span has parent %v, want the parent's run span %v", childSubmit.Parent(), parentRun.SpanContext())
	}
}

// A job's lease wait is in its trace: the client's lease.acquire and
// lease.release spans of an attempt are children of its job.run span
// (issue 31), not roots of traces of their own.
func TestJobRunSpanHoldsItsLeaseSpans(t *testing.T) {
	rec := harness.RecordSpans(t)
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "p", Capacity: 1}}})
	q := openQueue(t, srv.URL)
	startServing(t, srv.URL, "n1", jobs.ServerConfig{})
	spec := jobs.NewSpec()
	spec.Pool, spec.Command = "p", []string{"true"}
	id := submit(t, q, spec)
	waitState(t, q, id, jobs.StateSucceeded, 20*time.Second)

	var run sdktrace.ReadOnlySpan
	harness.Eventually(t, 10*time.Second, "the run's span to end", func() bool { run = spanOf(rec, telemetry.SpanJobRun, id); return run != nil })
	for _, name := range []string{natstrace.SpanAcquire, natstrace.SpanRelease} {
		var found bool
		for _, s := range rec.Ended() {
			if s.Name() == name && s.SpanKind() == trace.SpanKindClient && s.Parent().SpanID() == run.SpanContext().SpanID() {
				found = s.SpanContext().TraceID() == run.SpanContext().TraceID()
			}
		}
		if !found {
			t.Errorf("no client %s span under the job.run span %v", name, run.SpanContext().SpanID())
		}
	}
}

// This test needs the wiring of manager/manager.go, lease/client.go and
// lease/lease.go described in the telemetry report. Once wired, delete the
// build constraint above.

package telemetry_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"github.com/slotlease/slotlease/test/harness"
)

// An executor's trace continues inside the lease manager: acquire (queued,
// then granted after a release), renew and release, all in one trace.
func TestTraceFromExecutorIntoManager(t *testing.T) {
	rec := useRecorder(t)
	srv := harness.StartServer(t)
	harness.StartManager(t, srv.URL, manager.Config{Node: "n1", Pools: []manager.PoolConfig{{Name: "gpu", Capacity: 1}}, TTL: 3 * time.Second})
	client := harness.Client(t, srv.URL, "n1", lease.WithPollInterval(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	blocker, err := client.Acquire(ctx, "gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, run := telemetry.StartSpan(ctx, natstrace.SpanExecutorRun)
	queued := make(chan struct{}, 1)
	type result struct {
		l   *lease.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := client.Acquire(runCtx, "gpu", 1, lease.OnQueued(func(int) {
			select {
			case queued <- struct{}{}:
			default:
			}
		}))
		done <- result{l, err}
	}()
	select {
	case <-queued:
	case <-ctx.Done():
		t.Fatal("never queued")
	}
	if err := blocker.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Wait for one heartbeat (every TTL/3 = 1s).
	harness.Eventually(t, 5*time.Second, "a renewal", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == natstrace.SpanRenew && s.SpanKind() == trace.SpanKindServer && s.SpanContext().TraceID() == run.SpanContext().TraceID() {
				return true
			}
		}
		return false
	})
	if err := r.l.Release(runCtx); err != nil {
		t.Fatal(err)
	}
	run.End()

	want := run.SpanContext().TraceID()
	harness.Eventually(t, 5*time.Second, "the manager's release span", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == natstrace.SpanRelease && s.SpanKind() == trace.SpanKindServer && s.SpanContext().TraceID() == want {
				return true
			}
		}
		return false
	})
	inTrace := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == want {
			inTrace[s.Name()] = append(inTrace[s.Name()], s)
		}
	}
	for _, name := range []string{natstrace.SpanExecutorRun, natstrace.SpanAcquire, natstrace.SpanAcquireQueued, natstrace.SpanGrant, natstrace.SpanRenew, natstrace.SpanRelease} {
		if len(inTrace[name]) == 0 {
			t.Errorf("no %s span in the executor's trace; have %v", name, keys(inTrace))
		}
	}
	var serverAcquire bool
	for _, s := range inTrace[natstrace.SpanAcquire] {
		serverAcquire = serverAcquire || s.SpanKind() == trace.SpanKindServer
	}
	if !serverAcquire {
		t.Error("the manager's acquire span is not in the executor's trace")
	}
	if g := inTrace[natstrace.SpanGrant]; len(g) == 1 && len(g[0].Links()) != 1 {
		t.Errorf("grant links %v, want one to the queued span", g[0].Links())
	}
}

func keys(m map[string][]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

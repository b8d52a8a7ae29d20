package telemetry_test

import (
	"strings"
	"testing"

	"github.com/slotlease/slotlease/telemetry"
)

// A job's stored trace context comes from whoever submitted it: a
// malformed one links the run to nothing, and never fails it.
func TestJobRunIgnoresAForgedTraceContext(t *testing.T) {
	rec := useRecorder(t)
	for _, stored := range []map[string]string{
		nil,
		{"traceparent": "garbage"},
		{"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"},
		{"traceparent": strings.Repeat("f", 1<<16), "tracestate": strings.Repeat("x=y,", 1<<14)},
	} {
		_, span := telemetry.StartJobRun(stored, telemetry.JobID("j"))
		span.End()
	}
	ended := endedByName(rec)[telemetry.SpanJobRun]
	if len(ended) != 4 {
		t.Fatalf("%d run spans, want 4", len(ended))
	}
	for _, s := range ended {
		if len(s.Links()) != 0 {
			t.Fatalf("a run span links to %v from a forged trace context", s.Links())
		}
	}
}

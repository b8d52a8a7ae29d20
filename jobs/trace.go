package jobs

import (
	"context"

	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// Submit validates spec, stores the job in the stream and its record as
// queued, and returns the record, under a "job.submit" span whose trace
// context is stored with the job for its runs to link to. With spec.ID or
// spec.IdempotencyKey set, submitting the same spec again returns the job
// submitted first, in whatever state it is now (Record.Existing); another
// spec under that id is ErrDuplicate.
func (q *Queue) Submit(ctx context.Context, spec Spec) (*Record, error) {
	ctx, span, trace := telemetry.StartJobSubmit(ctx, natstrace.Pool(spec.Pool))
	if spec.Parent != "" {
		natstrace.SetAttributes(span, telemetry.JobParent(spec.Parent))
	}
	rec, err := q.submit(ctx, spec, trace)
	if rec != nil {
		natstrace.SetAttributes(span, telemetry.JobID(rec.ID))
	}
	natstrace.End(span, err)
	return rec, err
}

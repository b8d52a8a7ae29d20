package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Cancelling. A cancel is recorded as a marker under cancelKey(id) in the
// results bucket, which only Cancel writes, so no executor's record write
// can lose it. A job that is not running is moved to StateCancelled at
// once, by a conditional write on the revision read (so a cancel never
// overwrites an executor's "running"), and its message is deleted from
// the stream; the executor's writes are conditional as well, so one that
// took the job just before finds it cancelled and does not run it
// (taskrecord.go). A running job is stopped by the executor running it: it
// watches the markers (Server.watchCancels) and looks for one when a run
// starts, stops the run through its sandbox, releases the lease, and
// stores the job as cancelled. A cancelled job is final: never run again.

// ErrFinal: the job had already ended (succeeded, dead or cancelled);
// Cancel returns its record with it.
var ErrFinal = errors.New("jobs: job already ended")

// cancelKey is the results bucket key of a job's cancel marker. A job id
// has no '.', so it never names a record.
func cancelKey(id string) string { return id + ".cancel" }

// MaxReasonLen bounds a cancel's reason as stored and shown: a marker is
// written by any executor, and its reason ends up in records and logs.
const MaxReasonLen = 200

func clipReason(r string) string {
	if len(r) > MaxReasonLen {
		return r[:MaxReasonLen] + "..."
	}
	return r
}

// cancelMark is the value of a cancel marker.
type cancelMark struct {
	ID     string    `json:"id"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Cancel cancels job id, for reason (shown in its record and event). It
// returns the job's record as the cancel left it: StateCancelled, or
// StateRunning when its executor is to stop it (CancelRequested set).
// ErrNotFound if there is no such job; ErrFinal, with the record, if it
// had ended already.
func (q *Queue) Cancel(ctx context.Context, id, reason string) (*Record, error) {
	reason = clipReason(reason)
	rec, _, err := q.get(ctx, q.results, id)
	if err != nil {
		return nil, err
	}
	if rec.State.Final() {
		return rec, fmt.Errorf("%w: %s is %s", ErrFinal, id, rec.State)
	}
	if err := q.markCancel(ctx, id, reason); err != nil {
		return nil, err
	}
	rec, err = q.settleCancel(ctx, id, reason, 0)
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// markCancel writes job id's cancel marker; one written before stays.
func (q *Queue) markCancel(ctx context.Context, id, reason string) error {
	val, err := json.Marshal(cancelMark{ID: id, Reason: reason, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := q.results.Create(ctx, cancelKey(id), val); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("jobs: cancelling %s: %w", id, err)
	}
	return nil
}

// settleCancel moves job id to StateCancelled unless it is running (or
// ended), by a write conditional on the revision read, and deletes its
// message from the stream (seq, or the record's). A running job's record
// comes back with CancelRequested set.
func (q *Queue) settleCancel(ctx context.Context, id, reason string, seq uint64) (*Record, error) {
	for range 5 {
		rec, rev, err := q.get(ctx, q.results, id)
		if err != nil {
			return nil, err
		}
		if rec.State.Final() {
			return rec, nil
		}
		if rec.State == StateRunning {
			rec.CancelRequested = true
			return rec, nil
		}
		now := time.Now().UTC()
		rec.State, rec.Error, rec.NextAttemptAt, rec.UpdatedAt = StateCancelled, "cancelled: "+reason, time.Time{}, now
		rec.FinishedAt = now
		val, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		if _, err := q.results.Update(ctx, id, val, rev); err != nil {
			if revisionMoved(err) { // read again
				continue
			}
			return nil, fmt.Errorf("jobs: cancelling %s: %w", id, err)
		}
		seq = max(seq, rec.Seq)
		if seq > 0 {
			// Not delivered again. An executor that took it already finds
			// the marker when its run starts.
			if err := q.stream.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return rec, fmt.Errorf("jobs: %s is cancelled, but its message stays until an executor reaches it: %w", id, err)
			}
		}
		q.emit(Event{Kind: EventCancelled, Job: id, Pool: rec.Spec.Pool, Batch: rec.Spec.Batch, Reason: reason})
		return rec, nil
	}
	return nil, fmt.Errorf("jobs: cancelling %s: its record kept changing; try again", id)
}

// cancelRequested reports whether job id has a cancel marker, and why.
func (q *Queue) cancelRequested(ctx context.Context, id string) (string, bool) {
	e, err := q.results.Get(ctx, cancelKey(id))
	if err != nil {
		return "", false
	}
	var m cancelMark
	_ = json.Unmarshal(e.Value(), &m)
	return clipReason(m.Reason), true
}

// Purge cancels every job of pool that is not running, and deletes their
// messages from the stream, so none of them runs; running jobs are left
// alone. It returns how many it purged.
func (q *Queue) Purge(ctx context.Context, pool, reason string) (int, error) {
	reason = clipReason(reason)
	if err := validID(pool); err != nil {
		return 0, fmt.Errorf("%w: pool %q: %v", ErrInvalidSpec, pool, err)
	}
	subject := q.names.PoolSubjects(pool)
	purged := 0
	for seq := uint64(1); ; {
		msg, err := q.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return purged, fmt.Errorf("jobs: purging pool %s: %w", pool, err)
		}
		seq = msg.Sequence + 1
		var job Job
		if json.Unmarshal(msg.Data, &job) != nil || validID(job.ID) != nil {
			continue // malformed: an executor dead-letters it
		}
		ok, err := q.purgeOne(ctx, job, msg.Sequence, reason)
		if err != nil {
			return purged, err
		}
		if ok {
			purged++
		}
	}
	q.emit(Event{Kind: EventPurged, Pool: pool, Count: purged, Reason: reason})
	return purged, nil
}

// purgeOne cancels one job of a purge unless it is running; true if it
// was purged.
func (q *Queue) purgeOne(ctx context.Context, job Job, seq uint64, reason string) (bool, error) {
	rec, _, err := q.get(ctx, q.results, job.ID)
	if errors.Is(err, ErrNotFound) {
		// Its submitter died before the record was written: write one.
		now := time.Now().UTC()
		val, merr := json.Marshal(&Record{ID: job.ID, State: StateQueued, Spec: job.Spec, SubmittedAt: job.SubmittedAt, UpdatedAt: now, Seq: seq})
		if merr != nil {
			return false, merr
		}
		if _, err := q.results.Create(ctx, job.ID, val); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return false, fmt.Errorf("jobs: purging %s: %w", job.ID, err)
		}
	} else if err != nil {
		return false, err
	} else if rec.State == StateRunning {
		return false, nil
	}
	rec, err = q.settleCancel(ctx, job.ID, reason, seq)
	if err != nil {
		return false, err
	}
	if rec.State != StateCancelled {
		return false, nil // it started meanwhile, or had ended
	}
	// An executor that took it just before finds the marker as it starts.
	return true, q.markCancel(ctx, job.ID, reason)
}

// Batch returns the records of every job of batch name.
func (q *Queue) Batch(ctx context.Context, name string) ([]Record, error) {
	if err := validID(name); err != nil {
		return nil, fmt.Errorf("%w: batch %q: %v", ErrInvalidSpec, name, err)
	}
	all, err := q.List(ctx, 0, "")
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, r := range all {
		if r.Spec.Batch == name {
			out = append(out, r)
		}
	}
	return out, nil
}

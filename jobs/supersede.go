package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/slotlease/slotlease/lease"
)

// Concurrency groups in the job queue. A job's on_group acts on its
// attempt's lease request (the lease manager's groups, per node), and,
// as the job is submitted, on the older jobs of its group in the queue:
// an executor takes a job only while its pool has a free slot (no
// hoarding), so a cancel_in_progress job behind a full pool would never
// reach the lease manager to stop the run it is to replace. Submit
// therefore cancels them at once, as executor cancel does: with
// cancel_pending the group's jobs not yet running, with
// cancel_in_progress also the running ones, which their executors stop
// (SIGTERM, the kill grace, SIGKILL) and store cancelled. A job's group
// in the queue is its pool, its tenant and its group name: any executor
// may cancel any job already (executor cancel), so this gives none more
// power.

// supersede cancels the older jobs of rec's group that its on_group
// replaces, and returns their ids.
func (q *Queue) supersede(ctx context.Context, rec *Record) ([]string, error) {
	s := rec.Spec
	if s.Group == "" || s.OnGroup == "" {
		return nil, nil
	}
	all, err := q.List(ctx, 0, "")
	if err != nil {
		return nil, fmt.Errorf("jobs: finding the jobs of group %q to replace: %w", s.Group, err)
	}
	var ids []string
	for _, r := range all {
		switch {
		case r.ID == rec.ID, r.State.Final(), !r.SubmittedAt.Before(rec.SubmittedAt),
			r.Spec.Pool != s.Pool, r.Spec.Tenant != s.Tenant, r.Spec.Group != s.Group,
			s.OnGroup == lease.OnGroupCancelPending && r.State == StateRunning:
			continue
		}
		_, err := q.Cancel(ctx, r.ID, fmt.Sprintf("superseded: job %s of group %q replaced it (%s)", rec.ID, s.Group, s.OnGroup))
		switch {
		case err == nil:
			ids = append(ids, r.ID)
		case errors.Is(err, ErrFinal), errors.Is(err, ErrNotFound):
			// It ended (or went) meanwhile: nothing to replace.
		default:
			return ids, fmt.Errorf("jobs: replacing job %s of group %q: %w", r.ID, s.Group, err)
		}
	}
	return ids, nil
}

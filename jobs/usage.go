package jobs

import (
	"context"
	"time"

	"github.com/slotlease/slotlease/jobs/usagefile"
	"github.com/slotlease/slotlease/lease"
)

// A job with units (Spec.Units) reserves them in its pools' budgets; each
// attempt's command may write what it used to $LEASE_USAGE_FILE, which is
// settled at release (package usagefile), else the estimate.

// usageFile makes the usage file of t's attempt and names it in env; nil
// for a job without units, or when it cannot be made (the estimate is
// then settled, and the log says why).
func (s *Server) usageFile(t *task, env map[string]string) *usagefile.File {
	if t.job.Spec.Units == 0 {
		return nil
	}
	f, err := usagefile.New()
	if err != nil {
		s.log.Warn("the job runs without a usage file; its estimate will be settled", "job", t.job.ID, "err", err)
		return nil
	}
	env[usagefile.Env] = f.Path()
	return f
}

// releaseUsage is releaseAll settling what the attempt wrote to its usage
// file f, if it has one.
func (s *Server) releaseUsage(t *task, set *lease.LeaseSet, f *usagefile.File) {
	if f == nil {
		s.releaseAll(t, set)
		return
	}
	ctx, cancel := context.WithTimeout(t.spanCtx, 5*time.Second)
	defer cancel()
	err := usagefile.Settle(ctx, f, set, t.job.Spec.Units, func(note string) {
		s.log.Info("job usage: "+note, "job", t.job.ID, "attempt", t.attempt)
	})
	if err != nil {
		s.log.Warn("releasing a job's leases (they expire on their own)", "job", t.job.ID, "err", err)
	}
}

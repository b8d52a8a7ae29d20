package jobs

import (
	"context"
	"errors"
	"fmt"
)

// A task's record is written by its executor at each step: running, then
// how the attempt ended. Cancel settles a job that is not running by a
// write conditional on the revision it read (settleCancel); the executor's
// writes are conditional too, on the revision it read when it took the
// job or last wrote, so neither lands over the other. An executor that
// finds its job ended meanwhile (a cancel settled it between the fetch and
// the run) leaves the record as it is and does not run the job.

// errEnded: the job's record was made final by another write (a cancel)
// since this executor read it.
var errEnded = errors.New("jobs: the job ended meanwhile")

// storeTask writes t.rec conditionally on t.rev and keeps t.rev current;
// errEnded if the stored record is final. It retries briefly
// (retryWrite): the write stands between a finished job and its acknowledgement.
func (s *Server) storeTask(t *task) error {
	return retryWrite(func(ctx context.Context) error { return s.writeTask(ctx, t) },
		func(err error) bool { return errors.Is(err, errEnded) })
}

// writeTask makes one conditional write of t.rec. When the revision moved,
// it reads the record again: final, it is left alone (errEnded); otherwise
// an earlier delivery's executor wrote it, and this delivery's write goes
// over it, as the current attempt's.
func (s *Server) writeTask(ctx context.Context, t *task) error {
	for range 5 {
		rev, err := s.putTask(ctx, t)
		if err == nil {
			t.rev = rev
			return nil
		}
		if !revisionMoved(err) && !errors.Is(err, errMoved) {
			return err
		}
		cur, rev, err := s.q.get(ctx, s.q.results, t.rec.ID)
		if errors.Is(err, ErrNotFound) {
			t.rev = 0 // deleted meanwhile: written anew
			continue
		}
		if err != nil {
			return err
		}
		if cur.State.Final() {
			// Final by whose word? An outcome no broker signed is
			// someone's forgery, which this attempt writes over.
			ok, err := s.q.believed(ctx, cur)
			if err != nil {
				return err
			}
			if ok {
				return fmt.Errorf("%w: %s is %s", errEnded, cur.ID, cur.State)
			}
			s.log.Warn("a record of this job claims an outcome no broker signed; writing over it", "job", cur.ID, "state", cur.State)
		}
		t.rev = rev
	}
	return fmt.Errorf("jobs: storing %s: its record kept changing", t.rec.ID)
}

// putTask makes one write of t.rec conditional on t.rev: a final record
// through the broker, which signs it for the taker of t's delivery
// (sign.go); any other directly.
func (s *Server) putTask(ctx context.Context, t *task) (uint64, error) {
	if t.rec.State.Final() {
		return s.q.settle(ctx, t.msg, t.rec, t.rev, settleAt)
	}
	return s.q.putAt(ctx, s.q.results, t.rec, t.rev)
}

// endedMeanwhile lets go of a task whose job was made final by another
// write since it was taken: nothing more is stored, and its message
// (deleted by the cancel, if it could be) is acknowledged.
func (s *Server) endedMeanwhile(t *task, err error) {
	s.log.Info("job ended while this executor held it; leaving it as it is", "job", t.job.ID, "why", err)
	s.metrics.ended(t.pool, OutcomeCancelled, 1)
	s.ack(t)
}

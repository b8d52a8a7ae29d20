package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Waiting for many jobs. A set of jobs is done when every job in it has
// ended (succeeded, dead or cancelled). That is final because a job is
// added to a set only from outside (a submit naming the batch) or from
// inside a running job of the set (a follow-up, which gets its parent's
// batch and names its parent), and a job's final record is stored only
// after its command channel closed, waiting for every follow-up submit
// under way, whose record is stored before the submit answers. So when
// the last job's final record is written, every follow-up it made has a
// record written before it, and the results bucket delivers records in
// the order they were written: Wait sees the child queued before it sees
// its parent end. Jobs submitted from outside after Wait returned are not
// counted.

// WaitFor says which jobs Wait waits for: every job of Batch, or the jobs
// IDs and the follow-ups they made, at any depth.
type WaitFor struct {
	Batch string
	IDs   []string
	// FailFast cancels every job of the set that has not ended once one
	// is dead (every attempt failed), and keeps waiting for them to end.
	FailFast bool
}

// Summary is where a set of jobs stands.
type Summary struct {
	Batch     string `json:"batch,omitempty"`
	Jobs      int    `json:"jobs"`
	Succeeded int    `json:"succeeded"`
	Dead      int    `json:"dead"`
	Cancelled int    `json:"cancelled"`
	// Pending is the jobs not ended yet: queued, running, or waiting for
	// a retry. Zero once Wait returns without an error.
	Pending int `json:"pending"`
	// Retried counts jobs that needed more than one attempt.
	Retried int `json:"retried"`
	// Failed lists the jobs that ended without succeeding (dead or
	// cancelled), oldest update first.
	Failed []Record `json:"failed"`
	// Slowest lists the longest latest attempts, longest first (at most
	// five).
	Slowest []Record `json:"slowest"`
	// Wall is the time from the first submit to the last update.
	Wall time.Duration `json:"wall_ns"`
	// Refused lists the jobs of the set (ids) whose record claimed an
	// outcome no broker signed (sign.go): a forgery, not counted as the
	// job's end. The job is pending until its executor stores its real
	// outcome.
	Refused []string `json:"refused,omitempty"`
}

// OK reports whether every job succeeded.
func (s *Summary) OK() bool { return s.Pending == 0 && s.Jobs > 0 && s.Succeeded == s.Jobs }

// ErrWaitTimeout: ctx ended before every job ended; the summary says
// where they stand.
var ErrWaitTimeout = errors.New("jobs: not every job has ended")

// Wait blocks until every job of w has ended, and returns the summary. If
// ctx ends first it returns the summary so far with ErrWaitTimeout.
// progress, if not nil, is called with the summary after each change.
func (q *Queue) Wait(ctx context.Context, w WaitFor, progress func(*Summary)) (*Summary, error) {
	if (w.Batch == "") == (len(w.IDs) == 0) {
		return nil, fmt.Errorf("%w: wait for a batch or for job ids", ErrInvalidSpec)
	}
	if w.Batch != "" {
		if err := validID(w.Batch); err != nil {
			return nil, fmt.Errorf("%w: batch %q: %v", ErrInvalidSpec, w.Batch, err)
		}
	}
	for _, id := range w.IDs {
		if _, err := q.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	s := newWaitSet(w)
	// The records in the order they were written, read as a watch would
	// deliver them but without a consumer (scan.go): first every record
	// stored, then what is written after, looked for every waitPoll.
	sc := q.scan(q.names.Results, "*", 0)
	poll := time.NewTimer(0)
	defer poll.Stop()
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			sum := s.summary()
			return sum, fmt.Errorf("%w: %d of %d pending", ErrWaitTimeout, sum.Pending, sum.Jobs)
		case <-poll.C:
		}
		var recs []*Record
		read := 0
		err := sc.readAll(ctx, func(e scanEntry) {
			read++
			if rec, ok := recordOf(e); ok {
				recs = append(recs, &rec)
			}
		})
		if err == nil {
			// An outcome counts only if a broker signed it (sign.go).
			err = q.checkOutcomes(ctx, recs)
		}
		if err != nil {
			if ctx.Err() != nil {
				continue // the deadline: answered above
			}
			return s.summary(), fmt.Errorf("jobs: waiting: %w", err)
		}
		for _, rec := range recs {
			if rec.Unsigned {
				s.refuse(*rec)
			} else {
				s.add(*rec)
			}
		}
		poll.Reset(waitPoll)
		if read == 0 && !first {
			continue
		}
		if w.FailFast && s.failed != "" {
			q.cancelRest(ctx, s)
		}
		sum := s.summary()
		if progress != nil {
			progress(sum)
		}
		if sum.Jobs > 0 && sum.Pending == 0 {
			return sum, nil
		}
		if sum.Jobs == 0 && w.Batch != "" {
			return sum, fmt.Errorf("%w: batch %s has no jobs", ErrNotFound, w.Batch)
		}
	}
}

// waitPoll is how often Wait looks for records written since it last
// looked.
const waitPoll = 200 * time.Millisecond

// cancelRest cancels the set's jobs that have not ended, once each.
func (q *Queue) cancelRest(ctx context.Context, s *waitSet) {
	for id, r := range s.members {
		if r.State.Final() || s.cancelAsked[id] {
			continue
		}
		s.cancelAsked[id] = true
		_, _ = q.Cancel(ctx, id, "fail-fast: job "+s.failed+" failed")
	}
}

// waitSet is the jobs a Wait follows.
type waitSet struct {
	w           WaitFor
	roots       map[string]bool
	members     map[string]Record
	kids        map[string][]Record // records seen whose parent is not a member (yet)
	failed      string              // the first dead job, for FailFast
	cancelAsked map[string]bool
	// refused are the members whose record claimed an outcome no broker
	// signed, in the order seen.
	refused      map[string]bool
	refusedOrder []string
}

func newWaitSet(w WaitFor) *waitSet {
	s := &waitSet{w: w, roots: map[string]bool{}, members: map[string]Record{}, kids: map[string][]Record{}, cancelAsked: map[string]bool{}, refused: map[string]bool{}}
	for _, id := range w.IDs {
		s.roots[id] = true
	}
	return s
}

// add takes a record in if it belongs to the set, with the follow-ups
// seen before it that do.
func (s *waitSet) add(r Record) {
	switch {
	case s.w.Batch != "":
		if r.Spec.Batch == s.w.Batch {
			s.admit(r)
		}
	case s.roots[r.ID] || s.isMember(r.Spec.Parent):
		s.admit(r)
		s.adopt(r.ID)
	case r.Spec.Parent != "":
		s.kids[r.Spec.Parent] = append(s.kids[r.Spec.Parent], r)
	}
}

// refuse notes a record of the set that claims an outcome no broker
// signed: the job keeps the state it had (queued, if it is new).
func (s *waitSet) refuse(r Record) {
	if !(s.isMember(r.ID) || s.roots[r.ID] || (s.w.Batch != "" && r.Spec.Batch == s.w.Batch) || s.isMember(r.Spec.Parent)) {
		return
	}
	if !s.refused[r.ID] {
		s.refused[r.ID] = true
		s.refusedOrder = append(s.refusedOrder, r.ID)
	}
	if _, ok := s.members[r.ID]; !ok {
		r.State = StateQueued // a member all the same, which has not ended
		s.members[r.ID] = r
	}
}

func (s *waitSet) isMember(id string) bool {
	_, ok := s.members[id]
	return id != "" && ok
}

func (s *waitSet) admit(r Record) {
	s.members[r.ID] = r
	if r.State == StateDead && s.failed == "" {
		s.failed = r.ID
	}
}

// adopt admits the follow-ups of id seen before it, at any depth.
func (s *waitSet) adopt(id string) {
	kids := s.kids[id]
	delete(s.kids, id)
	for _, k := range kids {
		if cur, ok := s.members[k.ID]; ok && cur.UpdatedAt.After(k.UpdatedAt) {
			continue
		}
		s.admit(k)
		s.adopt(k.ID)
	}
}

func (s *waitSet) summary() *Summary {
	sum := &Summary{Batch: s.w.Batch, Jobs: len(s.members), Failed: []Record{}, Slowest: []Record{}, Refused: slices.Clone(s.refusedOrder)}
	var first, last time.Time
	all := make([]Record, 0, len(s.members))
	for _, r := range s.members {
		all = append(all, r)
		switch r.State {
		case StateSucceeded:
			sum.Succeeded++
		case StateDead:
			sum.Dead++
		case StateCancelled:
			sum.Cancelled++
		default:
			sum.Pending++
		}
		if r.Attempts > 1 {
			sum.Retried++
		}
		if r.State.Final() && r.State != StateSucceeded {
			sum.Failed = append(sum.Failed, r)
		}
		if first.IsZero() || r.SubmittedAt.Before(first) {
			first = r.SubmittedAt
		}
		if r.UpdatedAt.After(last) {
			last = r.UpdatedAt
		}
	}
	if !first.IsZero() {
		sum.Wall = last.Sub(first)
	}
	slices.SortFunc(sum.Failed, func(a, b Record) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	slices.SortFunc(all, func(a, b Record) int { return cmp.Or(cmp.Compare(b.DurationMs, a.DurationMs), cmp.Compare(a.ID, b.ID)) })
	for _, r := range all[:min(5, len(all))] {
		if r.DurationMs > 0 {
			sum.Slowest = append(sum.Slowest, r)
		}
	}
	return sum
}

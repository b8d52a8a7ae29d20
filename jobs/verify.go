package jobs

import (
	"context"
	"fmt"
)

// Checking outcomes (sign.go). Only "succeeded" and "dead" are outcomes a
// forger gains by: a cancel is every executor's to make (docs/jobs.md,
// "Cancel and purge"), and the other states say a job has not ended.

// claimsOutcome reports whether r claims an outcome that needs a broker's
// signature to be believed.
func claimsOutcome(r *Record) bool { return r.State == StateSucceeded || r.State == StateDead }

// checkOutcomes asks the broker about every record of recs that claims an
// outcome, and marks those no broker signed Unsigned.
func (q *Queue) checkOutcomes(ctx context.Context, recs []*Record) error {
	var items []verifyItem
	var which []*Record
	for _, r := range recs {
		if claimsOutcome(r) {
			items = append(items, verifyItem{ID: r.ID, Digest: digest(r.stored), Sig: r.sig})
			which = append(which, r)
		}
	}
	for len(items) > 0 {
		n := min(len(items), maxVerifyItems)
		var out verifyReply
		if err := q.ask(ctx, verbVerify, verifyRequest{Items: items[:n]}, &out); err != nil {
			return err
		}
		if err := brokerError(verbVerify, out.Error); err != nil {
			return err
		}
		if len(out.Valid) != n {
			return fmt.Errorf("jobs: the broker checked %d records of %d", len(out.Valid), n)
		}
		for i, ok := range out.Valid {
			which[i].Unsigned = !ok
		}
		items, which = items[n:], which[n:]
	}
	return nil
}

// believed reports whether r's state is to be believed: not an outcome no
// broker signed.
func (q *Queue) believed(ctx context.Context, r *Record) (bool, error) {
	if err := q.checkOutcomes(ctx, []*Record{r}); err != nil {
		return false, err
	}
	return !r.Unsigned, nil
}

// GetChecked is Get, with the record's outcome checked: Unsigned is set on
// one that claims an outcome no broker signed.
func (q *Queue) GetChecked(ctx context.Context, id string) (*Record, error) {
	rec, err := q.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := q.checkOutcomes(ctx, []*Record{rec}); err != nil {
		return nil, err
	}
	return rec, nil
}

// ListChecked is List, with every outcome checked (see GetChecked).
func (q *Queue) ListChecked(ctx context.Context, limit int, state State) ([]Record, error) {
	recs, err := q.List(ctx, limit, state)
	if err != nil {
		return nil, err
	}
	ptrs := make([]*Record, len(recs))
	for i := range recs {
		ptrs[i] = &recs[i]
	}
	return recs, q.checkOutcomes(ctx, ptrs)
}

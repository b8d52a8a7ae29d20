package manager

import (
	"context"
	"fmt"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// Usage budgets (pools.Options.Budget, POOL_BUDGETS): an acquire gives an
// estimate of its units (AcquireRequest.Units), reserved while its lease
// is held (the record carries it, so a successor's rebuild reserves it
// again); its end settles the actual the release gave
// (ReleaseRequest.Units), or else the estimate. A release stores the
// pool's window with its settlement (budgetstore.go) before it deletes
// the record, so that a successor counts the units either in the record
// or in the window, never in neither.

// checkUnits refuses an estimate out of range (0 is none given).
func checkUnits(units int64) *lease.Error {
	if units < 0 || units > lease.MaxUnits {
		return errorf(lease.CodeBadRequest, "units must be between 1 and %d, got %d", int64(lease.MaxUnits), units)
	}
	return nil
}

// checkSettle refuses a release's actual out of range.
func checkSettle(units *int64) *lease.Error {
	if units != nil && (*units < 0 || *units > lease.MaxUnits) {
		return errorf(lease.CodeBadRequest, "units must be between 0 and %d, got %d", int64(lease.MaxUnits), *units)
	}
	return nil
}

// overBudget refuses a request p's budget could never grant: one without
// an estimate, or with one over the whole budget.
func overBudget(p *pool, units int64) *lease.Error {
	s := p.p.Stats()
	switch {
	case s.Budget == "":
		return nil
	case units == 0:
		return errorf(lease.CodeBadRequest, "pool %q has a budget of %s: the request must give its estimated units (units)", p.name, s.Budget)
	case units > s.BudgetLimit:
		return errorf(lease.CodeExceedsCapacity, "%d units requested, pool %q has a budget of %s", units, p.name, s.Budget)
	}
	return nil
}

// budgetWouldWait tells a would_wait of a pool with a budget what the
// budget holds back: when the slots are free and nobody waits, the
// message names the budget alone; and retry_after_ms is at least when the
// window frees room for the estimate (unset when only a settlement would).
func budgetWouldWait(e *lease.Error, p *pool, slots, units int64) {
	s := p.p.Stats()
	if e.Code != lease.CodeWouldWait || s.Budget == "" {
		return
	}
	if s.Available >= slots && s.QueuedRequests == 0 && (s.Rate == "" || s.Tokens >= slots) {
		e.Message = fmt.Sprintf("%d units not within pool %q's budget %s at once: %d settled in the window, %d reserved by leases held", units, p.name, s.Budget, s.BudgetUsed, s.BudgetReserved)
	}
	if d := p.p.RetryAfterUnits(slots, units); d > 0 {
		e.RetryAfterMs = max(e.RetryAfterMs, retryAfterMs(d))
	}
}

// startLocked, as h's release starts, takes its settlement, to be
// written before the record's delete is sent. The Manager's lock is held.
func (s *budgetStore) startLocked(h *held) {
	if h.pool == nil {
		return
	}
	sp, ok := h.pool.p.Settling(settledUnits(h))
	if ok {
		h.settleGen = s.pend(h.pool, h, sp)
	}
}

// storeSettled stores the window with h's settlement, if its release
// has one to store, and reports whether the delete may go on: not once
// this manager's term is over or it closes (ctx; the record then stays,
// and a successor counts its estimate).
func (s *budgetStore) storeSettled(ctx context.Context, h *held) bool {
	if h.settleGen == 0 {
		return true
	}
	return s.flushUntil(ctx, h.pool, h.settleGen)
}

// settleLocked gives a gone lease's slots back to its pool and settles
// its units; settled is what it settled, nil without a budget. closed:
// the Manager is closing (Close stores the window). The Manager's lock is
// held.
func (s *budgetStore) settleLocked(h *held, closed bool) (granted []*pools.Waiter, settled *int64) {
	p := h.pool
	if !p.p.HasBudget() {
		return p.p.ReleaseKey(h.rec.Tenant, h.rec.Key, h.rec.Slots), nil
	}
	actual := settledUnits(h)
	granted = p.p.ReleaseUnits(h.rec.Tenant, h.rec.Key, h.rec.Slots, h.rec.Units, actual)
	if h.settleGen != 0 {
		s.settled(p, h) // in the pool's window now: after, never before
	} else {
		// Expired, or freed by a delete this manager did not send: the
		// window is stored as soon as it can be (while closing, by
		// Close: budgetStore.close).
		s.dirty(p, !closed)
	}
	return granted, &actual
}

// settledUnits is what h's end settles: its release's actual, else its
// estimate.
func settledUnits(h *held) int64 {
	if h.settle != nil {
		return *h.settle
	}
	return h.rec.Units
}

// appendBudgetStats appends a budget's figures to a stats object.
func appendBudgetStats(b []byte, s *pools.Stats) []byte {
	if s.Budget != "" {
		b = appendStringField(b, "budget", s.Budget)
	}
	if s.BudgetLimit != 0 {
		b = appendIntField(b, "budget_limit", s.BudgetLimit)
	}
	if s.BudgetWindowMs != 0 {
		b = appendIntField(b, "budget_window_ms", s.BudgetWindowMs)
	}
	if s.BudgetUsed != 0 {
		b = appendIntField(b, "budget_used", s.BudgetUsed)
	}
	if s.BudgetReserved != 0 {
		b = appendIntField(b, "budget_reserved", s.BudgetReserved)
	}
	return b
}

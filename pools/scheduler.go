package pools

import (
	"cmp"
	"slices"
	"time"
)

// SchedulerStats is what a fair pool's scheduler holds now: its settings
// and, per share (a tenant's requests with one fairness key), its credit,
// slots and queue.
type SchedulerStats struct {
	// Strategy is "deficit_round_robin".
	Strategy string `json:"strategy"`
	// Quantum is the credit per turn of weight 1 (Options.Quantum).
	Quantum int64 `json:"quantum"`
	// StarvationAgeMs is Options.StarvationAge, omitted when none.
	StarvationAgeMs int64 `json:"starvation_age_ms,omitempty"`
	// Selected and Deferred are the sums of every share's counts (see
	// KeyStats) since the pool was made, shares since forgotten included;
	// StarvationPromotions counts the grants of a request that went first
	// because it had waited StarvationAge, ahead of the share whose turn
	// it was. They live with the Pool: from 0 when the manager starts or
	// takes the pool over, and when a resize adds the pool back.
	Selected             int64 `json:"selected"`
	Deferred             int64 `json:"deferred"`
	StarvationPromotions int64 `json:"starvation_promotions"`
	// Keys lists the shares with slots in flight or requests queued,
	// sorted by tenant and key: all of them, or the busiest (most slots in
	// flight and queued) within the limit given to Scheduler; MoreKeys
	// counts those left out.
	Keys     []KeyStats `json:"keys"`
	MoreKeys int        `json:"more_keys,omitempty"`
}

// KeyStats is one share of a fair pool.
type KeyStats struct {
	Tenant string `json:"tenant"`
	// Key is the fairness key, "" for the tenant's requests without one.
	Key    string `json:"key"`
	Weight int    `json:"weight"`
	// Deficit is the credit left from the share's turns: slots it may be
	// granted before its next turn's quantum (below 0 after a starvation
	// promotion; 0 out of the round).
	Deficit int64 `json:"deficit"`
	// InUse is the slots in flight; Queued and QueuedSlots its waiters.
	InUse       int64 `json:"in_use"`
	Queued      int   `json:"queued"`
	QueuedSlots int64 `json:"queued_slots"`
	// Ready is how many of its requests wait in the round: Queued when
	// its next request is within the key and tenant caps, else 0, and
	// Capped says that a cap holds it back. OldestReadyAgeMs is how long
	// its next request has waited, when it is ready.
	Ready            int   `json:"ready"`
	Capped           bool  `json:"capped,omitempty"`
	OldestReadyAgeMs int64 `json:"oldest_ready_age_ms,omitempty"`
	// Selected counts the share's requests the scheduler granted: on
	// arrival (nothing queued before them) or from the queue, starvation
	// promotions included. Deferred counts the times the scheduler passed
	// the share over while it had a request waiting: each turn that ended
	// with its next request costing more than its credit left (a request
	// of s slots under a quantum q is deferred about s/q times before its
	// turn pays for it, as plain deficit round robin plays the rounds),
	// and each time a key or tenant cap took its next request out of the
	// round (when the share reaches the cap with requests waiting, or a
	// request comes to a share already at it). Both count from when the
	// share appeared: a share holding and queueing nothing is forgotten,
	// and its counts with it (the pool's totals keep them).
	Selected int64 `json:"selected"`
	Deferred int64 `json:"deferred"`
}

// Scheduler returns the fair scheduler's state with at most limit shares
// (limit <= 0: none, only the count), or nil if the pool is not fair.
func (p *Pool) Scheduler(limit int) *SchedulerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.q.(*fairQueue)
	if !ok {
		return nil
	}
	st := &SchedulerStats{Strategy: "deficit_round_robin", Quantum: p.opts.Quantum,
		StarvationAgeMs: p.opts.StarvationAge.Milliseconds(), Keys: []KeyStats{},
		Selected: f.selected, Deferred: f.deferred, StarvationPromotions: f.promotions}
	var all []*share
	f.eachShare(func(s *share) { all = append(all, s) })
	if limit < 0 {
		limit = 0
	}
	if len(all) > limit {
		// The busiest first; among equals, by name, so the choice is stable.
		slices.SortFunc(all, func(a, b *share) int {
			return cmp.Or(cmp.Compare(b.inUse+b.queuedSlots, a.inUse+a.queuedSlots), byName(a, b))
		})
		st.MoreKeys = len(all) - limit
		all = all[:limit]
	}
	slices.SortFunc(all, byName)
	now := p.stamp()
	for _, s := range all {
		k := KeyStats{Tenant: s.t.name, Key: s.key, Weight: int(s.quantum / p.opts.Quantum), Deficit: s.deficit,
			InUse: s.inUse, Queued: s.queued, QueuedSlots: s.queuedSlots, Selected: s.selected, Deferred: s.deferred}
		switch {
		case s.ring != nil:
			k.Ready = s.queued
			k.OldestReadyAgeMs = time.Duration(now - head(s).vt).Milliseconds()
		case s.queued > 0:
			k.Capped = true
		}
		st.Keys = append(st.Keys, k)
	}
	return st
}

// byName orders shares by tenant, then key.
func byName(a, b *share) int {
	return cmp.Or(cmp.Compare(a.t.name, b.t.name), cmp.Compare(a.key, b.key))
}

// eachShare calls fn for every share.
func (f *fairQueue) eachShare(fn func(*share)) {
	visit := func(t *tenant) {
		for e := t.shares.Front(); e != nil; e = e.Next() {
			fn(e.Value.(*share))
		}
	}
	visit(&f.p.anon)
	for _, t := range f.p.tenants {
		visit(t)
	}
}

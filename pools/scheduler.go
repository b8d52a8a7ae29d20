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
	// Keys lists the shares with slots in flight or requests queued,
	// sorted by tenant and key, at most the limit given to Scheduler;
	// MoreKeys counts those left out.
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
		StarvationAgeMs: p.opts.StarvationAge.Milliseconds(), Keys: []KeyStats{}}
	var all []*share
	f.eachShare(func(s *share) { all = append(all, s) })
	slices.SortFunc(all, func(a, b *share) int { return cmp.Or(cmp.Compare(a.t.name, b.t.name), cmp.Compare(a.key, b.key)) })
	if limit < 0 {
		limit = 0
	}
	if len(all) > limit {
		st.MoreKeys = len(all) - limit
		all = all[:limit]
	}
	now := p.stamp()
	for _, s := range all {
		k := KeyStats{Tenant: s.t.name, Key: s.key, Weight: int(s.quantum / p.opts.Quantum), Deficit: s.deficit,
			InUse: s.inUse, Queued: s.queued, QueuedSlots: s.queuedSlots}
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

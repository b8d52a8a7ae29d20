package manager

import (
	"sync"

	"github.com/slotlease/slotlease/lease"
)

// tally counts how each pool's requests and leases ended
// (lease.PoolCounts): it sits between the outbox and the event sink, so
// every event the manager publishes is counted once, and nothing else is.
// The outbox publishes only while this manager serves its term, so a
// deposed manager counts nothing. The counts start from what the node's
// previous managers stored (countStore.load) and are written back by
// countStore; stats replies carry them.
//
// Its state has its own lock (mu), taken with or without the Manager's
// lock held, so always after it; it never calls back into the Manager.
type tally struct {
	next EventSink // where the events go on to

	mu sync.Mutex
	// counts holds every pool counted or restored, also pools a resize
	// removed since: added back, they carry on. Guarded by mu.
	counts map[string]*lease.PoolCounts
	// shadow holds, by pool, what shadow pools' limits would have done
	// (lease.ShadowCounts), kept and stored like counts. Guarded by mu.
	shadow map[string]lease.ShadowCounts
	// changes counts the events counted, written the value it had at the
	// last write: a write is due while they differ. Guarded by mu.
	changes, written uint64
}

var _ Flusher = (*tally)(nil)

func newTally(next EventSink) *tally {
	return &tally{next: next, counts: make(map[string]*lease.PoolCounts), shadow: make(map[string]lease.ShadowCounts)}
}

// Publish counts ev and passes it on.
func (t *tally) Publish(ev lease.Event) {
	if o, ok := lease.OutcomeOf(ev.Kind, ev.Code); ok {
		t.mu.Lock()
		c := t.counts[ev.Pool]
		if c == nil {
			c = new(lease.PoolCounts)
			t.counts[ev.Pool] = c
		}
		*c.Field(o)++
		t.countShadowLocked(ev)
		t.changes++
		t.mu.Unlock()
	}
	t.next.Publish(ev)
}

// Flush flushes the sink the events go on to, if it holds any back.
func (t *tally) Flush() {
	if f, ok := t.next.(Flusher); ok {
		f.Flush()
	}
}

// of returns a copy of pool's counts, zero if it has none yet.
func (t *tally) of(pool string) *lease.PoolCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := new(lease.PoolCounts)
	if p := t.counts[pool]; p != nil {
		*c = *p
	}
	return c
}

// restore starts the counts from stored ones, before anything is counted.
func (t *tally) restore(stored storedCounts) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, c := range stored.Pools {
		t.counts[name] = &c
	}
	t.restoreShadowLocked(stored.Shadow)
}

// due returns every pool's counts and the change they include, and false
// if nothing was counted since the last write.
func (t *tally) due() (storedCounts, uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.changes == t.written {
		return storedCounts{}, 0, false
	}
	out := make(map[string]lease.PoolCounts, len(t.counts))
	for name, c := range t.counts {
		out[name] = *c
	}
	return storedCounts{Pools: out, Shadow: t.shadowDueLocked()}, t.changes, true
}

// wrote records that the counts of change are stored.
func (t *tally) wrote(change uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.written = max(t.written, change)
}

package manager

import (
	"context"
	"sync"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// history is a bounded ring of samples per pool: the owner of the pools'
// utilisation history, with its own lock and its sampling loop (run, which
// discovery runs in a goroutine it owns). The Manager hands it each sample
// (Manager.poolPoints) and the snapshot reads it (under m.mu, then the
// history's lock); the sampler never holds one lock while taking the other.
// Invariant: every ring holds at most HistoryPoints samples, oldest first
// from next.
type history struct {
	mu    sync.Mutex
	rings map[string]*ring
}

type ring struct {
	pts  [lease.HistoryPoints]lease.HistoryPoint
	next int // where the next sample goes
	n    int // how many are kept, <= HistoryPoints
}

func (r *ring) add(p lease.HistoryPoint) {
	r.pts[r.next] = p
	r.next = (r.next + 1) % lease.HistoryPoints
	r.n = min(r.n+1, lease.HistoryPoints)
}

// points returns the samples oldest first.
func (r *ring) points() []lease.HistoryPoint {
	out := make([]lease.HistoryPoint, 0, r.n+1)
	for i := range r.n {
		out = append(out, r.pts[(r.next-r.n+i+lease.HistoryPoints)%lease.HistoryPoints])
	}
	return out
}

// record adds one sample per pool, and forgets the rings of pools not in
// sample (a resize removed them).
func (h *history) record(sample map[string]lease.HistoryPoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rings == nil {
		h.rings = make(map[string]*ring, len(sample))
	}
	for name, pt := range sample {
		r := h.rings[name]
		if r == nil {
			r = new(ring)
			h.rings[name] = r
		}
		r.add(pt)
	}
	for name := range h.rings {
		if _, ok := sample[name]; !ok {
			delete(h.rings, name)
		}
	}
}

// points returns pool's samples, oldest first.
func (h *history) points(pool string) []lease.HistoryPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.rings[pool]; r != nil {
		return r.points()
	}
	return nil
}

// run records sample() now and every HistoryStep until ctx ends.
func (h *history) run(ctx context.Context, sample func(now time.Time) map[string]lease.HistoryPoint) {
	tick := time.NewTicker(lease.HistoryStep)
	defer tick.Stop()
	for now := time.Now(); ; {
		h.record(sample(now))
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C:
		}
	}
}

func pointOf(now time.Time, p *pool) lease.HistoryPoint {
	s := p.p.Stats()
	return lease.HistoryPoint{now.Unix(), s.InUse, s.Capacity, int64(s.QueuedRequests)}
}

// poolPoints is every pool's sample at now, for history.run.
func (m *Manager) poolPoints(now time.Time) map[string]lease.HistoryPoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]lease.HistoryPoint, len(m.pools))
	for name, p := range m.pools {
		out[name] = pointOf(now, p)
	}
	return out
}

package lease

import "time"

// History resolution and length: the last hour of every pool at 5 s
// resolution, 720 points per pool, kept in the manager process so the
// operator's page has its sparklines filled from the first second.
const (
	HistoryStep   = 5 * time.Second
	HistoryPoints = 720
)

// HistoryPoint is one sample of a pool: unix seconds, slots in use,
// capacity, queued requests. Encoded as a 4-element JSON array, so an hour
// of 720 points stays small.
type HistoryPoint [4]int64

// history is a bounded ring of samples per pool, kept with the admin
// endpoints (discovery.hist). Guarded by Manager.mu.
// Invariant: every ring holds at most HistoryPoints samples, oldest first
// from next.
type history struct {
	rings map[string]*ring
}

type ring struct {
	pts  [HistoryPoints]HistoryPoint
	next int // where the next sample goes
	n    int // how many are kept, <= HistoryPoints
}

func (r *ring) add(p HistoryPoint) {
	r.pts[r.next] = p
	r.next = (r.next + 1) % HistoryPoints
	r.n = min(r.n+1, HistoryPoints)
}

// points returns the samples oldest first.
func (r *ring) points() []HistoryPoint {
	out := make([]HistoryPoint, 0, r.n+1)
	for i := range r.n {
		out = append(out, r.pts[(r.next-r.n+i+HistoryPoints)%HistoryPoints])
	}
	return out
}

// sampleLocked records every pool's figures at now, and forgets the rings
// of pools that no longer exist (a resize removed them).
func (m *Manager) sampleLocked(now time.Time) {
	if m.disc.hist.rings == nil {
		m.disc.hist.rings = make(map[string]*ring, len(m.pools))
	}
	for name, p := range m.pools {
		r := m.disc.hist.rings[name]
		if r == nil {
			r = new(ring)
			m.disc.hist.rings[name] = r
		}
		r.add(pointOf(now, p))
	}
	for name := range m.disc.hist.rings {
		if m.pools[name] == nil {
			delete(m.disc.hist.rings, name)
		}
	}
}

func pointOf(now time.Time, p *pool) HistoryPoint {
	s := p.p.Stats()
	return HistoryPoint{now.Unix(), s.InUse, s.Capacity, int64(s.QueuedRequests)}
}

// sampleHistory samples the pools now and every HistoryStep until the
// manager closes. Close waits for it (m.ops).
func (m *Manager) sampleHistory() {
	defer m.ops.Done()
	tick := time.NewTicker(HistoryStep)
	defer tick.Stop()
	for now := time.Now(); ; {
		m.mu.Lock()
		m.sampleLocked(now)
		m.mu.Unlock()
		select {
		case <-m.ctx.Done():
			return
		case now = <-tick.C:
		}
	}
}

package manager

import (
	"sort"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// What the manager reports of its pools: their figures (Stats), and the
// stats reply's content (NodePools), one for its stats subject and the
// HTTP API's /v1/pools.

// Stats returns every pool's figures, sorted by name.
func (m *Manager) Stats() []lease.PoolStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return poolStats(m.pools, m.tally)
}

func poolStats(ps map[string]*pool, t *tally) []lease.PoolStats {
	out := make([]lease.PoolStats, 0, len(ps))
	for _, p := range ps {
		out = append(out, lease.PoolStats{Name: p.name, Stats: p.p.Stats(), Tenants: p.p.Tenants(), Counts: t.of(p.name), ShadowCounts: t.shadowOf(p.name)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	// A fair pool's configured weights, within one budget per reply so
	// that a long TENANT_WEIGHTS cannot push the reply past NATS's payload
	// limit: pools past it go without (executors then weigh only the
	// tenants holding or waiting, whose weights Tenants carries).
	budget, keys := lease.MaxStatsWeights, lease.MaxStatsKeys
	for i := range out {
		if out[i].Policy != pools.PolicyFair {
			continue
		}
		pp := ps[out[i].Name].p
		out[i].Scheduler = pp.Scheduler(keys) // and its shares, within a budget per reply too
		keys -= len(out[i].Scheduler.Keys)
		o := pp.Options()
		out[i].DefaultWeight = o.DefaultWeight
		if len(o.Weights) <= budget {
			out[i].Weights = o.Weights
			budget -= len(o.Weights)
		}
	}
	return out
}

// NodePools is what the manager's stats reply carries, in the shape of
// NodePools: one content for its stats subject and the HTTP API's /v1/pools.
func (m *Manager) NodePools() lease.NodePools {
	np := lease.NodePools{Node: m.cfg.Node, Pools: m.Stats(), ServedBy: m.cfg.ServedBy}
	if np.Pools == nil {
		np.Pools = []lease.PoolStats{} // "[]", not "null"
	}
	if m.cfg.Warnings != nil {
		np.Warnings = m.cfg.Warnings()
	}
	if m.cfg.ClusterPools != nil {
		if names := m.cfg.ClusterPools(); names != nil {
			np.ClusterPools = &names
		}
	}
	return np
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"

	"github.com/slotlease/slotlease/candidacy"
	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/metrics/leasemetrics"
	"github.com/slotlease/slotlease/pools"
)

// Cluster pools (CLUSTER_POOLS): every leasemgr that lists them is a
// candidate to serve them, as node lease.ClusterNode. Exactly one serves at
// a time, by the same leadership, fencing, records and takeover as a
// node's own hot standbys: the cluster pools are a node's pools whose node
// is no machine. The candidates also keep a record of their lists
// (package candidacy) and report any disagreement: in the log, in the
// serving manager's stats replies (leasemgr pools, /v1/pools) and on
// /readyz of every candidate.

// clusterState is this process's side of the cluster pools: the manager
// serving them while this process does, and the candidates' latest
// disagreements (for the stats replies and /readyz).
type clusterState struct {
	active   atomic.Pointer[manager.Manager]
	warnings atomic.Pointer[[]string]
	pools    atomic.Pointer[[]string] // the live candidates' cluster pools; nil until known
}

func (cs *clusterState) setPools(names []string) { cs.pools.Store(&names) }

// Pools returns the cluster pools the live candidates list, nil until the
// candidates' records were read.
func (cs *clusterState) Pools() []string {
	if p := cs.pools.Load(); p != nil {
		return *p
	}
	return nil
}

func (cs *clusterState) Warnings() []string {
	if w := cs.warnings.Load(); w != nil {
		return *w
	}
	return nil
}

// clusterConfig derives the cluster pools' manager configuration from the
// node's: another node id, pools, instance and metrics, the same NATS,
// store, TTL, reply rules and fast release.
func clusterConfig(cfg *config.Manager, node manager.Config, metrics *leasemetrics.Metrics, cs *clusterState) manager.Config {
	mc := node
	mc.Node = lease.ClusterNode
	mc.Pools = poolConfigs(cfg, cfg.ClusterPools)
	mc.Instance = nuid.Next()
	mc.GrantLatency = func(pool string, d time.Duration) { metrics.ObserveGrantLatency(lease.ClusterNode, pool, d) }
	mc.ReplyRefused = metrics.ReplyRefusals(lease.ClusterNode)
	mc.RecordRefused = metrics.RecordsRefused(lease.ClusterNode)
	mc.SecretRefused = metrics.SecretsRefused(lease.ClusterNode)
	mc.ServedBy = cfg.NodeID
	mc.Warnings = cs.Warnings
	mc.Logger = node.Logger.With("role", "cluster pools")
	// Other candidates may serve the cluster pools through this very
	// server once this one stops: its going is not the end of them.
	mc.EmbeddedServer = false
	return mc
}

// runClusterCandidate keeps this process's candidacy for the cluster pools
// and serves them whenever it wins their leadership, until ctx ends.
func runClusterCandidate(ctx context.Context, cfg *config.Manager, mc manager.Config, leaders manager.Store, metrics *leasemetrics.Metrics, cs *clusterState, log *slog.Logger) {
	metrics.SetPoolSource(lease.ClusterNode, func() []lease.PoolStats {
		if m := cs.active.Load(); m != nil {
			return m.Stats()
		}
		return nil // another candidate serves them
	})
	defer metrics.SetPoolSource(lease.ClusterNode, nil)

	self := candidacy.Record{Node: cfg.NodeID, Instance: mc.Instance, Pools: map[string]int64{}, Rates: map[string]string{}, Budgets: map[string]string{}}
	for _, p := range cfg.ClusterPools {
		self.Pools[p.Name] = p.Capacity
		if p.Rate != (pools.Rate{}) {
			self.Rates[p.Name] = fmt.Sprintf("%v burst %d", p.Rate, p.Burst)
		}
		if p.Budget != (pools.Rate{}) {
			self.Budgets[p.Name] = p.Budget.String()
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		err := candidacy.Run(ctx, candidacy.Config{Store: leaders, Cluster: lease.ClusterNode, Self: self, TTL: cfg.LeaderTTL, Logger: log,
			OnChange: func(d []string) { cs.warnings.Store(&d) }, OnPools: cs.setPools, Refused: mc.RecordRefused})
		if err != nil {
			log.Error("cluster pool candidacy", "err", err)
		}
	})
	if err := leadNode(ctx, cfg, mc, leaders, &cs.active, log); err != nil {
		log.Error("serving the cluster pools", "err", err)
	}
}

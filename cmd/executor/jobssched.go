package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// poolScheduler is, in executor jobs, a fair pool's scheduler as the lease
// manager serving it reports it (docs/protocol.md section 2.5), with the
// pool's configured weights.
type poolScheduler struct {
	Node          string         `json:"node"`
	Pool          string         `json:"pool"`
	Weights       map[string]int `json:"weights,omitempty"`
	DefaultWeight int            `json:"default_weight,omitempty"`
	*pools.SchedulerStats
}

// jobPools are the pools the queue's jobs use, sorted.
func jobPools(depths []jobs.Depth, loads []jobs.PoolLoad) []string {
	var names []string
	for _, d := range depths {
		names = append(names, d.Pool)
	}
	for _, l := range loads {
		names = append(names, l.Pool)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// schedulers asks this node's lease manager, then the cluster pools', for
// the scheduler of each fair pool among names. A manager that does not
// answer within statsWait adds nothing: its pools go without.
func schedulers(ctx context.Context, nc *nats.Conn, prefix, node string, names []string) []poolScheduler {
	out := []poolScheduler{}
	if len(names) == 0 {
		return out
	}
	seen := map[string]bool{}
	for _, n := range []string{node, lease.ClusterNode} {
		c, err := lease.NewClient(nc, n, lease.WithPrefix(prefix))
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, statsWait)
		np, err := c.NodePools(sctx)
		cancel()
		c.Close()
		if err != nil {
			continue
		}
		for _, p := range np.Pools {
			if p.Scheduler == nil || seen[p.Name] || !slices.Contains(names, p.Name) {
				continue
			}
			seen[p.Name] = true
			out = append(out, poolScheduler{Node: np.Node, Pool: p.Name, Weights: p.Weights, DefaultWeight: p.DefaultWeight, SchedulerStats: p.Scheduler})
		}
	}
	slices.SortFunc(out, func(a, b poolScheduler) int { return cmp.Compare(a.Pool, b.Pool) })
	return out
}

// printSchedulers prints a line per fair pool and one per share.
func printSchedulers(w io.Writer, scheds []poolScheduler) {
	for _, s := range scheds {
		age := ""
		if s.StarvationAgeMs > 0 {
			age = fmt.Sprintf(" starvation_age=%v", time.Duration(s.StarvationAgeMs)*time.Millisecond)
		}
		fmt.Fprintf(w, "SCHEDULER %s (node %s): %s quantum=%d%s selected=%d deferred=%d starvation_promotions=%d\n",
			s.Pool, s.Node, s.Strategy, s.Quantum, age, s.Selected, s.Deferred, s.StarvationPromotions)
		for _, k := range s.Keys {
			name := k.Key
			switch {
			case k.Tenant != "" && k.Key != "":
				name = k.Tenant + "/" + k.Key
			case k.Key == "":
				name = fmt.Sprintf("tenant %q", k.Tenant)
			}
			line := fmt.Sprintf("  key %s: weight=%d deficit=%d in_use=%d queued=%d ready=%d selected=%d deferred=%d",
				name, k.Weight, k.Deficit, k.InUse, k.Queued, k.Ready, k.Selected, k.Deferred)
			if k.Capped {
				line += " capped"
			}
			if k.OldestReadyAgeMs > 0 {
				line += fmt.Sprintf(" oldest_ready=%v", time.Duration(k.OldestReadyAgeMs)*time.Millisecond)
			}
			fmt.Fprintln(w, line)
		}
		if s.MoreKeys > 0 {
			fmt.Fprintf(w, "  (%d more keys)\n", s.MoreKeys)
		}
	}
	if len(scheds) > 0 {
		fmt.Fprintln(w)
	}
}

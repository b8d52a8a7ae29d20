package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
)

// A job names a pool and slots that may not exist anywhere: submitted, it
// would wait forever, or die after its attempts. So before it submits,
// executor submit asks the lease managers which pools there are and how
// many slots one request can ever get in each, and refuses a job that can
// never run, naming what is wrong (--no-pool-check skips this, to queue
// jobs for a pool that does not exist yet). Where no manager answers,
// nothing can be checked: the jobs are submitted, with a note.

// poolLimits is, per pool, the most slots one request can be granted at
// once on any node that has it (its capacity, or its burst where a start
// rate holds less); 0 for a cluster pool no manager serves right now.
type poolLimits map[string]int64

// discoverWait bounds the discovery of the managers; statsWait each
// node's stats.
const (
	discoverWait = 500 * time.Millisecond
	statsWait    = 2 * time.Second
)

// checkPools refuses the first spec no node can run. It asks this node's
// manager and the cluster pools' first, which settles most jobs in one
// round trip each; only a job they cannot run makes it ask every node
// (service discovery). It reports false when no manager answered at all.
func checkPools(ctx context.Context, nc *nats.Conn, prefix, node string, specs []jobs.Spec) (checked bool, err error) {
	limits, answered := poolLimits{}, false
	ask := func(nodes []string) error {
		for _, n := range nodes {
			ok, err := limits.add(ctx, nc, prefix, n)
			if err != nil {
				return err
			}
			answered = answered || ok
		}
		return nil
	}
	if err := ask([]string{node, lease.ClusterNode}); err != nil {
		return false, err
	}
	if answered && limits.checkAll(specs) == nil {
		return true, nil
	}
	dctx, cancel := context.WithTimeout(ctx, discoverWait)
	nodes, err := lease.DiscoverNodes(dctx, nc, prefix)
	cancel()
	if err != nil {
		return false, err
	}
	if err := ask(slices.DeleteFunc(nodes, func(n string) bool { return n == node || n == lease.ClusterNode })); err != nil {
		return false, err
	}
	if !answered {
		return false, nil
	}
	return true, limits.checkAll(specs)
}

// add asks node's manager for its pools; false if none answers.
func (l poolLimits) add(ctx context.Context, nc *nats.Conn, prefix, node string) (bool, error) {
	c, err := lease.NewClient(nc, node, lease.WithPrefix(prefix))
	if err != nil {
		return false, err
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(ctx, statsWait)
	np, err := c.NodePools(sctx)
	cancel()
	if err != nil {
		return false, nil // no manager serves it now: its pools are unknown
	}
	for _, p := range np.Pools {
		most := p.Capacity
		if p.Rate != "" && p.Burst > 0 && p.Burst < most {
			most = p.Burst
		}
		l[p.Name] = max(l[p.Name], most)
	}
	if np.ClusterPools != nil {
		for _, name := range *np.ClusterPools {
			if _, ok := l[name]; !ok {
				l[name] = 0 // a candidate lists it; its manager may be between terms
			}
		}
	}
	return true, nil
}

// checkAll is check for each spec, naming the spec when there are several.
func (l poolLimits) checkAll(specs []jobs.Spec) error {
	for i, s := range specs {
		if err := l.check(s); err != nil {
			if len(specs) > 1 {
				return fmt.Errorf("job %d of %d (none submitted): %w", i+1, len(specs), err)
			}
			return err
		}
	}
	return nil
}

// check refuses a spec whose pools or slots no node can grant.
func (l poolLimits) check(s jobs.Spec) error {
	wants := append([]jobs.PoolSlots{{Pool: s.Pool, Slots: s.Slots}}, s.Pools...)
	for _, w := range wants {
		most, ok := l[w.Pool]
		switch {
		case !ok:
			return fmt.Errorf("pool %q: no lease manager has it (pools: %s); --no-pool-check queues the job for a pool that does not exist yet",
				w.Pool, names(l))
		case most > 0 && w.Slots > most:
			return fmt.Errorf("pool %q: %d slot(s), but no node grants more than %d at once; the job could never run", w.Pool, w.Slots, most)
		}
	}
	return nil
}

func names(l poolLimits) string {
	ns := slices.Sorted(maps.Keys(l))
	if len(ns) == 0 {
		return "none"
	}
	if len(ns) > 16 {
		return strings.Join(ns[:16], ", ") + fmt.Sprintf(" and %d more", len(ns)-16)
	}
	return strings.Join(ns, ", ")
}

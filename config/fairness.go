package config

import (
	"fmt"
	"time"

	"github.com/slotlease/slotlease/pools"
)

// Fair-share variables of one pool each, comma-separated like
// POOL_CAPACITIES. Every name must be a pool of POOL_CAPACITIES,
// CLUSTER_POOLS or POOL_RATES; POOL_FAIR_QUANTUM and POOL_STARVATION_AGE
// need the pool to be fair (POOL_POLICIES), as does POOL_KEY_LIMITS: only
// the fair policy keeps a queue per key to pass a capped key over.
const (
	// EnvPoolKeyLimits caps the slots in flight per fairness key: gpu=2
	// (per tenant for requests without a key).
	EnvPoolKeyLimits = "POOL_KEY_LIMITS"
	// EnvPoolFairQuantum is the slots of credit a key of weight 1 gets per
	// turn: gpu=4 (default 1).
	EnvPoolFairQuantum = "POOL_FAIR_QUANTUM"
	// EnvPoolStarvationAge promotes a ready request that has waited this
	// long, whatever its key's credit: gpu=30s (default none).
	EnvPoolStarvationAge = "POOL_STARVATION_AGE"
)

// MaxStarvationAge bounds POOL_STARVATION_AGE.
const MaxStarvationAge = 24 * time.Hour

// resolveFairness reads the fair-share variables into the pools. Policies
// must already be resolved.
func (c *Manager) resolveFairness(m map[string]string) []error {
	fair := func(variable, name, what string) (*Pool, error) {
		p := c.poolNamed(name)
		if p == nil {
			return nil, reason(fmt.Sprintf("no pool %q (name it in POOL_CAPACITIES or CLUSTER_POOLS first)", name))
		}
		if p.Policy != "fair" {
			policy := p.Policy
			if policy == "" {
				policy = "fifo"
			}
			return nil, reason(fmt.Sprintf("pool %q is %s, not fair: %s needs POOL_POLICIES=%s=fair (%s is a fair pool's)", name, policy, what, name, variable))
		}
		return p, nil
	}
	// number reads a variable of fair pool=integer entries.
	number := func(variable, what, noun string, hi int64, set func(*Pool, int64)) []error {
		return parseEntries(variable, m[variable], "=", func(name, v string) error {
			p, err := fair(variable, name, what)
			if err != nil {
				return err
			}
			n, err := parseBounded(v, noun, 1, hi)
			if err != nil {
				return err
			}
			set(p, n)
			return nil
		})
	}
	var errs []error
	errs = append(errs, number(EnvPoolKeyLimits, "a per-key limit", "key limit", MaxCapacity, func(p *Pool, n int64) { p.KeyLimit = n })...)
	errs = append(errs, number(EnvPoolFairQuantum, "a quantum", "quantum", pools.MaxQuantum, func(p *Pool, n int64) { p.Quantum = n })...)
	errs = append(errs, parseEntries(EnvPoolStarvationAge, m[EnvPoolStarvationAge], "=", func(name, v string) error {
		p, err := fair(EnvPoolStarvationAge, name, "a starvation age")
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > MaxStarvationAge {
			return reason(fmt.Sprintf(`starvation age %q must be a positive duration of at most 24h, e.g. "30s"`, v))
		}
		p.StarvationAge = d
		return nil
	})...)
	return errs
}

// poolNamed returns the node or cluster pool of that name, or nil.
func (c *Manager) poolNamed(name string) *Pool {
	for _, ps := range [][]Pool{c.Pools, c.ClusterPools} {
		for i := range ps {
			if ps[i].Name == name {
				return &ps[i]
			}
		}
	}
	return nil
}

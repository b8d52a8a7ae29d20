package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
)

// Start rate variables: a pool may have a capacity (how many at once), a
// start rate (how many start per second, minute or hour), or both.
const (
	EnvPoolRates     = "POOL_RATES"      // api=60/m,embed=5/s (units s, m, h)
	EnvPoolRateBurst = "POOL_RATE_BURST" // api=5: most slots started at once (default one second's worth, at least 1)
)

// ParseRate parses a start rate: N/s, N/m or N/h, N from 1 to MaxCapacity,
// e.g. "60/m". Its errors are reasons only (see ValidToken).
func ParseRate(s string) (pools.Rate, error) { return rules.ParseRate(s) }

// ParseRateBurst parses a burst: a plain decimal from 1 to MaxCapacity that
// r can hold (pools.CheckRate).
func ParseRateBurst(s string, r pools.Rate) (int64, error) {
	n, err := parseBounded(s, "burst", 1, MaxCapacity)
	if err != nil {
		return 0, err
	}
	if _, err := pools.CheckRate(r, n); err != nil {
		return 0, reason(err.Error())
	}
	return n, nil
}

// resolveRates reads POOL_RATES and POOL_RATE_BURST into the pools. A name
// in neither POOL_CAPACITIES nor CLUSTER_POOLS becomes a node pool with
// only a rate: capacity MaxCapacity. Pools and ClusterPools must already
// be built; queue policies come after, so that they may name such a pool.
func (c *Manager) resolveRates(m map[string]string) []error {
	errs := c.setPoolEntries(EnvPoolRates, m[EnvPoolRates], func(p *Pool, v string) error {
		r, err := ParseRate(v)
		if err != nil {
			return err
		}
		burst, err := pools.CheckRate(r, 0)
		if err != nil {
			return reason(err.Error())
		}
		p.Rate, p.Burst = r, burst
		return nil
	})
	find := c.findPool
	errs = append(errs, parseEntries(EnvPoolRateBurst, m[EnvPoolRateBurst], "=", func(name, v string) error {
		p := find(name)
		if p == nil || p.Rate == (pools.Rate{}) {
			return reason(fmt.Sprintf("pool %q has no rate (give it one in POOL_RATES first)", name))
		}
		n, err := ParseRateBurst(v, p.Rate)
		if err != nil {
			return err
		}
		p.Burst = n
		return nil
	})...)
	return errs
}

// findPool returns the pool of that name in Pools or ClusterPools, nil if
// none. The pointer is good until Pools changes.
func (c *Manager) findPool(name string) *Pool {
	for _, ps := range [][]Pool{c.Pools, c.ClusterPools} {
		if i := slices.IndexFunc(ps, func(p Pool) bool { return p.Name == name }); i >= 0 {
			return &ps[i]
		}
	}
	return nil
}

// setPoolEntries reads variable's pool=value entries (value is s) and
// sets each on its pool with set: one of Pools or ClusterPools, or, for a
// name in neither, a new node pool of capacity MaxCapacity (one with only
// a rate or a budget), added to Pools once every entry is read.
func (c *Manager) setPoolEntries(variable, s string, set func(p *Pool, v string) error) []error {
	var added []Pool
	errs := parseEntries(variable, s, "=", func(name, v string) error {
		if p := c.findPool(name); p != nil {
			return set(p, v)
		}
		p := Pool{Name: name, Capacity: MaxCapacity}
		if err := set(&p, v); err != nil {
			return err
		}
		added = append(added, p) // names are not repeated (parseEntries)
		return nil
	})
	if len(added) > 0 {
		c.Pools = append(c.Pools, added...)
		slices.SortFunc(c.Pools, func(a, b Pool) int { return strings.Compare(a.Name, b.Name) })
	}
	return errs
}

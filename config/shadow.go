package config

import "fmt"

// EnvPoolShadow names the pools in shadow mode, comma-separated: gpu,api.
// Each must be a pool of POOL_CAPACITIES, CLUSTER_POOLS or POOL_RATES. A
// shadow pool grants at once whatever its limits (capacity, rate, caps,
// queue bound) would have queued or refused, and counts what they would
// have done: a way to try a limit on live traffic before it bites
// (docs/configuration.md, "Shadow mode").
const EnvPoolShadow = "POOL_SHADOW"

// resolveShadow reads POOL_SHADOW into the pools. Pools, cluster pools and
// rate-only pools must already be built.
func (c *Manager) resolveShadow(m map[string]string) []error {
	return parseEntries(EnvPoolShadow, m[EnvPoolShadow], "", func(name, _ string) error {
		p := c.poolNamed(name)
		if p == nil {
			return reason(fmt.Sprintf("no pool %q (name it in POOL_CAPACITIES, CLUSTER_POOLS or POOL_RATES first)", name))
		}
		p.Shadow = true
		return nil
	})
}

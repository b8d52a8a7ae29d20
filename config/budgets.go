package config

import (
	"github.com/slotlease/slotlease/rules"
)

// EnvPoolBudgets sets usage budgets: units (tokens, cents: the holders')
// per sliding window, beside or instead of a capacity (docs/configuration.md,
// "Budgets").
const EnvPoolBudgets = "POOL_BUDGETS" // openai=100000/m (units s, m, h)

// resolveBudgets reads POOL_BUDGETS into the pools. A name in neither
// POOL_CAPACITIES nor CLUSTER_POOLS (nor POOL_RATES) becomes a node pool
// with only a budget: capacity MaxCapacity.
func (c *Manager) resolveBudgets(m map[string]string) []error {
	return c.setPoolEntries(EnvPoolBudgets, m[EnvPoolBudgets], func(p *Pool, v string) error {
		b, err := rules.ParseBudget(v)
		if err != nil {
			return err
		}
		p.Budget = b
		return nil
	})
}

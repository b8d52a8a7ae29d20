package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
)

// Queue policy variables. Each is a comma-separated list like
// POOL_CAPACITIES; every name must be a pool of POOL_CAPACITIES (or
// "default").
const (
	EnvPoolPolicies        = "POOL_POLICIES"         // gpu=fair,io=priority (fifo|lifo|priority|fair; default fifo)
	EnvPoolMaxQueue        = "POOL_MAX_QUEUE"        // gpu=100 (absent: DefaultMaxQueue; 0: no queue, fail fast)
	EnvPoolOnFull          = "POOL_ON_FULL"          // gpu=drop_oldest (refuse|drop_oldest; default refuse)
	EnvTenantCaps          = "TENANT_CAPS"           // gpu=2: most slots one tenant may hold (fair pools only)
	EnvTenantWeights       = "TENANT_WEIGHTS"        // tenant-a:3,tenant-b:1 (fair pools)
	EnvTenantDefaultWeight = "TENANT_DEFAULT_WEIGHT" // weight of tenants not in TENANT_WEIGHTS (default 1)
	EnvPriorityAging       = "PRIORITY_AGING"        // waiting this long is worth one priority level (default 10s)
	// EnvMaxQueuedPerConnection bounds the requests one client connection
	// may have waiting on a node, over all its pools (default
	// DefaultMaxQueuedPerConnection).
	EnvMaxQueuedPerConnection = "MAX_QUEUED_PER_CONNECTION"
	// EnvMaxQueuedPerCredential bounds the requests waiting on a node from
	// every connection of one credential together (default
	// DefaultMaxQueuedPerCredential).
	EnvMaxQueuedPerCredential = "MAX_QUEUED_PER_CREDENTIAL"
)

// Default queue bounds: a client cannot make a manager hold unbounded
// memory and store with queued requests. A queued request costs the
// manager about 1.2 KB of memory and a queue entry in the store.
const (
	// DefaultMaxQueue is a pool's queue bound when POOL_MAX_QUEUE does not
	// name it.
	DefaultMaxQueue = rules.DefaultMaxQueue
	// DefaultMaxQueuedPerConnection is MAX_QUEUED_PER_CONNECTION's
	// default.
	DefaultMaxQueuedPerConnection = rules.DefaultMaxQueuedPerConnection
	// DefaultMaxQueuedPerCredential is MAX_QUEUED_PER_CREDENTIAL's default.
	DefaultMaxQueuedPerCredential = rules.DefaultMaxQueuedPerCredential
)

// Policies, as POOL_POLICIES accepts them.
var policies = []string{"fifo", "lifo", "priority", "fair"}

// On-full behaviours, as POOL_ON_FULL accepts them.
var onFulls = []string{"refuse", "drop_oldest"}

// parseEntries parses a comma-separated list of name<sep>value entries,
// or of plain names when sep is "" (value then gets ""), reporting every
// bad entry as a *VarError naming the variable. Names must be tokens and
// unique; value parses the value.
func parseEntries(variable, s string, sep string, value func(name, v string) error) []error {
	if s == "" {
		return nil
	}
	var errs []error
	seen := map[string]bool{}
	for _, entry := range strings.Split(s, ",") {
		err := func() error {
			if err := checkEntry(entry); err != nil {
				return err
			}
			name, v, ok := entry, "", true
			if sep != "" {
				name, v, ok = strings.Cut(entry, sep)
			}
			if !ok {
				return reason(fmt.Sprintf("missing %q (want name%svalue)", sep, sep))
			}
			if err := ValidToken(name); err != nil {
				return fmt.Errorf("invalid name %q: %w", name, err)
			}
			if seen[name] {
				return reason(fmt.Sprintf("duplicate name %q", name))
			}
			seen[name] = true
			return value(name, v)
		}()
		if err != nil {
			errs = append(errs, &VarError{Var: variable, Value: entry, Entry: true, Reason: err.Error(), Err: err})
		}
	}
	return errs
}

// resolvePolicies reads the queue policy variables from m into the pools
// and c. Pools must already be built.
func (c *Manager) resolvePolicies(m map[string]string) []error {
	index := map[string]*Pool{}
	for i := range c.Pools {
		index[c.Pools[i].Name] = &c.Pools[i]
	}
	for i := range c.ClusterPools {
		index[c.ClusterPools[i].Name] = &c.ClusterPools[i]
	}
	pool := func(name string) (*Pool, error) {
		p := index[name]
		if p == nil {
			return nil, reason(fmt.Sprintf("no pool %q (name it in POOL_CAPACITIES or CLUSTER_POOLS first)", name))
		}
		return p, nil
	}
	var errs []error
	errs = append(errs, parseEntries(EnvPoolPolicies, m[EnvPoolPolicies], "=", func(name, v string) error {
		p, err := pool(name)
		if err != nil {
			return err
		}
		for _, known := range policies {
			if v == known {
				p.Policy = v
				return nil
			}
		}
		return reason(fmt.Sprintf("unknown policy %q (want fifo, lifo, priority or fair)", v))
	})...)
	errs = append(errs, parseEntries(EnvPoolMaxQueue, m[EnvPoolMaxQueue], "=", func(name, v string) error {
		p, err := pool(name)
		if err != nil {
			return err
		}
		n, err := parseBounded(v, "max queue", 0, MaxQueueLimit)
		if err != nil {
			return err
		}
		// 0: no queue at all, every request that cannot start at once
		// refused (would_wait), as --no-wait does for one request.
		p.MaxQueue, p.FailFast = int(n), n == 0
		return nil
	})...)
	// On-full after max queue: a pool without a queue has nobody to drop.
	errs = append(errs, parseEntries(EnvPoolOnFull, m[EnvPoolOnFull], "=", func(name, v string) error {
		p, err := pool(name)
		if err != nil {
			return err
		}
		if !slices.Contains(onFulls, v) {
			return reason(fmt.Sprintf("unknown on-full behaviour %q (want refuse or drop_oldest)", v))
		}
		if p.FailFast && v == "drop_oldest" {
			return reason(fmt.Sprintf("pool %q has no queue (POOL_MAX_QUEUE=%s=0): there is no oldest waiter to drop", name, name))
		}
		if v != "refuse" {
			p.OnFull = v
		}
		return nil
	})...)
	// Caps after policies: a cap needs the fair policy.
	errs = append(errs, parseEntries(EnvTenantCaps, m[EnvTenantCaps], "=", func(name, v string) error {
		p, err := pool(name)
		if err != nil {
			return err
		}
		if p.Policy != "fair" {
			return reason(fmt.Sprintf("pool %q is not fair: a tenant cap needs POOL_POLICIES=%s=fair", name, name))
		}
		n, err := parseBounded(v, "cap", 1, MaxCapacity)
		if err != nil {
			return err
		}
		p.TenantCap = n
		return nil
	})...)
	c.TenantWeights = map[string]int{}
	errs = append(errs, parseEntries(EnvTenantWeights, m[EnvTenantWeights], ":", func(name, v string) error {
		n, err := parseBounded(v, "weight", 1, pools.MaxWeight)
		if err != nil {
			return err
		}
		c.TenantWeights[name] = int(n)
		return nil
	})...)
	if v, ok := m[EnvTenantDefaultWeight]; ok && v != "" {
		n, err := parseBounded(v, "weight", 1, pools.MaxWeight)
		if err != nil {
			errs = append(errs, varErr(EnvTenantDefaultWeight, v, err))
		} else {
			c.TenantDefaultWeight = int(n)
		}
	} else {
		c.TenantDefaultWeight = 1
	}
	c.MaxQueuedPerConnection = DefaultMaxQueuedPerConnection
	if v, ok := m[EnvMaxQueuedPerConnection]; ok && v != "" {
		n, err := parseBounded(v, "max queued per connection", 1, MaxQueueLimit)
		if err != nil {
			errs = append(errs, varErr(EnvMaxQueuedPerConnection, v, err))
		} else {
			c.MaxQueuedPerConnection = int(n)
		}
	}
	c.MaxQueuedPerCredential = DefaultMaxQueuedPerCredential
	if v, ok := m[EnvMaxQueuedPerCredential]; ok && v != "" {
		n, err := parseBounded(v, "max queued per credential", 1, MaxQueueLimit)
		if err != nil {
			errs = append(errs, varErr(EnvMaxQueuedPerCredential, v, err))
		} else {
			c.MaxQueuedPerCredential = int(n)
		}
	}
	c.PriorityAging = 10 * time.Second
	if v, ok := m[EnvPriorityAging]; ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > MaxPriorityAging {
			errs = append(errs, varErr(EnvPriorityAging, v, reason(`must be a positive duration of at most 24h, e.g. "10s"`)))
		} else {
			c.PriorityAging = d
		}
	}
	return errs
}

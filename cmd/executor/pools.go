package main

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
)

// poolFlags collects repeated --pool NAME[=N] flags: the pools of one run.
type poolFlags []lease.Want

func (p *poolFlags) String() string {
	var parts []string
	for _, w := range *p {
		parts = append(parts, fmt.Sprintf("%s=%d", w.Pool, w.Slots))
	}
	return strings.Join(parts, ",")
}

func (p *poolFlags) Type() string { return "NAME[=SLOTS]" }

// Set takes NAME or NAME=N; a NAME without N has 0 slots until resolved
// (--slots for a single pool, else 1).
func (p *poolFlags) Set(s string) error {
	name, count, hasCount := strings.Cut(s, "=")
	if err := config.ValidToken(name); err != nil {
		return fmt.Errorf("pool %q: %w", name, err)
	}
	w := lease.Want{Pool: name}
	if hasCount {
		n, err := strconv.ParseInt(count, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("%q: the slot count after '=' must be a positive integer", s)
		}
		w.Slots = n
	}
	for _, o := range *p {
		switch {
		case o.Pool == name:
			return fmt.Errorf("pool %s given twice", name)
		case jobs.EnvName(o.Pool) == jobs.EnvName(name):
			return fmt.Errorf("pools %s and %s would share the variables LEASE_%s_*", o.Pool, name, jobs.EnvName(name))
		}
	}
	if len(*p) == lease.MaxSetPools {
		return fmt.Errorf("at most %d pools in one run", lease.MaxSetPools)
	}
	*p = append(*p, w)
	return nil
}

// resolve fills in slot counts: --slots (slotsSet) applies to a single pool
// given without a count, and may not be combined with several pools or an
// explicit count; with no --pool the default pool is used.
func (p poolFlags) resolve(slots int64, slotsSet bool) ([]lease.Want, error) {
	if len(p) == 0 {
		p = poolFlags{{Pool: config.DefaultPool}}
	}
	if slotsSet && (len(p) > 1 || p[0].Slots != 0) {
		return nil, fmt.Errorf("--slots %d: give the slots with each pool instead (--pool NAME=N)", slots)
	}
	out := make([]lease.Want, len(p))
	for i, w := range p {
		if w.Slots == 0 {
			w.Slots = 1
			if len(p) == 1 {
				w.Slots = slots
			}
		}
		out[i] = w
	}
	return out, nil
}

// leaseEnv is what the worker learns about its leases, so it can fence its
// own writes with the tokens: LEASE_ID, LEASE_TOKEN, LEASE_POOL,
// LEASE_SLOTS and LEASE_NODE of the first lease; with several,
// LEASE_POOLS (the pools, in acquire order) and LEASE_<POOL>_ID, _TOKEN,
// _SLOTS and _NODE for each.
func leaseEnv(leases ...*lease.Lease) map[string]string {
	first := leases[0]
	env := map[string]string{
		"LEASE_ID":    first.ID(),
		"LEASE_TOKEN": strconv.FormatUint(first.Token(), 10),
		"LEASE_POOL":  first.Pool(),
		"LEASE_SLOTS": strconv.FormatInt(first.Slots(), 10),
		"LEASE_NODE":  first.Node(),
	}
	if len(leases) == 1 {
		return env
	}
	names := make([]string, 0, len(leases))
	for _, l := range leases {
		names = append(names, l.Pool())
		k := "LEASE_" + jobs.EnvName(l.Pool()) + "_"
		maps.Copy(env, map[string]string{
			k + "ID": l.ID(), k + "TOKEN": strconv.FormatUint(l.Token(), 10),
			k + "SLOTS": strconv.FormatInt(l.Slots(), 10), k + "NODE": l.Node(),
		})
	}
	env["LEASE_POOLS"] = strings.Join(names, ",")
	return env
}

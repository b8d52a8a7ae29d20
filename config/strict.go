package config

import (
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
)

// How every variable is written, decided once here and checked before any
// variable is parsed (see docs/configuration.md):
//
//   - no spaces around a value, and none anywhere in an entry of a list
//     variable (POOL_CAPACITIES=gpu=1,io=16; checkEntry); NATS_PASSWORD
//     alone is taken byte for byte, since a password may hold any character;
//   - numbers in plain decimal digits: no '+' sign, no leading zeros;
//   - durations in Go's form ("15s", "1m30s") without a '+' sign.
//
// A variable that breaks one of these is reported once, naming it, and is
// then treated as unset so that no second error repeats it.

// Bounds of values that would otherwise overflow or mean nothing sane.
const (
	// MaxCapacity bounds pool capacities, the default capacity and tenant
	// caps: pools.MaxCapacity, so that sums of slots stay far from int64's
	// end.
	MaxCapacity = pools.MaxCapacity
	// MaxTTL bounds LEASE_TTL and LEADER_TTL.
	MaxTTL = 24 * time.Hour
	// MaxEventRetention bounds EVENT_RETENTION: a year.
	MaxEventRetention = 365 * 24 * time.Hour
	// MaxPriorityAging bounds PRIORITY_AGING.
	MaxPriorityAging = 24 * time.Hour
	// MaxQueueLimit bounds POOL_MAX_QUEUE: with MaxCapacity it keeps a
	// pool's queued_slots (at most MaxQueueLimit requests of at most
	// MaxCapacity slots) below 2^62.
	MaxQueueLimit = 1 << 22
)

// The variables each loader reads, in the order errors are reported.
var (
	commonVars = []string{
		EnvNodeID, EnvNATSURL, EnvNATSCreds, EnvNATSNKey, EnvNATSUser, EnvNATSPassword,
		EnvNATSTLSCA, EnvNATSTLSCert, EnvNATSTLSKey, EnvNATSInboxPrefix, EnvNATSAuthDir, EnvStateDirectory, EnvCredentialsDirectory, EnvNATSListen, EnvSubjectPrefix,
		EnvLogLevel, EnvLogFormat,
	}
	managerVars = []string{
		EnvPoolCapacities, EnvClusterPools, EnvExecutorMaxConcurrency, EnvNATSStoreDir, EnvLeaseTTL, EnvLeaderTTL, EnvEventRetention, EnvReplicas, EnvHTTPAddr, EnvNATSReplyPrefixes,
		EnvPoolRates, EnvPoolRateBurst, EnvPoolBudgets,
		EnvPoolPolicies, EnvPoolMaxQueue, EnvPoolOnFull, EnvMaxQueuedPerConnection, EnvMaxQueuedPerCredential, EnvTenantCaps, EnvTenantWeights, EnvTenantDefaultWeight, EnvPriorityAging,
		EnvPoolKeyLimits, EnvPoolFairQuantum, EnvPoolStarvationAge, EnvPoolShadow,
		EnvDisconnectEvents, EnvDisconnectGrace,
		EnvNATSExecutorsMaxStore, EnvNATSExecutorsMaxConsumers, EnvNATSExecutorsMaxConnections, EnvNATSReadersMaxConnections,
		EnvJobsNATSNKey, EnvJobsNATSUser, EnvJobsNATSPassword,
	}
	// varOrder is the order errors are reported in: the documented order
	// of the variables, so output is stable whatever order checks run in.
	varOrder = append(append([]string(nil), commonVars...), managerVars...)
)

// Kinds of variables with a form beyond "no spaces around it". The list
// variables check their entries themselves (checkEntry), so that each bad
// entry is named.
var (
	listVars = []string{EnvPoolCapacities, EnvClusterPools, EnvPoolRates, EnvPoolRateBurst, EnvPoolBudgets, EnvPoolPolicies, EnvPoolMaxQueue, EnvPoolOnFull, EnvTenantCaps, EnvTenantWeights, EnvNATSReplyPrefixes,
		EnvPoolKeyLimits, EnvPoolFairQuantum, EnvPoolStarvationAge, EnvPoolShadow}
	numberVars   = []string{EnvExecutorMaxConcurrency, EnvReplicas, EnvTenantDefaultWeight, EnvMaxQueuedPerConnection, EnvMaxQueuedPerCredential, EnvNATSExecutorsMaxConsumers, EnvNATSExecutorsMaxConnections, EnvNATSReadersMaxConnections}
	durationVars = []string{EnvLeaseTTL, EnvLeaderTTL, EnvEventRetention, EnvPriorityAging, EnvDisconnectGrace}
)

// strictVars checks the form of every variable of vars set in m. It returns
// a copy of m without the variables that failed, and their errors.
func strictVars(m map[string]string, vars []string) (map[string]string, []error) {
	var errs []error
	out := maps.Clone(m)
	for _, name := range vars {
		v, ok := m[name]
		if !ok || name == EnvNATSPassword || slices.Contains(listVars, name) {
			continue
		}
		if err := checkForm(name, v); err != nil {
			errs = append(errs, varErr(name, v, err))
			delete(out, name)
		}
	}
	return out, errs
}

func checkForm(name, v string) error {
	switch {
	case strings.TrimSpace(v) != v:
		return reason("must not have spaces around it")
	case v == "":
		return nil
	case slices.Contains(numberVars, name):
		return numberForm(v, "value")
	case slices.Contains(durationVars, name) && v[0] == '+':
		return reason(`must not have a '+' sign`)
	}
	return nil
}

// checkEntry checks the form of one entry of a list variable: not empty,
// no spaces anywhere.
func checkEntry(entry string) error {
	if entry == "" {
		// Most likely a trailing or doubled comma. Rejected rather than
		// skipped because it often means an entry was lost in templating.
		return reason("empty entry (stray comma?)")
	}
	if strings.ContainsFunc(entry, unicode.IsSpace) {
		return reason("must not contain spaces")
	}
	return nil
}

// numberForm refuses what strconv would take but the rules refuse: a '+'
// sign and leading zeros. what names the number in the errors ("capacity").
func numberForm(s, what string) error { return rules.NumberForm(s, what) }

// parseBounded parses a decimal integer written plainly (numberForm) from
// lo (0 or 1) to hi. It scans the number by hand rather than handing the
// whole string to strconv so that it can tell a missing number from
// trailing garbage ("1x", "1=2") and say which. Its errors are reasons
// only; what names the number.
func parseBounded(s, what string, lo, hi int64) (int64, error) {
	return rules.ParseBounded(s, what, lo, hi)
}

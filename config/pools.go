package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
)

// MaxTokenLen is the longest token ValidToken accepts. It keeps subjects
// and KV keys built from several tokens well short of NATS limits.
const MaxTokenLen = rules.MaxTokenLen

// DefaultPool is the name of the pool that always exists; see the package
// documentation for how its capacity is chosen.
const DefaultPool = rules.DefaultPool

// Pool is a named pool of slots and its capacity.
type Pool struct {
	Name     string
	Capacity int64
	// Queue policy (POOL_POLICIES, POOL_MAX_QUEUE, POOL_ON_FULL,
	// TENANT_CAPS): "" is fifo; MaxQueue 0 is the default, DefaultMaxQueue
	// (the lease manager applies it), unless FailFast: the pool has no
	// queue (POOL_MAX_QUEUE=<pool>=0). OnFull "" is refuse, else
	// "drop_oldest". TenantCap 0 is none.
	Policy    string
	MaxQueue  int
	FailFast  bool
	OnFull    string
	TenantCap int64
	// Fair pools (fairness.go): KeyLimit caps the slots in flight per key
	// (POOL_KEY_LIMITS, 0 none); Quantum is the credit per turn of weight 1
	// (POOL_FAIR_QUANTUM, 0 the default 1); StarvationAge promotes a ready
	// request that waited as long (POOL_STARVATION_AGE, 0 none).
	KeyLimit      int64
	Quantum       int64
	StarvationAge time.Duration
	// Rate is the start rate (POOL_RATES), zero if none, and Burst its
	// burst (POOL_RATE_BURST, or the default: one second's worth, at
	// least 1). A pool named only in POOL_RATES has capacity MaxCapacity.
	Rate  pools.Rate
	Burst int64
	// Budget is the usage budget (POOL_BUDGETS): Budget.Slots units per
	// Budget.Per; zero if none. A pool named only there has capacity
	// MaxCapacity.
	Budget pools.Rate
	// Shadow puts the pool in shadow mode (POOL_SHADOW, shadow.go).
	Shadow bool
}

// ValidToken reports whether s may be used as a node id, a pool name or one
// part of the subject prefix: non-empty, at most MaxTokenLen characters,
// only [A-Za-z0-9_-]. That keeps it a single NATS subject token (no '.',
// '*', '>' or whitespace) and a valid JetStream KV key part.
//
// The error says only what is wrong, not what s was, so that callers can
// prefix the variable and value; it matches ErrInvalid.
func ValidToken(s string) error { return rules.ValidToken(s) }

func tokenByte(c byte) bool { return rules.TokenByte(c) }

// ParsePoolCapacities parses POOL_CAPACITIES: comma-separated name=capacity
// entries, e.g. "gpu=1,io=16", with no spaces (LoadManager refuses a value
// with spaces before it gets here); an empty string means no pools. Names
// must be tokens (ValidToken) and unique; capacities are plain decimal
// numbers (no sign, no leading zeros) from 1 to MaxCapacity. The pools are returned in input order and
// the default pool is not added (Manager.Pools has it).
//
// Every bad entry is reported, each as a *VarError of the form
//
//	POOL_CAPACITIES: entry "gpu=0": capacity must be a positive integer
func ParsePoolCapacities(s string) ([]Pool, error) {
	pools, errs := parsePools(EnvPoolCapacities, s)
	if err := joinErrs(errs); err != nil {
		return nil, err
	}
	return pools, nil
}

// parsePools is ParsePoolCapacities of variable (POOL_CAPACITIES or
// CLUSTER_POOLS) returning the good pools and the errors separately, so
// LoadManagerFrom can report the errors alongside those of other variables
// without nesting.
func parsePools(variable, s string) ([]Pool, []error) {
	if s == "" {
		return nil, nil
	}
	var (
		pools []Pool
		errs  []error
		seen  = make(map[string]bool)
	)
	for _, entry := range strings.Split(s, ",") {
		p, err := parsePoolEntry(entry)
		if err == nil && seen[p.Name] {
			err = reason(fmt.Sprintf("duplicate pool %q", p.Name))
		}
		if err != nil {
			errs = append(errs, &VarError{Var: variable, Value: entry, Entry: true, Reason: err.Error(), Err: err})
			continue
		}
		seen[p.Name] = true
		pools = append(pools, p)
	}
	return pools, errs
}

// ParsePoolEntry parses one name=capacity entry, as POOL_CAPACITIES has
// them, for a command-line argument (leasemgr resize gpu=2). Its errors
// say what is wrong only, so that the caller names the argument.
func ParsePoolEntry(entry string) (Pool, error) { return parsePoolEntry(entry) }

// parsePoolEntry parses one name=capacity entry. Its errors are
// reasons only; the caller adds the variable and entry.
func parsePoolEntry(entry string) (Pool, error) {
	if err := checkEntry(entry); err != nil {
		return Pool{}, err
	}
	name, num, ok := strings.Cut(entry, "=")
	if !ok {
		return Pool{}, reason("missing '=' (want name=capacity)")
	}
	if name == "" {
		return Pool{}, reason("empty pool name")
	}
	if err := ValidToken(name); err != nil {
		return Pool{}, fmt.Errorf("invalid pool name %q: %w", name, err)
	}
	n, err := parseCapacity(num)
	if err != nil {
		return Pool{}, err
	}
	return Pool{Name: name, Capacity: n}, nil
}

// parseCapacity parses a capacity: a plain decimal from 1 to MaxCapacity.
func parseCapacity(s string) (int64, error) {
	return parseBounded(s, "capacity", 1, MaxCapacity)
}

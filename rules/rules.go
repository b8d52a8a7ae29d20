// Package rules holds what the configuration (package config) and the wire
// contract (package lease) must agree on, with no dependency beyond the
// standard library and package pools: which strings are valid node, pool
// and prefix tokens, the node ids no node may take, the default subject
// prefix and queue bounds, and the syntax of numbers and start rates.
// config re-exports each under its old name; lease, a client library,
// imports this package rather than config and its environment parser.
package rules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slotlease/slotlease/pools"
)

// ErrInvalid is matched (errors.Is) by every error of a bad setting, here
// and in package config.
var ErrInvalid = errors.New("invalid configuration")

// Reason is a context-free validation failure ("must not be empty") that
// matches ErrInvalid, so callers can prefix it with the variable and value
// without repeating them.
type Reason string

func (r Reason) Error() string { return string(r) }

// Unwrap returns ErrInvalid.
func (r Reason) Unwrap() error { return ErrInvalid }

// ReservedNodeID cannot name a node: its request subjects would fall inside
// the event subjects <prefix>.events.>. It is refused in any case: NATS
// subjects are case-sensitive, but "EVENTS" beside "events" in subjects,
// logs and (on case-insensitive file systems) the store directory would
// only mislead.
const ReservedNodeID = "events"

// ClusterNodeID is the node id under which cluster pools (CLUSTER_POOLS)
// are served: <prefix>.cluster.<pool>.<verb>, leases keyed by it, one
// active manager for it among every leasemgr listing cluster pools. No
// node may be named so, in any case.
const ClusterNodeID = "cluster"

// DefaultSubjectPrefix is LEASE_SUBJECT_PREFIX's default.
const DefaultSubjectPrefix = "lease"

// Queue bounds. A queued request costs the manager about 1.2 KB of memory
// and a queue entry in the store.
const (
	// DefaultMaxQueue is a pool's queue bound when POOL_MAX_QUEUE does not
	// name it.
	DefaultMaxQueue = 10000
	// DefaultMaxQueuedPerConnection is MAX_QUEUED_PER_CONNECTION's
	// default.
	DefaultMaxQueuedPerConnection = 1000
	// DefaultMaxQueuedPerCredential bounds the requests waiting on a node
	// from all the connections of one credential (user) together: a
	// quarter of a pool's default queue, so reconnecting buys one
	// credential no more of it.
	DefaultMaxQueuedPerCredential = 2500
)

// DefaultPool is the name of the pool every node has (its capacity is
// config's to choose).
const DefaultPool = "default"

// MaxTokenLen is the longest token ValidToken accepts. It keeps subjects
// and KV keys built from several tokens well short of NATS limits.
const MaxTokenLen = 64

// ValidToken reports whether s may be used as a node id, a pool name or one
// part of the subject prefix: non-empty, at most MaxTokenLen characters,
// only [A-Za-z0-9_-]. That keeps it a single NATS subject token (no '.',
// '*', '>' or whitespace) and a valid JetStream KV key part.
//
// The error says only what is wrong, not what s was, so that callers can
// prefix the variable and value; it matches ErrInvalid.
func ValidToken(s string) error {
	if s == "" {
		return Reason("must not be empty")
	}
	if len(s) > MaxTokenLen {
		return Reason(fmt.Sprintf("must be at most %d characters, got %d", MaxTokenLen, len(s)))
	}
	for i := 0; i < len(s); i++ {
		if !TokenByte(s[i]) {
			return Reason("must contain only letters, digits, '-' and '_'")
		}
	}
	return nil
}

// TokenByte reports whether c may appear in a token.
func TokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// NumberForm refuses what strconv would take but the rules refuse: a '+'
// sign and leading zeros. what names the number in the errors ("capacity").
func NumberForm(s, what string) error {
	if strings.HasPrefix(s, "+") {
		return Reason(what + " must not have a '+' sign")
	}
	digits := strings.TrimPrefix(s, "-")
	if len(digits) > 1 && digits[0] == '0' && strings.Trim(digits, "0123456789") == "" {
		return Reason(what + " must not have leading zeros")
	}
	return nil
}

// ParseBounded parses a decimal integer written plainly (NumberForm) from
// lo (0 or 1) to hi. It scans the number by hand rather than handing the
// whole string to strconv so that it can tell a missing number from
// trailing garbage ("1x", "1=2") and say which. Its errors are reasons
// only; what names the number.
func ParseBounded(s, what string, lo, hi int64) (int64, error) {
	if s == "" {
		return 0, Reason("missing " + what)
	}
	if err := NumberForm(s, what); err != nil {
		return 0, err
	}
	i := 0
	if s[0] == '-' {
		i++
	}
	start := i
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == start {
		return 0, Reason(what + " is not a number")
	}
	if i < len(s) {
		return 0, Reason(fmt.Sprintf("unexpected %q after %s", s[i:], what))
	}
	n, err := strconv.ParseInt(s, 10, 64) // s is an optional '-' and digits: only ErrRange
	switch {
	case n < lo || err != nil && s[0] == '-':
		if lo > 0 {
			return 0, Reason(what + " must be a positive integer")
		}
		return 0, Reason(what + " must not be negative")
	case n > hi || err != nil:
		return 0, Reason(fmt.Sprintf("%s must be at most %d", what, hi))
	}
	return n, nil
}

// rateUnits are the periods a rate may be given per.
var rateUnits = map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}

// ParseRate parses a start rate: N/s, N/m or N/h, N from 1 to
// pools.MaxCapacity, e.g. "60/m". Its errors are reasons only.
func ParseRate(s string) (pools.Rate, error) { return parsePer(s, "rate", "60/m") }

// ParseBudget parses a usage budget: N/s, N/m or N/h units per window, N
// from 1 to pools.MaxUnits, e.g. "100000/m". Its errors are reasons only.
func ParseBudget(s string) (pools.Rate, error) { return parsePer(s, "budget", "100000/m") }

// parsePer parses N per a unit for what, a rate or a budget.
func parsePer(s, what, example string) (pools.Rate, error) {
	num, unit, ok := strings.Cut(s, "/")
	if !ok {
		return pools.Rate{}, Reason(fmt.Sprintf("%s %q: want N/s, N/m or N/h, e.g. %s", what, s, example))
	}
	per, ok := rateUnits[unit]
	if !ok {
		return pools.Rate{}, Reason(fmt.Sprintf("%s %q: unit %q is not s, m or h", what, s, unit))
	}
	n, err := ParseBounded(num, what, 1, pools.MaxCapacity)
	if err != nil {
		return pools.Rate{}, err
	}
	return pools.Rate{Slots: n, Per: per}, nil
}

// MaxRequestIDLen bounds a request id (lease.MaxRequestIDLen).
const MaxRequestIDLen = 128

// ValidRequestID reports whether s may be used as a request id: it becomes
// a KV key token, so only [A-Za-z0-9_-] and '=' are allowed.
func ValidRequestID(s string) error {
	if s == "" {
		return fmt.Errorf("request_id is required")
	}
	if len(s) > MaxRequestIDLen {
		return fmt.Errorf("request_id is longer than %d characters", MaxRequestIDLen)
	}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '=':
		default:
			return fmt.Errorf("request_id %q: must contain only letters, digits, '-', '_' and '='", s)
		}
	}
	return nil
}

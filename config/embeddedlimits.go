package config

import (
	"fmt"
	"math"
	"strings"

	"github.com/slotlease/slotlease/rules"
)

// The embedded server's bounds on the executors' and readers' accounts
// (docs/security.md, "Limits per account"). Executor credentials are held
// by untrusted parties (every executor on the host shares one), so what
// one of them may take of the server's store and of leasemgr's
// descriptors is capped, and the managers' account keeps a share no
// executor can reach: before these, an executor filled the store until
// the manager could not renew its leadership, or opened connections until
// leasemgr ran out of descriptors. They bound leasemgr's own embedded
// server only; with NATS_URL the server's configuration does (the layout
// of docs/security.md).
const (
	// EnvNATSExecutorsMaxStore caps the executors' account's JetStream
	// file store: the job queue's stream and buckets, whose own caps take
	// 7/8 of it (jobs.MaxBytesFor).
	EnvNATSExecutorsMaxStore = "NATS_EXECUTORS_MAX_STORE"
	// EnvNATSExecutorsMaxConsumers caps the consumers of each stream of
	// the executors' account: the job broker's, one per pool, priority and
	// tenant with jobs (executors may make none).
	EnvNATSExecutorsMaxConsumers = "NATS_EXECUTORS_MAX_CONSUMERS"
	// EnvNATSExecutorsMaxConnections and EnvNATSReadersMaxConnections cap
	// the connections of each account. Unset, leasemgr derives them from
	// its descriptor limit (jetstream.ConnectionLimits).
	EnvNATSExecutorsMaxConnections = "NATS_EXECUTORS_MAX_CONNECTIONS"
	EnvNATSReadersMaxConnections   = "NATS_READERS_MAX_CONNECTIONS"
)

// Defaults and bounds of the embedded server's account limits.
const (
	// DefaultExecutorsMaxStore leaves the managers 8 GiB of the embedded
	// server's 10 GiB store; the job queue reserves 1.75 GiB of it.
	DefaultExecutorsMaxStore = 2 << 30
	// MinExecutorsMaxStore still holds a few of the largest jobs in each
	// of the queue's stream and buckets (its smallest part, the dead
	// letters, gets 1/8 of the cap: 8 MiB).
	MinExecutorsMaxStore = 64 << 20
	// MaxExecutorsMaxStore leaves the managers at least 2 GiB of the
	// embedded server's 10 GiB (jetstream.ServerConfig.MaxStore).
	MaxExecutorsMaxStore = 8 << 30
	// DefaultExecutorsMaxConsumers is the NATS server's own default per
	// stream, written down so that it is a documented bound.
	DefaultExecutorsMaxConsumers = 1000
	MaxExecutorsMaxConsumers     = 100000
	// DefaultExecutorsMaxConnections and DefaultReadersMaxConnections
	// apply where leasemgr's descriptor limit leaves room for them
	// (jetstream.ConnectionLimits takes less where it does not).
	DefaultExecutorsMaxConnections = 4096
	DefaultReadersMaxConnections   = 256
	// MaxAccountConnections bounds both connection variables: the NATS
	// server's own default for all its connections.
	MaxAccountConnections = 1 << 16
)

// sizeUnits are the units a size may be written in, binary as the NATS
// server's own "GiB".
var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}}

// parseSize parses a byte size: plain digits ("67108864") or digits and
// one of KiB, MiB, GiB, TiB ("64MiB"), from lo to hi bytes.
func parseSize(s string, lo, hi int64) (int64, error) {
	digits, shift := s, uint(0)
	for _, u := range sizeUnits {
		if d, ok := strings.CutSuffix(s, u.suffix); ok {
			digits, shift = d, u.shift
			break
		}
	}
	n, err := rules.ParseBounded(digits, "size", 0, math.MaxInt64)
	if err != nil {
		return 0, reason(err.Error() + `: write bytes, or a number with KiB, MiB, GiB or TiB, e.g. "2GiB"`)
	}
	if n > hi>>shift || n<<shift < lo || n<<shift > hi {
		return 0, reason(fmt.Sprintf("must be from %s to %s", formatSize(lo), formatSize(hi)))
	}
	return n << shift, nil
}

// formatSize writes n bytes in the largest unit that divides it.
func formatSize(n int64) string {
	for _, u := range sizeUnits {
		if n != 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.suffix)
		}
	}
	return fmt.Sprint(n)
}

// resolveEmbeddedLimits reads the embedded server's account limits from m
// into c. The connection limits stay 0 when unset: their default depends
// on the descriptor limit, which only leasemgr's start knows.
func (c *Manager) resolveEmbeddedLimits(m map[string]string) []error {
	var errs []error
	c.ExecutorsMaxStore = DefaultExecutorsMaxStore
	if v, ok := m[EnvNATSExecutorsMaxStore]; ok && v != "" {
		n, err := parseSize(v, MinExecutorsMaxStore, MaxExecutorsMaxStore)
		if err != nil {
			errs = append(errs, varErr(EnvNATSExecutorsMaxStore, v, err))
		} else {
			c.ExecutorsMaxStore = n
		}
	}
	number := func(name, what string, hi int64, dst *int) {
		v, ok := m[name]
		if !ok || v == "" {
			return
		}
		n, err := parseBounded(v, what, 1, hi)
		if err != nil {
			errs = append(errs, varErr(name, v, err))
			return
		}
		*dst = int(n)
	}
	c.ExecutorsMaxConsumers = DefaultExecutorsMaxConsumers
	number(EnvNATSExecutorsMaxConsumers, "consumers per stream", MaxExecutorsMaxConsumers, &c.ExecutorsMaxConsumers)
	number(EnvNATSExecutorsMaxConnections, "connections", MaxAccountConnections, &c.ExecutorsMaxConnections)
	number(EnvNATSReadersMaxConnections, "connections", MaxAccountConnections, &c.ReadersMaxConnections)
	return errs
}

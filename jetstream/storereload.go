package jetstream

import (
	"os"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// streamID names a stream of an account.
type streamID struct{ account, stream string }

// streamProblem is a stream the server's health check reports: one with a
// write error, or one in the store the server has not loaded.
type streamProblem struct {
	id       streamID
	writeErr bool // else: not loaded ("could not be recovered")
	text     string
}

// storeProblems lists the streams with a write error or not loaded. The
// server's health check finds them by reading the store directory, so
// while no descriptor is free it finds nothing.
func storeProblems(s *server.Server) []streamProblem {
	var out []streamProblem
	for _, e := range s.Healthz(&server.HealthzOptions{Details: true}).Errors {
		if e.Type != server.HealthzErrorStream || e.Account == "" {
			continue
		}
		// The server's words (monitor.go healthz): "JetStream stream 'A >
		// S' write error: ...", or "... could not be recovered".
		out = append(out, streamProblem{id: streamID{e.Account, e.Stream}, writeErr: strings.Contains(e.Error, "write error"), text: e.Error})
	}
	return out
}

// jetStreamAccounts names the accounts with JetStream enabled and a
// directory in the store.
func jetStreamAccounts(s *server.Server) []string {
	ents, err := os.ReadDir(s.JetStreamConfig().StoreDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if acc, err := s.LookupAccount(e.Name()); e.IsDir() && err == nil && acc.JetStreamEnabled() {
			out = append(out, e.Name())
		}
	}
	return out
}

// limitsByTier are an account's JetStream limits, one set per tier ("" if
// it has no tiers).
type limitsByTier = map[string]server.JetStreamAccountLimits

// disableAccount stops an account's JetStream: every stream and consumer
// of it, their files kept. It returns the limits to enable it with again.
// Clients see the account's streams gone until then (their requests fail
// and are retried) and their ephemeral consumers restarted, which nats.go's
// ordered consumers (KV watchers) recover from.
func disableAccount(s *server.Server, name string) (limitsByTier, error) {
	acc, err := s.LookupAccount(name)
	if err != nil {
		return nil, err
	}
	limits := accountLimits(acc.JetStreamUsage())
	return limits, acc.DisableJetStream()
}

// enableAccount enables an account's JetStream with limits, which loads
// every stream and consumer of it from disk, with no error kept.
func enableAccount(s *server.Server, name string, limits limitsByTier) error {
	acc, err := s.LookupAccount(name)
	if err != nil {
		return err
	}
	return acc.EnableJetStream(limits, nil)
}

// accountLimits are the JetStream limits an account was enabled with, as
// its usage reports them: one set, or one per tier.
func accountLimits(u server.JetStreamAccountStats) limitsByTier {
	if len(u.Tiers) == 0 {
		return limitsByTier{"": u.Limits}
	}
	limits := make(limitsByTier, len(u.Tiers))
	for tier, t := range u.Tiers {
		// A tier listed only for its usage has no limits of its own:
		// zero limits would forbid it everything.
		if t.Limits != (server.JetStreamAccountLimits{}) {
			limits[tier] = t.Limits
		}
	}
	return limits
}

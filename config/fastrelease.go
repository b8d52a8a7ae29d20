package config

import (
	"fmt"
	"strings"
	"time"
)

// Fast release (docs/guarantees.md, "Fast release"): a holder's leases are
// freed soon after the NATS server says its connection closed.
const (
	// EnvDisconnectEvents is the subject on which the server's client
	// disconnect advisories for the executors' account reach the manager.
	// Unset: the embedded server's (leasemgr sets it up), none with
	// NATS_URL. "off" turns fast release off.
	EnvDisconnectEvents = "DISCONNECT_EVENTS"
	// EnvDisconnectGrace is how long after a holder's connection closed its
	// leases are freed.
	EnvDisconnectGrace = "DISCONNECT_GRACE"

	DefaultDisconnectGrace = 800 * time.Millisecond
	MinDisconnectGrace     = 200 * time.Millisecond
	MaxDisconnectGrace     = 10 * time.Second
)

// resolveFastRelease checks DISCONNECT_EVENTS and DISCONNECT_GRACE.
func (c *Manager) resolveFastRelease(m map[string]string, bad map[string]bool) []error {
	var errs []error
	switch v := c.DisconnectEvents; {
	case v == "off":
		c.DisconnectEventsOff, c.DisconnectEvents = true, ""
	case v != "":
		if err := checkAdvisorySubject(v); err != nil {
			errs = append(errs, varErr(EnvDisconnectEvents, v, err))
		}
	}
	if bad[EnvDisconnectGrace] {
		return errs
	}
	ttlOK := !bad[EnvLeaseTTL] && checkTTL(c.LeaseTTL) == nil
	g := c.DisconnectGrace
	if _, set := m[EnvDisconnectGrace]; !set {
		// The default, 800ms, is below half of every LEASE_TTL allowed:
		// LEASE_TTL must be longer than LEADER_TTL (checkTTLRule), so 2s
		// at least.
		return errs
	}
	switch {
	case g < MinDisconnectGrace || g > MaxDisconnectGrace:
		errs = append(errs, varErr(EnvDisconnectGrace, m[EnvDisconnectGrace], reason(fmt.Sprintf("must be between %v and %v", MinDisconnectGrace, MaxDisconnectGrace))))
	case ttlOK && g > c.LeaseTTL/2:
		errs = append(errs, varErr(EnvDisconnectGrace, m[EnvDisconnectGrace], reason(fmt.Sprintf("must be at most half of %s (%v), or fast release saves nothing", EnvLeaseTTL, c.LeaseTTL))))
	}
	return errs
}

// checkAdvisorySubject refuses a subject a subscription cannot name
// exactly: wildcards, empty tokens, spaces; and quotes, which no advisory
// subject has: leasemgr layout writes the value quoted for shells
// ('$SYS...'), and a reader of env files that keeps quotes (podman's and
// docker's --env-file, kubectl's --from-env-file) would otherwise leave
// fast release listening where nothing is ever published.
func checkAdvisorySubject(s string) error {
	if strings.ContainsAny(s, `'"`) {
		return reason(`has quote characters, which an environment file read without shell quoting keeps (podman or docker --env-file, kubectl --from-env-file): give the subject without them, e.g. $SYS.ACCOUNT.SLOTLEASE_EXECUTORS.DISCONNECT`)
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n*>") {
			return reason(`must be a subject without wildcards or empty tokens, e.g. $SYS.ACCOUNT.<account>.DISCONNECT imported from the system account, or "off"`)
		}
	}
	return nil
}

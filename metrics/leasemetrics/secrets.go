package leasemetrics

import (
	"context"

	"github.com/slotlease/slotlease/manager"
)

// SecretsRefused returns the function for node's
// manager.Config.SecretRefused: each call counts one request refused over
// its secret, by reason (manager.SecretRefusalReasons: a wrong secret, or
// too_many_attempts for a connection that sent too many). Every reason's
// series exists at 0 from this call on, so an alert on the rate of wrong
// secrets sees the series before the first guess.
func (m *Metrics) SecretsRefused(node string) func(reason string) {
	byReason := make(map[string]*attrs, len(manager.SecretRefusalReasons))
	for _, r := range manager.SecretRefusalReasons {
		a := newAttrs(KeyNode.String(node), KeyReason.String(r))
		byReason[r] = a
		m.secretsRefused.Add(context.Background(), 0, a.add...)
	}
	return func(reason string) {
		a := byReason[reason]
		if a == nil { // a reason not in SecretRefusalReasons: still counted
			a = newAttrs(KeyNode.String(node), KeyReason.String(reason))
		}
		m.secretsRefused.Add(context.Background(), 1, a.add...)
	}
}

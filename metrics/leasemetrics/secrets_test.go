package leasemetrics_test

import (
	"testing"

	"github.com/slotlease/slotlease/manager"
)

func TestSecretsRefusedStartAtZero(t *testing.T) {
	m := setup(t)
	refused := m.SecretsRefused("n1")
	for _, r := range manager.SecretRefusalReasons {
		if got := value(t, scrape(t), "lease_secrets_refused_total", "node", "n1", "reason", r); got != 0 {
			t.Fatalf("lease_secrets_refused_total{reason=%q} before any refusal = %v, want the series at 0", r, got)
		}
	}
	refused(manager.SecretWrong)
	refused(manager.SecretTooManyAttempts)
	refused(manager.SecretTooManyAttempts)
	if got := value(t, scrape(t), "lease_secrets_refused_total", "node", "n1", "reason", manager.SecretWrong); got != 1 {
		t.Fatalf("lease_secrets_refused_total{reason=wrong_secret} = %v, want 1", got)
	}
	if got := value(t, scrape(t), "lease_secrets_refused_total", "node", "n1", "reason", manager.SecretTooManyAttempts); got != 2 {
		t.Fatalf("lease_secrets_refused_total{reason=too_many_attempts} = %v, want 2", got)
	}
}

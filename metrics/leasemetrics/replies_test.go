package leasemetrics_test

import "testing"

func TestReplyRefusalsStartAtZero(t *testing.T) {
	m := setup(t)
	refused := m.ReplyRefusals("n1")
	if got := value(t, scrape(t), "lease_replies_refused_total", "node", "n1"); got != 0 {
		t.Fatalf("lease_replies_refused_total before any refusal = %v, want the series at 0", got)
	}
	refused()
	refused()
	if got := value(t, scrape(t), "lease_replies_refused_total", "node", "n1"); got != 2 {
		t.Fatalf("lease_replies_refused_total = %v, want 2", got)
	}
}

package jobs

import (
	"strings"
	"testing"
)

// With both tenants always waiting, turns start slots in proportion to the
// weights, whatever the job sizes; a tenant that stops waiting banks
// nothing.
func TestTurnsShareByWeight(t *testing.T) {
	t.Parallel()
	weights := map[string]int64{"t_a": 3, "t_b": 1}
	weight := func(k string) int64 { return weights[k] }
	for _, tc := range []struct {
		name  string
		slots map[string]int64
	}{
		{"one slot each", map[string]int64{"t_a": 1, "t_b": 1}},
		{"larger than a turn", map[string]int64{"t_a": 5, "t_b": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTurns()
			started := map[string]int64{}
			for range 2000 {
				k := tr.order([]string{"t_b", "t_a"}, weight)[0]
				tr.charge(k, tc.slots[k])
				started[k] += tc.slots[k]
			}
			got := float64(started["t_a"]) / float64(started["t_a"]+started["t_b"])
			if got < 0.74 || got > 0.76 {
				t.Fatalf("tenant a started %.3f of the slots (%v), want 0.75", got, started)
			}
		})
	}
	t.Run("an idle tenant banks nothing", func(t *testing.T) {
		tr := newTurns()
		for range 100 {
			k := tr.order([]string{"t_a"}, weight)[0]
			tr.charge(k, 1)
		}
		// b comes back: within a round of 4 it is served once, a three times.
		var seq []string
		for range 8 {
			k := tr.order([]string{"t_a", "t_b"}, weight)[0]
			tr.charge(k, 1)
			seq = append(seq, k)
		}
		a := strings.Count(strings.Join(seq, ","), "t_a")
		if a != 6 {
			t.Fatalf("order %v: a served %d of 8, want 6", seq, a)
		}
	})
}

func TestTenantKeysAndSubjects(t *testing.T) {
	t.Parallel()
	n := NamesFor("lease")
	long := strings.Repeat("x", 65)
	for _, tc := range []struct{ tenant, key string }{
		{"acme", "t_acme"},
		{"team-1_a", "t_team-1_a"},
		{"a.b", ""}, {"a b", ""}, {"*", ""}, {">", ""}, {"é", ""}, {long, ""},
	} {
		k := TenantKey(tc.tenant)
		if tc.key != "" && k != tc.key {
			t.Errorf("TenantKey(%q) = %q, want %q", tc.tenant, k, tc.key)
		}
		if tc.key == "" && (!strings.HasPrefix(k, "h_") || len(k) != 34) {
			t.Errorf("TenantKey(%q) = %q, want h_ and 32 hex digits", tc.tenant, k)
		}
		subj := n.Subject("gpu", High, tc.tenant)
		pool, p, tkey, ok := n.parseSubject(subj)
		if !ok || pool != "gpu" || p != High || tkey != k {
			t.Errorf("parseSubject(%q) = %q %q %q %v", subj, pool, p, tkey, ok)
		}
	}
	for _, bad := range []string{"lease.jobs.queue.gpu", "lease.jobs.queue.gpu.urgent", "lease.jobs.queue.gpu.high.acme",
		"lease.jobs.queue.gpu.high.t_", "lease.jobs.queue.gpu.high.t_a.b", "lease.jobs.queue..high"} {
		if _, _, _, ok := n.parseSubject(bad); ok {
			t.Errorf("parseSubject(%q) accepted", bad)
		}
	}
	if a, b := n.Consumer("a", High, "t_normal"), n.Consumer("a_high_t", Normal, ""); a == b {
		t.Errorf("consumer names collide: %q", a)
	}
}

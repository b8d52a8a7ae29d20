package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// The auditor's start-rate check on hand-made histories of a pool with a
// rate of 2/s and a burst of 3: grants within the rate pass, also when
// their stamps lag a little and when their writes land late; a takeover
// whose new manager starts with a full bucket right after the old one
// used its tokens fails; so does a burst above the burst.
func TestAuditRates(t *testing.T) {
	t.Parallel()
	type grant struct {
		stampMs, writeMs int
		slots            int64
		by               string
	}
	steady := func() []grant { // a full burst at 1 s, then one per 500 ms until 5 s, by m1
		gs := []grant{{1000, 1010, 3, "m1"}}
		for ms := 1500; ms <= 5000; ms += 500 {
			gs = append(gs, grant{ms, ms + 10, 1, "m1"})
		}
		return gs
	}
	cases := []struct {
		name   string
		grants []grant
		want   string // the violation's prefix; "" for none
	}{
		{"within the rate", steady(), ""},
		{"stamps a little late, writes very late", append(steady(),
			grant{5600, 9000, 1, "m1"}, // taken at 5.5 s, stamped 100 ms later, stored 3.4 s later
			grant{6000, 9000, 1, "m1"}), ""},
		{"a takeover with a full bucket", append(steady(),
			grant{6100, 6110, 1, "m2"}, grant{6100, 6110, 1, "m2"}, grant{6100, 6110, 1, "m2"}), "over-rate: n1.p started"},
		{"more than the burst at once", []grant{{1000, 1010, 3, "m1"}, {1000, 1010, 1, "m1"}}, "over-rate: n1.p started 4 slots in 0s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &history{}
			in := AuditInput{Capacity: map[string]map[string]int64{"n1": {"p": 10}}, LeaseTTL: 4 * time.Second, RunEnd: at(12000),
				HangGrace: 2 * time.Second, StrictKill: true,
				Rates: map[string]map[string]RateLimit{"n1": {"p": {Rate: pools.Rate{Slots: 2, Per: time.Second}, Burst: 3}}}}
			for i, g := range c.grants {
				id := fmt.Sprintf("g%d", i)
				tok := h.put(g.writeMs, lease.RecordKey("n1", "p", id), storedRecord{ID: id, Node: "n1", Pool: "p", Slots: g.slots, Manager: g.by, GrantedAt: at(g.stampMs)})
				in.Holds = append(in.Holds, hold("x", id, tok, g.slots, g.writeMs+5, g.writeMs+50, HoldReleased))
				h.gone(g.writeMs+60, lease.RecordKey("n1", "p", id))
			}
			in.Leases = h.leases
			rep := Audit(in)
			var rated []string
			for _, v := range rep.Violations {
				if strings.HasPrefix(v, "over-rate") {
					rated = append(rated, v)
				}
			}
			switch {
			case c.want == "" && len(rated) > 0:
				t.Fatalf("violations %q, want none (most of the bound used: %.2f)", rated, rep.MaxRateUse["n1.p"])
			case c.want != "" && (len(rated) == 0 || !strings.HasPrefix(rated[0], c.want)):
				t.Fatalf("violations %q, want one starting with %q", rated, c.want)
			}
			if rep.RateStarts["n1.p"] != len(c.grants) {
				t.Errorf("%d starts counted, want %d", rep.RateStarts["n1.p"], len(c.grants))
			}
			t.Logf("most of the bound used: %.2f", rep.MaxRateUse["n1.p"])
		})
	}
}

// A grant whose handover write was stored unseen is stored again at its
// own key after that record's delete: one start, not two.
func TestAuditRatesCountsAGrantOnce(t *testing.T) {
	t.Parallel()
	h := &history{}
	in := AuditInput{Capacity: map[string]map[string]int64{"n1": {"p": 10}}, LeaseTTL: 4 * time.Second, RunEnd: at(12000),
		HangGrace: 2 * time.Second, StrictKill: true,
		Rates: map[string]map[string]RateLimit{"n1": {"p": {Rate: pools.Rate{Slots: 2, Per: time.Second}, Burst: 3}}}}
	b := storedRecord{ID: "b", Node: "n1", Pool: "p", Slots: 3, Manager: "m1", GrantedAt: at(1000)}
	h.put(1010, lease.RecordKey("n1", "p", "a"), b) // over a's record, unseen
	h.gone(1100, lease.RecordKey("n1", "p", "a"))
	tok := h.put(1200, lease.RecordKey("n1", "p", "b"), b)
	in.Holds = append(in.Holds, hold("x", "b", tok, 3, 1205, 1250, HoldReleased))
	h.gone(1300, lease.RecordKey("n1", "p", "b"))
	in.Leases = h.leases
	rep := Audit(in)
	for _, v := range rep.Violations {
		if strings.HasPrefix(v, "over-rate") {
			t.Fatalf("violation %q: one grant counted twice", v)
		}
	}
	if rep.RateStarts["n1.p"] != 1 {
		t.Errorf("%d starts counted, want 1", rep.RateStarts["n1.p"])
	}
}

package cluster

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
)

// The auditor's checks on hand-made histories: each case breaks one rule
// and expects exactly that rule's violation, or breaks nothing and expects
// none.

var t0 = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

type history struct {
	rev     uint64
	leases  []Observation
	leaders []Observation
}

func (h *history) put(ms int, key string, v any) uint64 {
	h.rev++
	data, _ := json.Marshal(v)
	h.leases = append(h.leases, Observation{Key: key, Rev: h.rev, Op: jetstream.KeyValuePut, TS: at(ms), Data: data})
	return h.rev
}

func (h *history) gone(ms int, key string) {
	h.rev++
	h.leases = append(h.leases, Observation{Key: key, Rev: h.rev, Op: jetstream.KeyValuePurge, TS: at(ms)})
}

func (h *history) lead(ms int, node, instance string) {
	data, _ := json.Marshal(manager.LeaderRecord{Instance: instance})
	h.leaders = append(h.leaders, Observation{Key: node, Rev: uint64(len(h.leaders) + 1), Op: jetstream.KeyValuePut, TS: at(ms), Data: data})
}

func (h *history) unlead(ms int, node string) {
	h.leaders = append(h.leaders, Observation{Key: node, Rev: uint64(len(h.leaders) + 1), Op: jetstream.KeyValuePurge, TS: at(ms)})
}

// grant stores a grant by instance and returns its token.
func (h *history) grant(ms int, id string, slots int64, instance string) uint64 {
	return h.put(ms, lease.RecordKey("n1", "p", id), storedRecord{ID: id, Node: "n1", Pool: "p", Slots: slots, Manager: instance})
}

func hold(exec, id string, token uint64, slots int64, from, to int, outcome HoldOutcome) Hold {
	return Hold{Executor: exec, Node: "n1", Pool: "p", Slots: slots, LeaseID: id, Token: token, Start: at(from), End: at(to), Outcome: outcome}
}

func TestAuditChecks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		build func(h *history, in *AuditInput)
		want  string // prefix of the one expected violation; "" for none
	}{
		{"clean history", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 900, HoldReleased))
			h.gone(1000, lease.RecordKey("n1", "p", "a"))
			b := h.grant(1000, "b", 1, "m1")
			in.Holds = append(in.Holds, hold("y#1", "b", b, 1, 1010, 1500, HoldReleased))
			h.gone(1600, lease.RecordKey("n1", "p", "b"))
		}, ""},
		{"handover", func(h *history, in *AuditInput) {
			// b's grant replaces a's record at a's key: a ends as b begins.
			a := h.grant(100, "a", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 900, HoldReleased))
			b := h.put(1000, lease.RecordKey("n1", "p", "a"), storedRecord{ID: "b", Node: "n1", Pool: "p", Slots: 1, Manager: "m1"})
			in.Holds = append(in.Holds, hold("y#1", "b", b, 1, 1010, 1500, HoldReleased))
			h.gone(1600, lease.RecordKey("n1", "p", "a"))
		}, ""},
		{"handover, then another record at once", func(h *history, in *AuditInput) {
			h.grant(100, "a", 1, "m1")
			b := h.put(1000, lease.RecordKey("n1", "p", "a"), storedRecord{ID: "b", Node: "n1", Pool: "p", Slots: 1, Manager: "m1"})
			in.Holds = append(in.Holds, hold("y#1", "b", b, 1, 1010, 1050, HoldReleased))
			c := h.grant(1100, "c", 1, "m1")
			in.Holds = append(in.Holds, hold("z#1", "c", c, 1, 1110, 1150, HoldReleased))
			h.gone(1200, lease.RecordKey("n1", "p", "c"))
			h.gone(1600, lease.RecordKey("n1", "p", "a"))
		}, "over-grant (KV view)"},
		{"handover while the released holder still relies", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 1005, HoldReleased))
			b := h.put(1000, lease.RecordKey("n1", "p", "a"), storedRecord{ID: "b", Node: "n1", Pool: "p", Slots: 1, Manager: "m1"})
			in.Holds = append(in.Holds, hold("y#1", "b", b, 1, 1010, 1500, HoldReleased))
			h.gone(1600, lease.RecordKey("n1", "p", "a"))
		}, "x#1 relied on lease"},
		{"handed-over token claimed under the key's id", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 900, HoldReleased))
			b := h.put(1000, lease.RecordKey("n1", "p", "a"), storedRecord{ID: "b", Node: "n1", Pool: "p", Slots: 1, Manager: "m1"})
			in.Holds = append(in.Holds, hold("y#1", "a", b, 1, 1010, 1500, HoldReleased))
			h.gone(1600, lease.RecordKey("n1", "p", "a"))
		}, "y#1 holds lease n1.p.a with token"},
		{"two records at once", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			b := h.grant(200, "b", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 150, HoldReleased), hold("y#1", "b", b, 1, 210, 250, HoldReleased))
			h.gone(300, lease.RecordKey("n1", "p", "a"))
			h.gone(300, lease.RecordKey("n1", "p", "b"))
		}, "over-grant (KV view)"},
		{"two records at once in a shadow pool", func(h *history, in *AuditInput) {
			in.Shadow = map[string]map[string]bool{"n1": {"p": true}} // its capacity is not enforced
			a := h.grant(100, "a", 1, "m1")
			b := h.grant(200, "b", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 250, HoldReleased), hold("y#1", "b", b, 1, 210, 250, HoldReleased))
			h.gone(300, lease.RecordKey("n1", "p", "a"))
			h.gone(300, lease.RecordKey("n1", "p", "b"))
		}, ""},
		{"holders overlap", func(h *history, in *AuditInput) {
			// x relies on a past its record's end, into b's lease.
			a := h.grant(100, "a", 1, "m1")
			h.gone(200, lease.RecordKey("n1", "p", "a"))
			b := h.grant(200, "b", 1, "m1")
			h.gone(400, lease.RecordKey("n1", "p", "b"))
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 300, HoldReleased), hold("y#1", "b", b, 1, 210, 350, HoldReleased))
		}, "over-grant (holders' view)"},
		{"holder outlives its record", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			h.gone(200, lease.RecordKey("n1", "p", "a"))
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 250, HoldLost))
			in.NetFaults = append(in.NetFaults, NetFault{Who: "x", Kind: "blackhole", Start: at(120), End: at(300)})
		}, "x#1 relied on lease"},
		{"heard before stored", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 90, 150, HoldReleased))
			h.gone(200, lease.RecordKey("n1", "p", "a"))
		}, "x#1 heard of lease"},
		{"grant by a non-leader", func(h *history, in *AuditInput) {
			h.lead(0, "n1", "m1")
			h.unlead(50, "n1")
			h.lead(60, "n1", "m2")
			a := h.grant(100, "a", 1, "m1")
			h.gone(200, lease.RecordKey("n1", "p", "a"))
			_ = a
		}, "n1.p.a token"},
		{"lost lease, holder reachable", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 3700, HoldLost))
			h.gone(4200, lease.RecordKey("n1", "p", "a"))
		}, "lease lost while its holder could reach NATS"},
		{"lost lease, holder partitioned", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 3700, HoldLost))
			in.NetFaults = append(in.NetFaults, NetFault{Who: "x", Kind: "blackhole", Start: at(500), End: at(5000)})
			h.gone(4200, lease.RecordKey("n1", "p", "a"))
		}, ""},
		{"lost lease, holder's connection only reset", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			in.Holds = append(in.Holds, hold("x#1", "a", a, 1, 110, 3700, HoldLost))
			in.NetFaults = append(in.NetFaults, NetFault{Who: "x", Kind: "cut", Start: at(500), End: at(500)})
			h.gone(4200, lease.RecordKey("n1", "p", "a"))
		}, "lease lost while its holder could reach NATS"},
		{"lost lease, fast release, holder's connection reset", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			lost := hold("x#1", "a", a, 1, 110, 700, HoldLost)
			lost.Dropped = true
			in.Holds = append(in.Holds, lost)
			in.NetFaults = append(in.NetFaults, NetFault{Who: "x", Kind: "cut", Start: at(200), End: at(200)})
			h.gone(900, lease.RecordKey("n1", "p", "a"))
		}, ""},
		{"lost lease, fast release, holder's connection closed by its server", func(h *history, in *AuditInput) {
			// A server stopping or restarting frees nothing: the holder
			// had until its TTL deadline to move its lease.
			a := h.grant(100, "a", 1, "m1")
			lost := hold("x#1", "a", a, 1, 110, 700, HoldLost)
			lost.Dropped = true
			in.Holds = append(in.Holds, lost)
			in.Servers = append(in.Servers, ServerFault{Server: 0, Start: at(200), End: at(2000)})
			h.gone(900, lease.RecordKey("n1", "p", "a"))
		}, "lease lost while its holder could reach NATS"},
		{"lost lease, fast release, no manager to move it to", func(h *history, in *AuditInput) {
			// The node's managers were all stopped when the holder's
			// server went: nobody could answer the renewal that moves it.
			a := h.grant(100, "a", 1, "m1")
			lost := hold("x#1", "a", a, 1, 110, 3000, HoldLost)
			lost.Dropped = true
			in.Holds = append(in.Holds, lost)
			in.DisconnectGrace = 2 * time.Second
			in.Terms = []Term{{Node: "n1", Instance: "m1", Start: at(0), End: at(1200)}, {Node: "n1", Instance: "m2", Start: at(3500)}}
			in.Servers = append(in.Servers, ServerFault{Server: 0, Start: at(1500), End: at(4000)})
			h.gone(3100, lease.RecordKey("n1", "p", "a"))
		}, ""},
		{"lost lease, fast release, a manager served while it had to move", func(h *history, in *AuditInput) {
			a := h.grant(100, "a", 1, "m1")
			lost := hold("x#1", "a", a, 1, 110, 3000, HoldLost)
			lost.Dropped = true
			in.Holds = append(in.Holds, lost)
			in.DisconnectGrace = 2 * time.Second
			// Served until 1600, 100 ms into the 1.5 s before the loss.
			in.Terms = []Term{{Node: "n1", Instance: "m1", Start: at(0), End: at(1600)}, {Node: "n1", Instance: "m2", Start: at(3500)}}
			in.Servers = append(in.Servers, ServerFault{Server: 0, Start: at(1500), End: at(4000)})
			h.gone(3100, lease.RecordKey("n1", "p", "a"))
		}, "lease lost while its holder could reach NATS"},
		{"acquire hangs", func(h *history, in *AuditInput) {
			in.Calls = append(in.Calls, Call{Executor: "x#1", Node: "n1", Pool: "p", RequestID: "r", Start: at(0), Bound: time.Second})
		}, "acquire r by x#1 on n1.p hung"},
		{"acquire overruns its bound", func(h *history, in *AuditInput) {
			in.Calls = append(in.Calls, Call{Executor: "x#1", Node: "n1", Pool: "p", RequestID: "r", Start: at(0), Bound: time.Second, End: at(5000), Outcome: "timeout"})
		}, "acquire r by x#1 on n1.p took"},
		{"orphan record is reported apart", func(h *history, in *AuditInput) {
			h.grant(100, "orphan", 1, "m1") // never held, never renewed
			b := h.grant(200, "b", 1, "m1")
			in.Holds = append(in.Holds, hold("y#1", "b", b, 1, 210, 250, HoldReleased))
			h.gone(300, lease.RecordKey("n1", "p", "b"))
			h.gone(4100, lease.RecordKey("n1", "p", "orphan"))
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := &history{}
			in := AuditInput{Capacity: map[string]map[string]int64{"n1": {"p": 1}}, LeaseTTL: 4 * time.Second, RunEnd: at(10000), HangGrace: 2 * time.Second, StrictKill: true}
			c.build(h, &in)
			in.Leases, in.Leaders = h.leases, h.leaders
			rep := Audit(in)
			if c.want == "" {
				for _, v := range rep.Violations {
					t.Errorf("unexpected violation: %s", v)
				}
				return
			}
			for _, v := range rep.Violations {
				if strings.HasPrefix(v, c.want) {
					return
				}
			}
			t.Fatalf("violations %q, want one starting with %q", rep.Violations, c.want)
		})
	}
}

func TestAuditOrphanIsCountedAndStrictFails(t *testing.T) {
	t.Parallel()
	h := &history{}
	h.grant(100, "orphan", 1, "m1")
	b := h.grant(200, "b", 1, "m1")
	h.gone(300, lease.RecordKey("n1", "p", "b"))
	h.gone(4100, lease.RecordKey("n1", "p", "orphan"))
	in := AuditInput{Capacity: map[string]map[string]int64{"n1": {"p": 1}}, LeaseTTL: 4 * time.Second, RunEnd: at(10000),
		Leases: h.leases, Holds: []Hold{hold("y#1", "b", b, 1, 210, 250, HoldReleased)}}
	if rep := Audit(in); len(rep.OrphanOvergrants) != 1 || len(rep.Violations) != 0 {
		t.Fatalf("orphans %q violations %q, want one orphan and no violation", rep.OrphanOvergrants, rep.Violations)
	}
	in.StrictOrphans = true
	if rep := Audit(in); len(rep.Violations) != 1 {
		t.Fatalf("strict: violations %q, want the orphan over-grant", rep.Violations)
	}
}

func TestAuditStalledTakeoverIsCountedAndStrictFails(t *testing.T) {
	t.Parallel()
	h := &history{}
	a := h.grant(100, "a", 1, "m1")
	h.gone(9000, lease.RecordKey("n1", "p", "a"))
	in := AuditInput{Capacity: map[string]map[string]int64{"n1": {"p": 1}}, LeaseTTL: 4 * time.Second, LeaderTTL: time.Second, RunEnd: at(10000),
		Leases: h.leases, Holds: []Hold{hold("x#1", "a", a, 1, 110, 5000, HoldLost)},
		Terms: []Term{{Node: "n1", Instance: "m1", Start: at(0), End: at(1000)}, {Node: "n1", Instance: "m2", Start: at(6000)}},
		// m2's connection was reset while it rebuilt its state.
		NetFaults: []NetFault{{Who: "m2", Node: "n1", Kind: "cut", Start: at(1500), End: at(1500)}},
	}
	if rep := Audit(in); len(rep.StalledTakeovers) != 1 || len(rep.Violations) != 0 {
		t.Fatalf("stalled %q violations %q, want one stalled takeover and no violation", rep.StalledTakeovers, rep.Violations)
	}
	in.StrictStalls = true
	if rep := Audit(in); len(rep.Violations) != 1 {
		t.Fatalf("strict: violations %q, want the lost lease", rep.Violations)
	}
	// Without the reset, the same loss is a plain violation.
	in.StrictStalls, in.NetFaults = false, nil
	if rep := Audit(in); len(rep.Violations) != 1 || len(rep.StalledTakeovers) != 0 {
		t.Fatalf("no reset: violations %q stalled %q, want the lost lease as a violation", rep.Violations, rep.StalledTakeovers)
	}
}

func TestAuditRefusedRenewalIsCountedAndStrictFails(t *testing.T) {
	t.Parallel()
	h := &history{}
	a := h.grant(100, "a", 1, "m1")
	h.gone(9000, lease.RecordKey("n1", "p", "a")) // the record lived on
	lost := hold("x#1", "a", a, 1, 110, 3000, HoldLost)
	lost.Err = `lease: lease lost: lease: lease_not_found: lease "a" expired before the renewal`
	in := AuditInput{Capacity: map[string]map[string]int64{"n1": {"p": 1}}, LeaseTTL: 6 * time.Second, RunEnd: at(10000),
		Leases: h.leases, Holds: []Hold{lost}}
	if rep := Audit(in); len(rep.RefusedRenewals) != 1 || len(rep.Violations) != 0 {
		t.Fatalf("refused %q violations %q, want one refused renewal and no violation", rep.RefusedRenewals, rep.Violations)
	}
	in.StrictStalls = true
	if rep := Audit(in); len(rep.Violations) != 1 {
		t.Fatalf("strict: violations %q, want the lost lease", rep.Violations)
	}
}

// checkWriters flags each record no manager of the run wrote, and nothing
// a manager wrote.
func TestAuditWriters(t *testing.T) {
	t.Parallel()
	rec := func(id, manager string) []byte {
		b, _ := json.Marshal(storedRecord{ID: id, Node: "n1", Pool: "p", Slots: 1, Manager: manager})
		return b
	}
	leader := func(instance string) []byte {
		b, _ := json.Marshal(manager.LeaderRecord{Instance: instance})
		return b
	}
	put := func(key string, ttl time.Duration, data []byte) Observation {
		return Observation{Key: key, Rev: 1, Op: jetstream.KeyValuePut, TS: at(0), Data: data, TTL: ttl}
	}
	good := AuditInput{
		Capacity: map[string]map[string]int64{"n1": {"p": 1}}, LeaseTTL: 4 * time.Second, RunEnd: at(10000),
		Instances: map[string]bool{"m1": true},
		Leases:    []Observation{put("n1.p.a", 4*time.Second, rec("a", "m1"))},
		Leaders:   []Observation{put("n1", time.Second, leader("m1")), put("cluster.candidates.m1", time.Second, leader("m1"))},
		Pools: []Observation{put("n1.delta", 0, []byte(`{"manager":"m1","set":{"p":1}}`)),
			put("n1.counts", 0, []byte(`{"manager":"m1","pools":{"p":{"granted":1}}}`))},
	}
	if r := Audit(good); len(r.Violations) > 0 {
		t.Fatalf("records the run's managers wrote: %v", r.Violations)
	}
	for name, tc := range map[string]struct {
		mod  func(*AuditInput)
		want string
	}{
		"lease without TTL":   {func(in *AuditInput) { in.Leases[0].TTL = 0 }, "stored without a TTL"},
		"unknown manager":     {func(in *AuditInput) { in.Leases[0].Data = rec("a", "mallory") }, `names manager "mallory"`},
		"key of another pool": {func(in *AuditInput) { in.Leases[0].Key = "n1.q.a" }, "holds the record of n1.p.a"},
		"entry at another key": {func(in *AuditInput) {
			in.Leases[0].Key = "n1.p.b"
			in.Leases[0].Data = []byte(`{"id":"a","node":"n1","pool":"p","slots":1,"manager":"m1","queued":true}`)
		}, "holds the record of n1.p.a"},
		"leader without TTL":   {func(in *AuditInput) { in.Leaders[0].TTL = 0 }, "leadership key n1 revision 1 was stored without a TTL"},
		"unknown leader":       {func(in *AuditInput) { in.Leaders[0].Data = leader("mallory") }, `names instance "mallory"`},
		"candidate of another": {func(in *AuditInput) { in.Leaders[1].Data = leader("m2") }, `candidate record cluster.candidates.m1`},
		"stray leaders key":    {func(in *AuditInput) { in.Leaders[1].Key = "n1.forged" }, "neither a node's key nor a candidate's"},
		"legacy pool change":   {func(in *AuditInput) { in.Pools[0].Key = "n1" }, "pool bucket value n1 "},
		"forged pool change":   {func(in *AuditInput) { in.Pools[0].Data = []byte(`{"set":{"p":99}}`) }, "pool bucket value n1.delta"},
		"forged pool counts":   {func(in *AuditInput) { in.Pools[1].Data = []byte(`{"pools":{"p":{}}}`) }, "pool bucket value n1.counts"},
		"stray pool key":       {func(in *AuditInput) { in.Pools[1].Key = "n1.forged" }, "pool bucket value n1.forged"},
	} {
		t.Run(name, func(t *testing.T) {
			in := good
			in.Leases = append([]Observation(nil), good.Leases...)
			in.Leaders = append([]Observation(nil), good.Leaders...)
			in.Pools = append([]Observation(nil), good.Pools...)
			tc.mod(&in)
			r := Audit(in)
			if len(r.Violations) == 0 || !strings.Contains(strings.Join(r.Violations, "\n"), tc.want) {
				t.Fatalf("violations %v, want one containing %q", r.Violations, tc.want)
			}
		})
	}
}

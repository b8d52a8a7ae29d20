package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// probeRun is a probe's attempts every 100 ms from 0 to endMs, acknowledged
// 5 ms after their send unless failed says otherwise (those time out).
func probeRun(endMs int, failed func(ms int) bool) []probeAttempt {
	var out []probeAttempt
	for ms := 0; ms <= endMs; ms += 100 {
		if failed(ms) {
			out = append(out, probeAttempt{Sent: at(ms), Done: at(ms + 1000)})
		} else {
			out = append(out, probeAttempt{Sent: at(ms), Done: at(ms + 5), Acked: true})
		}
	}
	return out
}

func TestAuditStoreStalls(t *testing.T) {
	t.Parallel()
	outage := func(from, to int) func(int) bool { return func(ms int) bool { return ms >= from && ms < to } }
	for _, c := range []struct {
		name     string
		attempts []probeAttempt
		want     []StoreStall
	}{
		{"healthy", probeRun(5000, outage(0, 0)), nil},
		{"one outage", probeRun(5000, outage(1000, 2500)), []StoreStall{{at(900), at(2505)}}},
		{"too short to keep", probeRun(5000, outage(1000, 1100)), nil},
		{"from the start", probeRun(5000, outage(0, 1000)), []StoreStall{{at(0), at(1005)}}},
		// Still out when the probe stopped: until the last attempt's end.
		{"to the end", probeRun(5000, outage(4000, 9999)), []StoreStall{{at(3900), at(6000)}}},
		// The writes of the last second are acknowledged together when
		// the store comes back, one sent before the stall among them: the
		// stall starts at the latest send acknowledged before it.
		{"acknowledged out of order", func() []probeAttempt {
			out := []probeAttempt{{Sent: at(0), Done: at(5), Acked: true}, {Sent: at(100), Done: at(3000), Acked: true}, {Sent: at(200), Done: at(205), Acked: true}}
			for _, a := range probeRun(3500, func(int) bool { return true })[3:] {
				if a.Sent.After(at(2000)) && a.Sent.Before(at(3000)) {
					a.Done, a.Acked = at(3000), true
				} else if !a.Sent.Before(at(3000)) {
					a.Done, a.Acked = a.Sent.Add(5*time.Millisecond), true
				}
				out = append(out, a)
			}
			return out
		}(), []StoreStall{{at(200), at(3000)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := storeStalls(c.attempts, probeStallMin); !slices.Equal(got, c.want) {
				t.Fatalf("stalls %v, want %v", got, c.want)
			}
		})
	}
}

// A lost lease is excused only by a stall that covers enough of the time
// its loss was decided in; nothing excuses an over-grant.
func TestAuditStoreStallExcusesLostLease(t *testing.T) {
	t.Parallel()
	// TTL 4s: the bound is 4 - 0.4 - 1.333 = 2.267s; the lease held from
	// 110 ms was lost at 3700 ms.
	for _, c := range []struct {
		name    string
		stall   StoreStall
		excused bool
	}{
		{"long stall in the window", StoreStall{at(1000), at(3500)}, true},
		{"long stall past the loss", StoreStall{at(1200), at(9000)}, true},
		{"short stall", StoreStall{at(1000), at(2000)}, false},
		{"long stall after the loss", StoreStall{at(5000), at(9000)}, false},
		{"long stall mostly after the loss", StoreStall{at(3000), at(9000)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &history{}
			a := h.grant(100, "a", 1, "m1")
			h.gone(4200, lease.RecordKey("n1", "p", "a"))
			in := AuditInput{Capacity: map[string]map[string]int64{"n1": {"p": 1}}, LeaseTTL: 4 * time.Second, RunEnd: at(10000), StrictKill: true,
				Leases: h.leases, Holds: []Hold{hold("x#1", "a", a, 1, 110, 3700, HoldLost)}, StoreStalls: []StoreStall{c.stall}}
			rep := Audit(in)
			if c.excused {
				if want := fmt.Sprintf("store out for %.1fs: no probe write acknowledged for %.1fs", c.stall.Duration().Seconds(), c.stall.Duration().Seconds()); len(rep.Violations) != 0 || rep.LostExcused[want] != 1 {
					t.Fatalf("violations %q excused %v, want the loss excused by the stall", rep.Violations, rep.LostExcused)
				}
			} else if len(rep.Violations) != 1 || !strings.HasPrefix(rep.Violations[0], "lease lost while its holder could reach NATS") {
				t.Fatalf("violations %q excused %v, want the lost lease", rep.Violations, rep.LostExcused)
			}
		})
	}

	h := &history{}
	a := h.grant(100, "a", 1, "m1")
	b := h.grant(200, "b", 1, "m1")
	h.gone(300, lease.RecordKey("n1", "p", "a"))
	h.gone(300, lease.RecordKey("n1", "p", "b"))
	in := AuditInput{Capacity: map[string]map[string]int64{"n1": {"p": 1}}, LeaseTTL: 4 * time.Second, RunEnd: at(10000),
		Leases: h.leases, Holds: []Hold{hold("x#1", "a", a, 1, 110, 150, HoldReleased), hold("y#1", "b", b, 1, 210, 250, HoldReleased)},
		StoreStalls: []StoreStall{{at(0), at(9000)}}}
	if rep := Audit(in); len(rep.Violations) != 1 || !strings.HasPrefix(rep.Violations[0], "over-grant (KV view)") {
		t.Fatalf("violations %q, want the over-grant despite the stall", rep.Violations)
	}
}

// A bucket's stream without a leader is an outage too: the lease bucket's
// as it is, the leadership bucket's only when it outlasts a leader's
// deadline, and then a takeover longer. Outages that overlap count as one.
func TestAuditLeaderlessBucketExcusesLostLease(t *testing.T) {
	t.Parallel()
	// TTL 4s, LeaderTTL 2s: the bound is 2.267s, a leader's deadline 1.8s,
	// a takeover 2s; the lease held from 110 ms was lost at 3700 ms.
	for _, c := range []struct {
		name       string
		stalls     []StoreStall
		leaderless []Leaderless
		excused    string
	}{
		{"lease bucket long", nil, []Leaderless{{LeaseBucket, at(1000), at(3500)}},
			"store out for 2.5s: lease bucket without a stream leader for 2.5s"},
		{"lease bucket short", nil, []Leaderless{{LeaseBucket, at(1000), at(2000)}}, ""},
		// 1.9s > the 1.8s deadline: out until 2s after it had a leader.
		{"leadership bucket past a leader's deadline", nil, []Leaderless{{LeadershipBucket, at(500), at(2400)}},
			"store out for 3.9s: leadership bucket without a stream leader for 1.9s (every leader stepped down), and a takeover"},
		{"leadership bucket within a leader's deadline", nil, []Leaderless{{LeadershipBucket, at(500), at(2200)}}, ""},
		// 1.5s of stall, then 1.5s without a lease bucket leader: 3s out.
		{"a stall, then no leader", []StoreStall{{at(500), at(2000)}}, []Leaderless{{LeaseBucket, at(1900), at(3400)}},
			"store out for 2.9s: no probe write acknowledged for 1.5s; lease bucket without a stream leader for 1.5s"},
		{"a stall and no leader apart", []StoreStall{{at(500), at(1700)}}, []Leaderless{{LeaseBucket, at(2000), at(3400)}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &history{}
			a := h.grant(100, "a", 1, "m1")
			h.gone(4200, lease.RecordKey("n1", "p", "a"))
			in := AuditInput{Capacity: map[string]map[string]int64{"n1": {"p": 1}}, LeaseTTL: 4 * time.Second, LeaderTTL: 2 * time.Second, RunEnd: at(10000), StrictKill: true,
				Leases: h.leases, Holds: []Hold{hold("x#1", "a", a, 1, 110, 3700, HoldLost)}, StoreStalls: c.stalls, Leaderless: c.leaderless}
			rep := Audit(in)
			if c.excused != "" {
				if len(rep.Violations) != 0 || rep.LostExcused[c.excused] != 1 {
					t.Fatalf("violations %q excused %v, want the loss excused as %q", rep.Violations, rep.LostExcused, c.excused)
				}
			} else if len(rep.Violations) != 1 || !strings.HasPrefix(rep.Violations[0], "lease lost while its holder could reach NATS") {
				t.Fatalf("violations %q excused %v, want the lost lease", rep.Violations, rep.LostExcused)
			}
		})
	}
}

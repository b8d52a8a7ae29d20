package cluster

// The analysis of a run: Audit, a pure function of what the auditor
// (auditor.go) observed and what the suite did, and its Report. It
// rebuilds every lease's life from the store's own order of writes, the
// leadership terms from the leadership bucket, and checks each rule of
// lease safety against them (docs/guarantees.md, section 5).

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/slotlease/slotlease/lease"
)

// ServerFault is a window during which a NATS server was down or catching
// up: from its kill until the cluster was healthy again.
type ServerFault struct {
	Server     int
	Start, End time.Time
	// Led names the raft groups the server led when it was killed.
	Led []string
	// LeaseLeaderAt is when another server led the lease bucket's stream,
	// if this one led it.
	LeaseLeaderAt time.Time
}

// AuditInput is everything the analysis needs.
type AuditInput struct {
	Capacity   map[string]map[string]int64     // node -> pool -> true capacity
	Shadow     map[string]map[string]bool      // node -> pool -> in shadow mode (POOL_SHADOW): no capacity, no over-grant
	Rates      map[string]map[string]RateLimit // node -> pool -> start rate, for the pools that have one
	LeaseTTL   time.Duration
	Leases     []Observation
	Leaders    []Observation
	Events     []EventObservation
	Holds      []Hold
	Calls      []Call
	NetFaults  []NetFault
	Servers    []ServerFault
	Terms      []Term
	Overlaps   []string
	RunEnd     time.Time
	HangGrace  time.Duration // how long past its bound an Acquire may take
	StrictKill bool          // a server kill excuses no lost lease
	// StrictOrphans fails the run on over-grants that need an orphan
	// record (known problem 1 in docs/guarantees.md).
	StrictOrphans bool
	// LeaderTTL bounds a takeover: 2 x LeaderTTL + 1s.
	LeaderTTL time.Duration
	// StrictStalls fails the run on leases lost to a takeover stalled by a
	// connection reset of the new leader, or to a renewal refused although
	// the record lived (known problems 3 and 5).
	StrictStalls bool
	// Instances are the managers of the run. When set, every lease,
	// leadership and pool record must be one of theirs (checkWriters).
	Instances map[string]bool
	Pools     []Observation // the pool bucket's entries, for checkWriters
	// DisconnectGrace is the managers' fast release grace (unservedMove).
	DisconnectGrace time.Duration
	// StoreStalls are the times the auditor's store probe saw no write
	// acknowledged, Leaderless the times a bucket's stream had no leader:
	// outages long enough excuse a lost lease (outages.go).
	StoreStalls []StoreStall
	Leaderless  []Leaderless
}

// Report is the auditor's verdict.
type Report struct {
	Violations []string
	Notes      []string

	KVLeases     int // lease records (grants) seen in KV
	Holds        int // leases executors held
	HoldsCovered int // holds whose record the auditor saw
	Outcomes     map[string]int
	Lost         int
	LostExcused  map[string]int
	MaxKVInUse   map[string]int64 // node.pool -> most slots held at once, KV view
	MaxHeldInUse map[string]int64 // the same, holders' view
	// RateStarts counts the grants of each pool with a start rate, and
	// MaxRateUse is the most of its bound any window used (checkRates):
	// above 1 is a violation.
	RateStarts map[string]int
	MaxRateUse map[string]float64
	// OrphanOvergrants are KV-view over-grants that need a record nobody
	// ever held (known problem 1).
	OrphanOvergrants []string
	// StalledTakeovers are leases lost while their node had no serving
	// manager for longer than a takeover may take, right after a
	// candidate's connection was reset or partitioned (known problem 3).
	StalledTakeovers []string
	// RefusedRenewals are leases lost because the manager refused to renew
	// a record that was still stored (known problem 5).
	RefusedRenewals []string
	// LeakedQueueEntries are queue entries still stored after the drain
	// (known problem 4); filled in by the suite.
	LeakedQueueEntries []string
	LateGrants         int // grants stored after the granter's leadership ended, no one else leading
	LateGrantMax       time.Duration
	// LeaderUnverified counts grants written while the leadership watch
	// was blind (a gap in its deliveries, e.g. after a server kill).
	LeaderUnverified int
	GrantedEvents    int
	EventsVerified   int
	// ExpiryLags: for each record that expired, how long after its last
	// write + TTL the server's expiry marker came.
	ExpiryLags []time.Duration
}

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

const tsFormat = "15:04:05.000"

// Audit analyses a run. It is a pure function of its input.
func Audit(in AuditInput) *Report {
	r := &Report{Outcomes: map[string]int{}, LostExcused: map[string]int{}, MaxKVInUse: map[string]int64{}, MaxHeldInUse: map[string]int64{},
		RateStarts: map[string]int{}, MaxRateUse: map[string]float64{}}
	checkWriters(in, r)
	kv := buildKVLeases(in, r)
	r.KVLeases = len(kv)
	checkRates(in, kv, r)
	leaders := buildLeadership(in, r)

	// (a) slots held per pool never above capacity: KV view.
	//
	// An orphan is a grant record that nobody ever held or renewed: the
	// manager wrote it, lost the write's acknowledgement, and freed the
	// slots while the record stayed until its TTL (docs/guarantees.md,
	// known problem 1). Over-grants that need an orphan are reported apart,
	// and fail the run only with StrictOrphans; every other one fails it.
	heldTokens := map[uint64]bool{}
	for _, h := range in.Holds {
		heldTokens[h.Token] = true
	}
	byPool := map[string][]interval{}
	withoutOrphans := map[string][]interval{}
	for _, l := range kv {
		orphan := l.FromGrant && l.LastPut.Equal(l.Start) && !heldTokens[l.Token]
		what := fmt.Sprintf("%s token %d (%d slots, %s..%s)", l.Key, l.Token, l.Slots, l.Start.Format(tsFormat), l.End.Format(tsFormat))
		if orphan {
			what += " ORPHAN"
		} else {
			withoutOrphans[l.Node+"."+l.Pool] = append(withoutOrphans[l.Node+"."+l.Pool], interval{l.Start, l.End, l.Slots, what})
		}
		byPool[l.Node+"."+l.Pool] = append(byPool[l.Node+"."+l.Pool], interval{l.Start, l.End, l.Slots, what})
	}
	for pool, ivs := range byPool {
		capacity, ok := in.capacityOf(pool)
		if !ok {
			r.violate("KV: lease records in %s, a pool the run does not have", pool)
			continue
		}
		r.MaxKVInUse[pool] = sweep(withoutOrphans[pool], capacity, func(at time.Time, inUse int64, open []string) {
			r.violate("over-grant (KV view): %s holds %d slots of %d at %s: %s", pool, inUse, capacity, at.Format(tsFormat), strings.Join(open, "; "))
		})
		sweep(ivs, capacity, func(at time.Time, inUse int64, open []string) {
			msg := fmt.Sprintf("over-grant (KV view, orphan record): %s holds %d slots of %d at %s: %s", pool, inUse, capacity, at.Format(tsFormat), strings.Join(open, "; "))
			if !strings.Contains(msg, "ORPHAN") {
				return // reported above
			}
			r.OrphanOvergrants = append(r.OrphanOvergrants, msg)
			if in.StrictOrphans {
				r.Violations = append(r.Violations, msg)
			}
		})
	}

	// (a) the same from the holders' own view.
	r.Holds = len(in.Holds)
	held := map[string][]interval{}
	for _, h := range in.Holds {
		end := h.End
		if end.IsZero() {
			end = in.RunEnd
		}
		held[h.Node+"."+h.Pool] = append(held[h.Node+"."+h.Pool], interval{h.Start, end, h.Slots, fmt.Sprintf("%s lease %s token %d (%d slots, %s..%s, %s)", h.Executor, h.LeaseID, h.Token, h.Slots, h.Start.Format(tsFormat), end.Format(tsFormat), h.Outcome)})
	}
	for pool, ivs := range held {
		capacity, ok := in.capacityOf(pool)
		if !ok {
			r.violate("holders: leases in %s, a pool the run does not have", pool)
			continue
		}
		r.MaxHeldInUse[pool] = sweep(ivs, capacity, func(at time.Time, inUse int64, open []string) {
			r.violate("over-grant (holders' view): %s holds %d slots of %d at %s: %s", pool, inUse, capacity, at.Format(tsFormat), strings.Join(open, "; "))
		})
	}

	// Each hold against its record: stored before the holder heard of it,
	// and gone only after the holder stopped relying on it.
	byToken := map[uint64]*kvLease{}
	for i := range kv {
		byToken[kv[i].Token] = &kv[i]
	}
	// Which lease each revision of the bucket was: a record names its
	// lease, which need not be its key's (a handover).
	seqLease := map[uint64]string{}
	for _, o := range in.Leases {
		seqLease[o.Rev] = o.Key
		var v storedRecord
		if o.Op == jetstream.KeyValuePut && json.Unmarshal(o.Data, &v) == nil {
			seqLease[o.Rev] = lease.RecordKey(v.Node, v.Pool, v.ID)
		}
	}
	for _, h := range in.Holds {
		key := lease.RecordKey(h.Node, h.Pool, h.LeaseID)
		l := byToken[h.Token]
		if l == nil {
			if k, seen := seqLease[h.Token]; seen && k != key {
				r.violate("%s holds lease %s with token %d, but revision %d of the bucket is %s", h.Executor, key, h.Token, h.Token, k)
			}
			continue
		}
		if l.ID != h.LeaseID || l.Node != h.Node || l.Pool != h.Pool {
			r.violate("%s holds lease %s with token %d, but that token is the record of %s.%s.%s at %s", h.Executor, key, h.Token, l.Node, l.Pool, l.ID, l.Key)
			continue
		}
		r.HoldsCovered++
		if l.FromGrant && h.Start.Before(l.Start) {
			r.violate("%s heard of lease %s token %d at %s, before its record was stored at %s", h.Executor, key, h.Token, h.Start.Format(tsFormat), l.Start.Format(tsFormat))
		}
		end := h.End
		if end.IsZero() {
			end = in.RunEnd
		}
		if l.EndKnown && end.After(l.End) {
			r.violate("%s relied on lease %s token %d until %s (%s), %v after its record was gone (%s)", h.Executor, key, h.Token, end.Format(tsFormat), h.Outcome, end.Sub(l.End).Round(time.Millisecond), l.End.Format(tsFormat))
		}
	}

	// Grants are stored only by the node's leader of the moment. Where the
	// leadership watch was blind, the auditor cannot tell who led.
	blind := blindWindows(in.Leaders)
	for _, l := range kv {
		if !l.FromGrant || len(in.Leaders) == 0 {
			continue
		}
		if inWindow(blind, l.Start) {
			r.LeaderUnverified++
			continue
		}
		terms := leaders[l.Node]
		var own, other *leaderTerm
		for i := range terms {
			t := &terms[i]
			if !t.start.After(l.Start) && (t.end.IsZero() || l.Start.Before(t.end)) {
				if t.instance == l.Instance {
					own = t
				} else {
					other = t
				}
			}
		}
		switch {
		case own != nil:
		case other != nil:
			r.violate("%s token %d was stored at %s by %s while %s led node %s (since %s)", l.Key, l.Token, l.Start.Format(tsFormat), l.Instance, other.instance, l.Node, other.start.Format(tsFormat))
		default:
			// Nobody led at that moment: the write of a manager whose
			// leadership had just lapsed. Harmless unless another leader
			// granted meanwhile, which the capacity checks would catch.
			r.LateGrants++
			var lastEnd time.Time
			for _, t := range terms {
				if t.instance == l.Instance && !t.end.IsZero() && !t.end.After(l.Start) && t.end.After(lastEnd) {
					lastEnd = t.end
				}
			}
			if !lastEnd.IsZero() {
				r.LateGrantMax = max(r.LateGrantMax, l.Start.Sub(lastEnd))
			}
		}
	}

	// Events: a granted event names a stored grant.
	for _, e := range in.Events {
		ev := e.Event
		if ev.Kind != lease.EventGranted {
			continue
		}
		r.GrantedEvents++
		key := lease.RecordKey(ev.Node, ev.Pool, ev.LeaseID)
		k, seen := seqLease[ev.Token]
		if !seen {
			continue
		}
		if k != key {
			r.violate("event: %s granted with token %d, but revision %d of the bucket is %s", key, ev.Token, ev.Token, k)
			continue
		}
		r.EventsVerified++
		if l := byToken[ev.Token]; l != nil && l.FromGrant && ev.Time.Before(l.Start) {
			r.violate("event: %s token %d granted at %s, before its record was stored at %s", key, ev.Token, ev.Time.Format(tsFormat), l.Start.Format(tsFormat))
		}
	}

	// (b) every waiter is granted, cancelled or given an error: none hangs.
	for _, c := range in.Calls {
		if c.End.IsZero() {
			r.Outcomes["hung"]++
			r.violate("acquire %s by %s on %s.%s hung: started %s with a %v bound, never returned", c.RequestID, c.Executor, c.Node, c.Pool, c.Start.Format(tsFormat), c.Bound)
			continue
		}
		if took := c.End.Sub(c.Start); took > c.Bound+in.HangGrace {
			r.violate("acquire %s by %s on %s.%s took %v, past its %v bound", c.RequestID, c.Executor, c.Node, c.Pool, took.Round(time.Millisecond), c.Bound)
		}
		r.Outcomes[c.Outcome]++
	}

	// (c) no lease is lost while its holder keeps renewing and can reach NATS.
	margin := in.LeaseTTL / 10
	for _, h := range in.Holds {
		if h.Outcome != HoldLost {
			continue
		}
		r.Lost++
		// The loss was decided by what happened since the last renewal the
		// holder could have counted on: at most TTL-margin before the end.
		from := h.End.Add(-(in.LeaseTTL - margin)).Add(-time.Second)
		if from.Before(h.Start) {
			from = h.Start.Add(-time.Second)
		}
		if why := excuse(in, h, from); why != "" {
			r.LostExcused[why]++
			continue
		}
		msg := fmt.Sprintf("lease lost while its holder could reach NATS: %s lease %s.%s.%s token %d held %s..%s: %s",
			h.Executor, h.Node, h.Pool, h.LeaseID, h.Token, h.Start.Format(tsFormat), h.End.Format(tsFormat), h.Err)
		// Known problem 5: the manager refused the renewal of a record
		// that was still stored (a retried renewal after a lost or late
		// acknowledgement).
		if l := byToken[h.Token]; l != nil && strings.Contains(h.Err, "expired before the renewal") && l.End.After(h.End.Add(100*time.Millisecond)) {
			r.RefusedRenewals = append(r.RefusedRenewals, fmt.Sprintf("%s; its record lived on until %s", msg, l.End.Format(tsFormat)))
			if !in.StrictStalls {
				continue
			}
		}
		if gap := stalledTakeover(in, h.Node, from, h.End); gap != "" {
			r.StalledTakeovers = append(r.StalledTakeovers, msg+"; "+gap)
			if !in.StrictStalls {
				continue
			}
		}
		r.violate("%s", msg)
	}

	for _, o := range in.Overlaps {
		r.violate("two managers served one node: %s", o)
	}
	return r
}

func capacityOf(c map[string]map[string]int64, nodePool string) (int64, bool) {
	node, pool, _ := strings.Cut(nodePool, ".")
	v, ok := c[node][pool]
	return v, ok
}

// capacityOf is the capacity the over-grant checks hold nodePool
// ("node.pool") to: its true capacity, or no bound for a shadow pool.
func (in *AuditInput) capacityOf(nodePool string) (int64, bool) {
	c, ok := capacityOf(in.Capacity, nodePool)
	if node, pool, _ := strings.Cut(nodePool, "."); ok && in.Shadow[node][pool] {
		c = math.MaxInt64
	}
	return c, ok
}

// sweep walks the intervals in time order (an end before a start at the
// same instant) and reports each moment the slots in use rise above
// capacity, once per episode. It returns the most slots in use at once.
func sweep(ivs []interval, capacity int64, over func(at time.Time, inUse int64, open []string)) int64 {
	type edge struct {
		at    time.Time
		delta int64
		idx   int
	}
	edges := make([]edge, 0, 2*len(ivs))
	for i, iv := range ivs {
		edges = append(edges, edge{iv.start, iv.slots, i}, edge{iv.end, -iv.slots, i})
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	var inUse, peak int64
	open := map[int]bool{}
	reported := false
	for _, e := range edges {
		inUse += e.delta
		if e.delta > 0 {
			open[e.idx] = true
		} else {
			delete(open, e.idx)
		}
		peak = max(peak, inUse)
		if inUse > capacity && !reported {
			reported = true
			var names []string
			for i := range open {
				names = append(names, ivs[i].what)
			}
			sort.Strings(names)
			over(e.at, inUse, names)
		}
		if inUse <= capacity {
			reported = false
		}
	}
	return peak
}

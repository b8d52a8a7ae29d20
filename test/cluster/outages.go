package cluster

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// An outage is a time in which no manager could renew a lease, whatever it
// did: the store took no write, or the store's raft groups had no leader.
// The auditor excuses a lost lease only by outages that alone explain it
// (excuse, auditor.go). Three measurements give them:
//
//   - the store probe's stalls (storeprobe.go): its own bucket took no
//     write, as when the cluster stalls under load;
//   - the lease bucket's stream without a leader (leaderwatch.go): no
//     renewal can be stored, though the probe's stream, led elsewhere, may
//     take writes;
//   - the leadership bucket's stream without a leader for longer than a
//     leader's deadline (LeaderTTL - LeaderTTL/10 after its last renewal,
//     which came before): every manager of the node stops serving, and no
//     standby can claim the node until the stream has a leader again; the
//     outage lasts a takeover longer (LeaderTTL: the old key has expired
//     by then, the claim and the rebuild take well under that).
type outage struct {
	Start, End time.Time
	What       string
}

func (o outage) Duration() time.Duration { return o.End.Sub(o.Start) }

func outages(in AuditInput) []outage {
	var out []outage
	for _, s := range in.StoreStalls {
		out = append(out, outage{s.Start, s.End, fmt.Sprintf("no probe write acknowledged for %.1fs", s.Duration().Seconds())})
	}
	for _, l := range in.Leaderless {
		what := fmt.Sprintf("%s without a stream leader for %.1fs", l.Bucket, l.Duration().Seconds())
		switch {
		case l.Bucket == LeaseBucket:
			out = append(out, outage{l.Start, l.End, what})
		case l.Bucket == LeadershipBucket && in.LeaderTTL > 0 && l.Duration() > in.LeaderTTL-in.LeaderTTL/10:
			out = append(out, outage{l.Start, l.End.Add(in.LeaderTTL), what + " (every leader stepped down), and a takeover"})
		}
	}
	return out
}

// storeStallBound is how long the store must be out to excuse a lost lease.
// A holder renews TTL/3 after its last successful renewal and re-sends until
// its deadline, TTL - TTL/10 after it (lease/lease.go): an outage alone
// defeats every one of those renewals only if it lasts the whole span
// between, 2/3 TTL - TTL/10 (4.53 s at the suite's 8 s TTL). A shorter
// outage followed by a takeover can cost a lease too, but is not excused:
// the point is to excuse only outages that alone explain a loss.
func storeStallBound(ttl time.Duration) time.Duration {
	return ttl - ttl/10 - ttl/3
}

// storeOut names the outages whose union covers at least the bound of
// [from, to], or returns "". Overlapping outages count as one: a lease
// bucket without a leader right after a probe stall is one time without
// renewals.
func storeOut(in AuditInput, from, to time.Time) string {
	all := outages(in)
	sort.Slice(all, func(i, j int) bool { return all[i].Start.Before(all[j].Start) })
	bound := storeStallBound(in.LeaseTTL)
	for i := 0; i < len(all); {
		start, end := all[i].Start, all[i].End
		whats := []string{all[i].What}
		j := i + 1
		for ; j < len(all) && !all[j].Start.After(end); j++ {
			if all[j].End.After(end) {
				end = all[j].End
			}
			whats = append(whats, all[j].What)
		}
		i = j
		cs, ce := start, end
		if cs.Before(from) {
			cs = from
		}
		if ce.After(to) {
			ce = to
		}
		if ce.Sub(cs) >= bound {
			return fmt.Sprintf("store out for %.1fs: %s", end.Sub(start).Seconds(), strings.Join(whats, "; "))
		}
	}
	return ""
}

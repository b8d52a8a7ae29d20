package cluster

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
)

// RateLimit is a pool's start rate, as the auditor judges it.
type RateLimit struct {
	Rate  pools.Rate
	Burst int64
}

// RateSlack is how much later than the moment its tokens were taken a
// grant's record may be stamped. A manager takes the tokens when it grants
// in memory, under its lock, and the grant's own goroutine stamps
// granted_at as it starts, before the write: the gap is goroutine
// scheduling, a few milliseconds, more on a starved race-built test
// machine. Stamps that lag unevenly can squeeze more grants into a window
// than the tokens allowed, so every window is widened by this much. It is
// well under one token's time of the suite's rates. A bucket that started
// full after a takeover fails the check only if the old manager had just
// spent its tokens (docs/guarantees.md §5, check 8).
const RateSlack = 250 * time.Millisecond

// rateStart is one grant seen in KV: when its manager stamped it.
type rateStart struct {
	at    time.Time
	slots int64
	what  string
}

// checkRates checks every pool with a start rate: in every window between
// two grants, stamped a and b, the slots granted are at most
// burst + rate × (b − a + RateSlack). The grant times are the records'
// granted_at, not the KV write times: a write can land seconds after its
// grant while a server is down, which would bunch grants that the rate
// spread. The bound holds across manager crashes and takeovers because a
// manager's bucket starts empty and a deposed one stores no grant
// (docs/guarantees.md §2.3).
func checkRates(in AuditInput, kv []kvLease, r *Report) {
	starts := map[string][]rateStart{}
	// One grant is one start, however many records it had: a handover
	// whose write was not seen stored becomes a delete, and the grant is
	// then stored again at its own key (docs/protocol.md, section 5.6).
	seen := map[string]bool{}
	for _, l := range kv {
		if _, ok := rateOf(in.Rates, l.Node+"."+l.Pool); !ok {
			continue
		}
		if l.GrantedAt.IsZero() {
			r.violate("KV: %s token %d has no granted_at", l.Key, l.Token)
			continue
		}
		grant := l.Node + "." + l.Pool + "." + l.ID + "@" + l.GrantedAt.Format(time.RFC3339Nano)
		if seen[grant] {
			continue
		}
		seen[grant] = true
		starts[l.Node+"."+l.Pool] = append(starts[l.Node+"."+l.Pool], rateStart{l.GrantedAt, l.Slots, fmt.Sprintf("%s token %d (lease %s, %d slots)", l.Key, l.Token, l.ID, l.Slots)})
	}
	for pool, ss := range starts {
		lim, _ := rateOf(in.Rates, pool)
		sort.Slice(ss, func(i, j int) bool { return ss[i].at.Before(ss[j].at) })
		r.RateStarts[pool] = len(ss)
		perSec := float64(lim.Rate.Slots) / lim.Rate.Per.Seconds()
		worst := 0.0
		for i := range ss {
			var n int64
			for j := i; j < len(ss); j++ {
				n += ss[j].slots
				window := ss[j].at.Sub(ss[i].at)
				bound := float64(lim.Burst) + perSec*(window+RateSlack).Seconds()
				worst = max(worst, float64(n)/bound)
				if float64(n) > bound {
					var all []string
					for _, s := range ss[i : j+1] {
						all = append(all, s.what)
					}
					r.violate("over-rate: %s started %d slots in %v (%s..%s), over burst %d + rate %v x (the window + %v) = %.2f; first %s, last %s; all: %s",
						pool, n, window.Round(time.Millisecond), ss[i].at.Format(tsFormat), ss[j].at.Format(tsFormat), lim.Burst, lim.Rate, RateSlack, bound, ss[i].what, ss[j].what, strings.Join(all, "; "))
					break // one report per window start
				}
			}
		}
		r.MaxRateUse[pool] = worst
	}
}

// rateOf looks a "node.pool" up in node -> pool -> rate.
func rateOf(rates map[string]map[string]RateLimit, nodePool string) (RateLimit, bool) {
	node, pool, _ := strings.Cut(nodePool, ".")
	lim, ok := rates[node][pool]
	return lim, ok
}

// rateLimits lists the pools of nodes that have a start rate.
func rateLimits(nodes []string, ps []manager.PoolConfig) map[string]map[string]RateLimit {
	out := map[string]map[string]RateLimit{}
	for _, node := range nodes {
		for _, p := range ps {
			if p.Options.Rate == (pools.Rate{}) {
				continue
			}
			burst, _ := pools.CheckRate(p.Options.Rate, p.Options.Burst)
			if out[node] == nil {
				out[node] = map[string]RateLimit{}
			}
			out[node][p.Name] = RateLimit{Rate: p.Options.Rate, Burst: burst}
		}
	}
	return out
}

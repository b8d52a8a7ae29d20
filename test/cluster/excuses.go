package cluster

// The faults that excuse a lease lost: Audit asks excuse for every hold
// that ended before its holder released it, and tells a loss the suite
// caused (a kill, a reset, a partition, a takeover that stalled) from one
// the product caused.

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// excuse names the fault that may legitimately have cost h, or "".
func excuse(in AuditInput, h Hold, from time.Time) string {
	for _, f := range in.NetFaults {
		// Fast release's cost: a connection reset on the holder's path
		// looks to its server like the holder's own close, which frees
		// the lease a grace later; a holder that could not move the lease
		// to a new connection within 3/4 of the grace gives it up
		// (docs/guarantees.md 2.1). Any other drop (its server stopped,
		// restarted, stalled) can free nothing: a lease lost to it is a
		// failure.
		if h.Dropped && f.Kind == "cut" && (f.Who == h.Executor || strings.HasPrefix(h.Executor, f.Who+"#")) && !f.End.Before(from) && !f.Start.After(h.End) {
			return "fast release: holder's connection reset, lease not moved within the grace"
		}
	}
	for _, f := range in.NetFaults {
		// A reset connection is re-established at once: it must not cost
		// a lease. A partition may.
		if f.Kind == "cut" {
			continue
		}
		if (f.Who == h.Executor || strings.HasPrefix(h.Executor, f.Who+"#")) && !f.End.Before(from) && !f.Start.After(h.End) {
			return "holder's own " + f.Kind
		}
	}
	if why := unservedMove(in, h); why != "" {
		return why
	}
	if !in.StrictKill {
		for _, s := range in.Servers {
			if !s.End.Before(from) && !s.Start.After(h.End) {
				return "NATS server kill"
			}
		}
	}
	// No renewal can succeed while the store is out (outages.go).
	return storeOut(in, from, h.End)
}

// unservedMove names why a lease lost by fast release's dropped-connection
// clock could not have been moved: no manager served its node at any time
// in the last 3/4 of the grace before the loss, when the holder had to
// move it (lease/liveness.go), so nobody could answer the renewal that
// moves it. The holder cannot tell its server's stop from a reset on its
// path, which a serving manager would free the lease for, so it gives the
// lease up by its rule: the cost of fast release, as after a reset. ""
// when a term of the node overlaps that time, or when no term of the node
// is known.
func unservedMove(in AuditInput, h Hold) string {
	if !h.Dropped || in.DisconnectGrace <= 0 {
		return ""
	}
	from := h.End.Add(-(in.DisconnectGrace - in.DisconnectGrace/4))
	known := false
	for _, t := range in.Terms {
		if t.Node != h.Node {
			continue
		}
		known = true
		if t.Start.Before(h.End) && (t.End.IsZero() || t.End.After(from)) {
			return ""
		}
	}
	if !known {
		return ""
	}
	return "fast release: no manager served the node while the holder had to move its lease"
}

// stalledTakeover describes, if there was one, a time in [from, to] when
// node had no serving manager for longer than a takeover may take (2 x
// LeaderTTL + 1s), starting within a second of a reset or partition of one
// of the node's candidates: known problem 3.
func stalledTakeover(in AuditInput, node string, from, to time.Time) string {
	if in.LeaderTTL == 0 {
		return ""
	}
	limit := 2*in.LeaderTTL + time.Second
	var terms []Term
	for _, t := range in.Terms {
		if t.Node == node {
			terms = append(terms, t)
		}
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i].Start.Before(terms[j].Start) })
	// Walk the uncovered intervals.
	covered := time.Time{}
	for i, t := range terms {
		if i > 0 && t.Start.After(covered) {
			gapStart, gapEnd := covered, t.Start
			if gapEnd.Sub(gapStart) > limit && !gapEnd.Before(from) && !gapStart.After(to) {
				for _, f := range in.NetFaults {
					if f.Node == node && f.Kind != "crash" && !f.End.Add(time.Second).Before(gapStart) && !f.Start.After(gapEnd) {
						return fmt.Sprintf("%s had no serving manager from %s to %s (%v) after %s of %s at %s",
							node, gapStart.Format(tsFormat), gapEnd.Format(tsFormat), gapEnd.Sub(gapStart).Round(time.Millisecond), f.Kind, f.Who, f.Start.Format(tsFormat))
					}
				}
			}
		}
		end := t.End
		if end.IsZero() {
			end = in.RunEnd
		}
		if end.After(covered) {
			covered = end
		}
	}
	return ""
}

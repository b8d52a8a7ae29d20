package jobs

import (
	"cmp"
	"slices"
	"time"
)

// Head is the oldest job of one priority that no executor has taken yet.
type Head struct {
	Priority Priority
	// Since is when the job was stored; zero if there is no such job (the
	// priority may still have retries coming due).
	Since time.Time
}

// Order returns the priorities in the order an executor should try them,
// given the head of each. This is the priority and aging rule:
//
//   - A job's effective level is its priority's level (low 0, normal 1,
//     high 2) plus one for every full aging period it has waited since it
//     was submitted, capped at high's level: a low job counts as normal
//     after one period and as high after two; a normal job as high after
//     one.
//   - The highest effective level goes first; among equal levels, the job
//     that has waited longest; a priority with no waiting head (only
//     retries, whose age is not known here) counts as freshly submitted.
//
// So with no aging (aging <= 0) high always goes before normal before low,
// and with it no job waits more than two aging periods behind a stream of
// fresher jobs of higher priority.
func Order(heads []Head, now time.Time, aging time.Duration) []Priority {
	type cand struct {
		p     Priority
		level int
		since time.Time
	}
	cs := make([]cand, 0, len(heads))
	for _, h := range heads {
		c := cand{p: h.Priority, level: h.Priority.rank(), since: h.Since}
		if c.since.IsZero() {
			c.since = now
		}
		if aging > 0 {
			if waited := now.Sub(c.since); waited > 0 {
				c.level += int(min(waited/aging, 2))
			}
		}
		c.level = min(c.level, High.rank())
		cs = append(cs, c)
	}
	slices.SortStableFunc(cs, func(a, b cand) int {
		return cmp.Or(cmp.Compare(b.level, a.level), a.since.Compare(b.since), cmp.Compare(b.p.rank(), a.p.rank()))
	})
	out := make([]Priority, len(cs))
	for i, c := range cs {
		out[i] = c.p
	}
	return out
}

// Backoff is the delay before retry number attempt+1 after attempt failed:
// base doubled for every attempt after the first, capped at max.
func Backoff(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

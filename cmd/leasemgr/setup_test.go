package main

import (
	"testing"
	"time"
)

// A create's budget doubles with each try of the set-up, up to a whole
// try's: a cluster whose creates are all slow still gets its buckets.
func TestStepTimeoutGrowsToTheTry(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: 3 * time.Second, 2: 6 * time.Second, 3: setupTryTimeout, 9: setupTryTimeout, 1000: setupTryTimeout} {
		if got := stepTimeout(attempt); got != want {
			t.Errorf("stepTimeout(%d) = %v, want %v", attempt, got, want)
		}
	}
}

// Each create has a budget of its own: a race lost on one bucket does not
// lengthen the next bucket's first try.
func TestCreateBudgetIsPerCreate(t *testing.T) {
	var b createBudget
	for _, c := range []struct {
		name string
		want time.Duration
	}{{"leases", 3 * time.Second}, {"leases", 6 * time.Second}, {"leaders", 3 * time.Second}, {"leases", setupTryTimeout}} {
		ctx, cancel := b.context(t.Context(), c.name)
		dl, ok := ctx.Deadline()
		cancel()
		if left := time.Until(dl); !ok || left > c.want || left < c.want-time.Second {
			t.Errorf("%s: %v left, want %v", c.name, left, c.want)
		}
	}
}

package jobs

import (
	"slices"
)

// turns is deficit round robin over the tenants with jobs waiting in one
// pool and priority, as one executor takes them: the job queue's side of a
// fair pool's weighted share (pools.PolicyFair does the same over requests
// queued at the lease manager, but an executor queues none there: it takes
// a job only when a slot is free).
//
// The tenant at the front of the round has the turn: when its turn begins
// it is credited its weight on top of what it had left, and its jobs are
// taken while that credit is positive; each job started costs its slots
// (charged after the fact, so a job larger than the credit overdraws it and
// the tenant's next turns pay it back). Then the turn passes. A tenant with
// nothing waiting leaves the round and loses its credit, so an idle tenant
// banks nothing; a tenant with jobs again joins at the back. Over many
// rounds each tenant with jobs waiting starts slots in proportion to its
// weight.
//
// Why not pools' rule (serve while the head fits the credit, never
// overdraw): the feeder learns a job's slots only once it has fetched the
// job, and a job given back (nak) is redelivered rather than kept at the
// head of its tenant's line; so it charges after (docs/jobs.md, "Tenants:
// fair share through the queue").
//
// Keys are tenant keys (TenantKey; "" for jobs without a tenant, which
// share as one more tenant). A turns belongs to one feeder goroutine.
type turns struct {
	ring   []string // tenant keys in turn order; ring[0] has the turn
	credit map[string]int64
	begun  bool // ring[0]'s turn has been credited
}

func newTurns() *turns { return &turns{credit: map[string]int64{}} }

// order returns waiting (the tenant keys with jobs waiting now) in the order
// to try them: the tenant whose turn it is first, then the rest of the
// round. weight gives each key's weight, at least 1.
func (t *turns) order(waiting []string, weight func(string) int64) []string {
	// Tenants with nothing waiting leave the round; newcomers join at the
	// back, in a fixed order so that runs are reproducible.
	kept := t.ring[:0]
	for i, k := range t.ring {
		if slices.Contains(waiting, k) {
			kept = append(kept, k)
		} else {
			delete(t.credit, k)
			if i == 0 {
				t.begun = false
			}
		}
	}
	t.ring = kept
	fresh := make([]string, 0, len(waiting))
	for _, k := range waiting {
		if !slices.Contains(t.ring, k) {
			fresh = append(fresh, k)
		}
	}
	slices.Sort(fresh)
	t.ring = append(t.ring, fresh...)
	if len(t.ring) == 0 {
		return nil
	}
	t.settle(weight)
	return slices.Clone(t.ring)
}

// settle passes the turn until the front tenant has credit left. A tenant
// that overdrew gets the further rounds it needs in one step.
func (t *turns) settle(weight func(string) int64) {
	for passed := 0; ; passed++ {
		k := t.ring[0]
		if !t.begun {
			if passed >= len(t.ring) {
				t.skipRounds(weight)
			}
			t.credit[k] += weight(k)
			t.begun = true
		}
		if t.credit[k] > 0 {
			return
		}
		t.pass()
	}
}

// skipRounds credits every tenant the rounds in which none of them would
// reach positive credit: r-1, where r is the fewest any of them needs.
func (t *turns) skipRounds(weight func(string) int64) {
	r := int64(-1)
	for _, k := range t.ring {
		need := (1 - t.credit[k] + weight(k) - 1) / weight(k)
		if r < 0 || need < r {
			r = need
		}
	}
	if r <= 1 {
		return
	}
	for _, k := range t.ring {
		t.credit[k] += (r - 1) * weight(k)
	}
}

// pass ends the front tenant's turn: it moves to the back.
func (t *turns) pass() {
	t.ring = append(t.ring[1:], t.ring[0])
	t.begun = false
}

// charge records that a job of key k started with slots slots. The turn
// passes when the front tenant has used up its credit; a job of another
// tenant (taken because the front's job was gone) is charged to that
// tenant's credit.
func (t *turns) charge(k string, slots int64) {
	t.credit[k] -= slots
	if len(t.ring) > 0 && t.ring[0] == k && t.begun && t.credit[k] <= 0 {
		t.pass()
	}
}

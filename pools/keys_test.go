package pools

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func keysOf(ws []*Waiter) string { return joinWaiters(ws, func(w *Waiter) string { return w.Key }) }

func TestKeyOptions(t *testing.T) {
	bad := []struct {
		o    Options
		want string
	}{
		{Options{Policy: PolicyFair, KeyCap: -1}, "key cap -1 is negative"},
		{Options{KeyCap: 2}, `key cap needs policy "fair", not "fifo"`},
		{Options{Policy: PolicyPriority, KeyCap: 2}, `key cap needs policy "fair", not "priority"`},
		{Options{Policy: PolicyFair, Quantum: -1}, "quantum -1 is not in 1..1000000"},
		{Options{Policy: PolicyFair, Quantum: MaxQuantum + 1}, "quantum 1000001 is not in 1..1000000"},
		{Options{Quantum: 2}, `quantum needs policy "fair", not "fifo"`},
		{Options{Policy: PolicyFair, StarvationAge: -time.Second}, "starvation age -1s is negative"},
		{Options{Policy: PolicyPriority, StarvationAge: time.Second}, `starvation age needs policy "fair", not "priority"`},
	}
	for _, c := range bad {
		p, err := NewWithOptions(1, c.o)
		if p != nil || !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewWithOptions(1, %+v) = %v, %v; want ErrInvalidOptions with %q", c.o, p, err, c.want)
		}
	}
	o := mustNew(t, 1, Options{Policy: PolicyFair}).Options()
	if o.Quantum != 1 || o.KeyCap != 0 || o.StarvationAge != 0 {
		t.Errorf("fair defaults: quantum %d, key cap %d, starvation age %v", o.Quantum, o.KeyCap, o.StarvationAge)
	}
}

// TestFairByKey: the fair policy shares by key within a tenant, and by
// tenant for requests without one; a key's weight is the weight of its
// name.
func TestFairByKey(t *testing.T) {
	p := mustNew(t, 1, Options{Policy: PolicyFair, Weights: map[string]int{"x": 2}})
	first := mustGrant(t, p, Request{Slots: 1, Tenant: "a", Key: "x"})
	for range 4 {
		mustQueue(t, p, Request{Slots: 1, Tenant: "a", Key: "x"})
		mustQueue(t, p, Request{Slots: 1, Tenant: "a", Key: "y"})
		mustQueue(t, p, Request{Slots: 1, Tenant: "a"})
	}
	var order strings.Builder
	w := first
	for range 12 {
		g := p.ReleaseKey(w.Tenant, w.Key, w.Slots)
		if len(g) != 1 {
			t.Fatalf("a release granted %d", len(g))
		}
		w = g[0]
		order.WriteString(w.Key + ".")
		checkPolicy(t, p, true)
	}
	// One tenant, three shares in arrival order: x (weight 2), y, and the
	// tenant's own (key "", weight 1).
	if got, want := order.String(), "x.x.y..x.x.y..y..y.."; got != want {
		t.Errorf("grant order %q, want %q", got, want)
	}
	// The tenant's figures count every key.
	if ts := p.Tenants(); len(ts) != 1 || ts[0].Tenant != "a" || ts[0].InUse != 1 {
		t.Errorf("Tenants = %+v", ts)
	}
}

// TestKeyCapSkipsCappedKey: a key at its cap waits and blocks no other key,
// though it came first; it goes on when its own slots come back.
func TestKeyCapSkipsCappedKey(t *testing.T) {
	p := mustNew(t, 4, Options{Policy: PolicyFair, KeyCap: 2})
	if _, _, _, err := p.EnqueueRequest(Request{Slots: 3, Key: "a"}); !errors.Is(err, ErrExceedsCapacity) || !strings.Contains(err.Error(), "key cap is 2") {
		t.Errorf("request above the key cap: %v", err)
	}
	a1 := mustGrant(t, p, Request{Slots: 1, Key: "a"})
	mustGrant(t, p, Request{Slots: 1, Key: "a"})
	a3 := mustQueue(t, p, Request{Slots: 1, Key: "a"}) // at its cap: waits, 2 slots free
	if _, err := p.TryAcquireRequest(Request{Slots: 1, Key: "a"}); !errors.Is(err, ErrWouldWait) {
		t.Errorf("TryAcquireRequest of a key at its cap = %v", err)
	}
	b1 := mustGrant(t, p, Request{Slots: 1, Key: "b"}) // a's waiter does not hold b up
	mustGrant(t, p, Request{Slots: 1, Key: "b"})
	b3 := mustQueue(t, p, Request{Slots: 1, Key: "b"})
	if s := p.Stats(); s.InUse != 4 || s.QueuedRequests != 2 || s.KeyCap != 2 {
		t.Errorf("Stats = %+v", s)
	}
	checkPolicy(t, p, true)
	// b's release: a slot free, a's waiter still capped, b's goes.
	if g := p.ReleaseKey("", "b", b1.Slots); len(g) != 1 || g[0] != b3 {
		t.Errorf("release by b granted %q, want b's next", keysOf(g))
	}
	if g := p.ReleaseKey("", "a", a1.Slots); len(g) != 1 || g[0] != a3 {
		t.Errorf("release by a granted %q, want a's next", keysOf(g))
	}
	checkPolicy(t, p, true)

	// Without a key, the cap is the tenant's.
	p = mustNew(t, 4, Options{Policy: PolicyFair, KeyCap: 1})
	mustGrant(t, p, Request{Slots: 1, Tenant: "t"})
	mustQueue(t, p, Request{Slots: 1, Tenant: "t"})
	mustGrant(t, p, Request{Slots: 1, Tenant: "t", Key: "k"})
	mustGrant(t, p, Request{Slots: 1, Tenant: "u"})
}

// TestQuantum: a turn's credit is weight × quantum, so with quantum 3 each
// key is served three 1-slot requests in a row.
func TestQuantum(t *testing.T) {
	for _, c := range []struct {
		quantum int64
		want    string
	}{
		{1, "ababababab"},
		{3, "aaabbbaabb"},
	} {
		p := mustNew(t, 1, Options{Policy: PolicyFair, Quantum: c.quantum})
		w := mustGrant(t, p, Request{Slots: 1, Key: "z"})
		for range 5 {
			mustQueue(t, p, Request{Slots: 1, Key: "a"})
		}
		for range 5 {
			mustQueue(t, p, Request{Slots: 1, Key: "b"})
		}
		var order strings.Builder
		for range 10 {
			g := p.ReleaseKey(w.Tenant, w.Key, w.Slots)
			w = g[0]
			order.WriteString(w.Key)
		}
		if got := order.String(); got != c.want {
			t.Errorf("quantum %d: grant order %q, want %q", c.quantum, got, c.want)
		}
		checkPolicy(t, p, true)
	}
}

// TestStarvationAge: a key's turn does not hold back an older ready
// request of another key once it has waited StarvationAge: that request
// goes next, whatever its key's credit.
func TestStarvationAge(t *testing.T) {
	run := func(age time.Duration) string {
		clock := newClock()
		p := mustNew(t, 1, Options{Policy: PolicyFair, Quantum: 4, StarvationAge: age, Now: clock.Now})
		w := mustGrant(t, p, Request{Slots: 1, Key: "z"})
		mustQueue(t, p, Request{Slots: 1, Key: "a"}) // t=0
		clock.Advance(time.Second)
		mustQueue(t, p, Request{Slots: 1, Key: "b"}) // t=1: b's turn comes after a's
		clock.Advance(time.Second)
		for range 4 {
			mustQueue(t, p, Request{Slots: 1, Key: "a"}) // t=2: younger than b's
		}
		var order strings.Builder
		for range 6 {
			clock.Advance(time.Second)
			g := p.ReleaseKey(w.Tenant, w.Key, w.Slots)
			if len(g) != 1 {
				t.Fatalf("a release granted %d", len(g))
			}
			w = g[0]
			order.WriteString(w.Key)
			checkPolicy(t, p, true)
		}
		return order.String()
	}
	// Without an age, a's turn of 4 goes first.
	if got, want := run(0), "aaaaba"; got != want {
		t.Errorf("no starvation age: grant order %q, want %q", got, want)
	}
	// With 1.5 s, at the second grant (t=4) b's head has waited 3 s and is
	// older than a's: it is promoted in a's turn.
	if got, want := run(1500*time.Millisecond), "abaaaa"; got != want {
		t.Errorf("starvation age 1.5s: grant order %q, want %q", got, want)
	}
	// With 10 s nobody has waited long enough: as without.
	if got, want := run(10*time.Second), "aaaaba"; got != want {
		t.Errorf("starvation age 10s: grant order %q, want %q", got, want)
	}
}

// TestScheduler: a fair pool's scheduler view shows its settings and each
// share's weight, credit, slots and queue, ready or held back by a cap.
func TestScheduler(t *testing.T) {
	if New(1).Scheduler(10) != nil {
		t.Error("a fifo pool has a scheduler view")
	}
	clock := newClock()
	p := mustNew(t, 3, Options{Policy: PolicyFair, KeyCap: 1, Quantum: 2, StarvationAge: time.Minute,
		Weights: map[string]int{"b": 3}, Now: clock.Now})
	mustGrant(t, p, Request{Slots: 1, Tenant: "t", Key: "a"})
	mustQueue(t, p, Request{Slots: 1, Tenant: "t", Key: "a"}) // capped: a holds its 1
	mustGrant(t, p, Request{Slots: 1, Tenant: "t", Key: "b"})
	mustGrant(t, p, Request{Slots: 1, Tenant: "u"})
	clock.Advance(time.Second)
	mustQueue(t, p, Request{Slots: 1, Tenant: "v", Key: "c"}) // ready: no slot free
	clock.Advance(1500 * time.Millisecond)
	got := p.Scheduler(10)
	// Three grants on arrival; a's second request was deferred by its cap.
	want := SchedulerStats{Strategy: "deficit_round_robin", Quantum: 2, StarvationAgeMs: 60000, Selected: 3, Deferred: 1, Keys: []KeyStats{
		{Tenant: "t", Key: "a", Weight: 1, InUse: 1, Queued: 1, QueuedSlots: 1, Capped: true, Selected: 1, Deferred: 1},
		{Tenant: "t", Key: "b", Weight: 3, InUse: 1, Selected: 1},
		{Tenant: "u", Key: "", Weight: 1, InUse: 1, Selected: 1},
		{Tenant: "v", Key: "c", Weight: 1, Deficit: 2, Queued: 1, QueuedSlots: 1, Ready: 1, OldestReadyAgeMs: 1500},
	}}
	if got == nil || fmt.Sprintf("%+v", *got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("Scheduler =\n%+v\nwant\n%+v", got, want)
	}
	if s := p.Scheduler(1); len(s.Keys) != 1 || s.MoreKeys != 3 || s.Keys[0].Key != "a" {
		t.Errorf("Scheduler(1) = %+v, want a's share and 3 more", s)
	}
}

// TestSchedulerCounts: a share is selected for each grant and deferred for
// each turn its credit cannot pay for; a request that waited the
// starvation age goes first and is counted as a promotion; a forgotten
// share's counts stay in the pool's totals.
func TestSchedulerCounts(t *testing.T) {
	clock := newClock()
	p := mustNew(t, 1, Options{Policy: PolicyFair, StarvationAge: time.Minute, Now: clock.Now})
	mustGrant(t, p, Request{Slots: 1, Key: "h"})
	mustQueue(t, p, Request{Slots: 1, Key: "b"})
	mustQueue(t, p, Request{Slots: 1, Key: "b"})
	clock.Advance(time.Second)
	mustQueue(t, p, Request{Slots: 1, Key: "a"})
	clock.Advance(time.Minute)
	b1 := p.ReleaseKey("", "h", 1) // b's turn: its first request
	if keysOf(b1) != "b" {
		t.Fatalf("granted %q, want b", keysOf(b1))
	}
	// b's credit cannot pay for its second request: its turn ends (a
	// deferral) and a's begins, but b's request waited longer than the
	// starvation age and came before a's: promoted.
	b2 := p.ReleaseKey("", "b", 1)
	if keysOf(b2) != "b" {
		t.Fatalf("granted %q, want b (promoted)", keysOf(b2))
	}
	if s := p.Scheduler(10); s.StarvationPromotions != 1 || len(s.Keys) != 2 || s.Keys[1].Key != "b" ||
		s.Keys[1].Selected != 2 || s.Keys[1].Deferred != 1 {
		t.Errorf("Scheduler = %+v; want 1 promotion, b selected twice and deferred once", s)
	}
	a := p.ReleaseKey("", "b", 1)
	if keysOf(a) != "a" {
		t.Fatalf("granted %q, want a", keysOf(a))
	}
	got := p.Scheduler(10)
	if got.Selected != 4 || got.Deferred != 1 || got.StarvationPromotions != 1 || len(got.Keys) != 1 {
		t.Fatalf("Scheduler = %+v; want 4 selected, 1 deferred, 1 promotion, only a listed", got)
	}
	if k := got.Keys[0]; k.Key != "a" || k.Selected != 1 || k.Deferred != 0 || k.Deficit != 0 {
		t.Errorf("a's share = %+v; want selected once, never deferred, its quantum spent", k)
	}
}

package pools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// enqueue is EnqueueRequest that must not fail.
func enqueue(t testing.TB, p *Pool, r Request) (w *Waiter, granted bool, position int) {
	t.Helper()
	w, granted, position, err := p.EnqueueRequest(r)
	if err != nil {
		t.Fatalf("EnqueueRequest(%+v): %v", r, err)
	}
	if w.Tenant != r.Tenant || w.Priority != r.Priority || w.Slots != r.Slots || w.Granted() != granted {
		t.Fatalf("EnqueueRequest(%+v) returned waiter %+v, granted %t", r, w, granted)
	}
	return w, granted, position
}

func mustQueue(t testing.TB, p *Pool, r Request) *Waiter {
	t.Helper()
	w, granted, _ := enqueue(t, p, r)
	if granted {
		t.Fatalf("EnqueueRequest(%+v) granted at once, want queued", r)
	}
	return w
}

func mustGrant(t testing.TB, p *Pool, r Request) *Waiter {
	t.Helper()
	w, granted, _ := enqueue(t, p, r)
	if !granted {
		t.Fatalf("EnqueueRequest(%+v) queued, want granted at once", r)
	}
	return w
}

func tenantsOf(ws []*Waiter) string {
	return joinWaiters(ws, func(w *Waiter) string { return w.Tenant })
}

// joinWaiters concatenates what name says of each waiter.
func joinWaiters(ws []*Waiter, name func(*Waiter) string) string {
	var b strings.Builder
	for _, w := range ws {
		b.WriteString(name(w))
	}
	return b.String()
}

func TestNewWithOptions(t *testing.T) {
	bad := []struct {
		capacity int64
		o        Options
		want     string
	}{
		{-1, Options{}, "capacity -1 is negative"},
		{1, Options{Policy: "lilo"}, `unknown policy "lilo" (want "fifo", "lifo", "priority" or "fair")`},
		{1, Options{OnFull: "drop_newest", MaxQueue: 2}, `unknown on full "drop_newest"`},
		{1, Options{OnFull: OnFullDropOldest}, `on full "drop_oldest" needs a max queue`},
		{1, Options{OnFull: OnFullDropOldest, FailFast: true}, `on full "drop_oldest" needs a max queue`},
		{1, Options{FailFast: true, MaxQueue: 3}, "fail fast (no queue) with max queue 3"},
		{1, Options{AgingStep: -time.Second}, "aging step -1s is negative"},
		{1, Options{Policy: PolicyFair, Weights: map[string]int{"a": 2, "b": 0}}, `weight 0 of tenant "b"`},
		{1, Options{Policy: PolicyFair, Weights: map[string]int{"a": -3}}, `weight -3 of tenant "a"`},
		{1, Options{Policy: PolicyFair, Weights: map[string]int{"a": MaxWeight + 1}}, "not in 1..1000000"},
		{1, Options{Policy: PolicyFair, DefaultWeight: -1}, "default weight -1"},
		{1, Options{Policy: PolicyFair, TenantCap: -1}, "tenant cap -1 is negative"},
		{1, Options{TenantCap: 2}, `tenant cap needs policy "fair", not "fifo"`},
		{1, Options{Policy: PolicyPriority, TenantCap: 2}, `tenant cap needs policy "fair", not "priority"`},
		{1, Options{MaxQueue: -1}, "max queue -1 is negative"},
	}
	for _, c := range bad {
		p, err := NewWithOptions(c.capacity, c.o)
		if p != nil || !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewWithOptions(%d, %+v) = %v, %v; want ErrInvalidOptions with %q", c.capacity, c.o, p, err, c.want)
		}
	}

	weights := map[string]int{"a": 3}
	p := mustNew(t, 2, Options{Policy: PolicyFair, Weights: weights, TenantCap: 1, MaxQueue: 5})
	weights["a"] = 7 // the pool keeps its own copy
	o := p.Options()
	if o.Policy != PolicyFair || o.AgingStep != DefaultAgingStep || o.DefaultWeight != 1 || o.Weights["a"] != 3 || o.TenantCap != 1 || o.MaxQueue != 5 || o.Now == nil {
		t.Errorf("Options() = %+v", o)
	}
	o.Weights["a"] = 9
	if p.Options().Weights["a"] != 3 {
		t.Error("Options() shares its Weights with the pool")
	}
	if p := mustNew(t, 2, Options{}); p.Policy() != PolicyFIFO || p.Options().AgingStep != DefaultAgingStep {
		t.Errorf("zero Options: policy %q, %+v", p.Policy(), p.Options())
	}
	if New(2).Policy() != PolicyFIFO {
		t.Error("New is not fifo")
	}
	// Weights are accepted, and ignored, under the other policies.
	if _, err := NewWithOptions(1, Options{Policy: PolicyPriority, Weights: weights}); err != nil {
		t.Error(err)
	}
}

func TestStatsAndTenants(t *testing.T) {
	p := mustNew(t, 4, Options{Policy: PolicyFair, Weights: map[string]int{"b": 2}, TenantCap: 3, MaxQueue: 10})
	b, err := json.Marshal(p.Stats())
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"capacity":4,"in_use":0,"available":4,"queued":0,"queued_slots":0,"policy":"fair","max_queue":10,"tenant_cap":3}`
	if string(b) != want {
		t.Errorf("json = %s, want %s", b, want)
	}
	if ts := p.Tenants(); len(ts) != 0 {
		t.Errorf("Tenants of an idle pool = %+v", ts)
	}

	b1 := mustGrant(t, p, Request{Slots: 3, Tenant: "b"})
	mustGrant(t, p, Request{Slots: 1})
	mustQueue(t, p, Request{Slots: 2, Tenant: "a"})
	mustQueue(t, p, Request{Slots: 1, Tenant: "b"})
	got := p.Tenants()
	wantT := []TenantStats{
		{Tenant: "", Weight: 1, InUse: 1},
		{Tenant: "a", Weight: 1, QueuedRequests: 1, QueuedSlots: 2},
		{Tenant: "b", Weight: 2, InUse: 3, QueuedRequests: 1, QueuedSlots: 1},
	}
	if !slices.Equal(got, wantT) {
		t.Errorf("Tenants = %+v, want %+v", got, wantT)
	}
	if b, _ := json.Marshal(got[1]); string(b) != `{"tenant":"a","weight":1,"in_use":0,"queued":1,"queued_slots":2}` {
		t.Errorf("tenant json = %s", b)
	}
	if g := p.ReleaseFor("b", b1.Slots); tenantsOf(g) != "ab" {
		t.Errorf("ReleaseFor(b, 3) granted tenants %q, want \"ab\"", tenantsOf(g))
	}
	checkPolicy(t, p, true)

	// Under the other policies Weight is left out; idle tenants vanish.
	p = mustNew(t, 2, Options{Policy: PolicyPriority})
	w := mustGrant(t, p, Request{Slots: 1, Tenant: "x"})
	if got := p.Tenants(); !slices.Equal(got, []TenantStats{{Tenant: "x", InUse: 1}}) {
		t.Errorf("Tenants = %+v", got)
	}
	p.ReleaseFor("x", w.Slots)
	if got := p.Tenants(); len(got) != 0 || len(p.tenants) != 0 {
		t.Errorf("Tenants after release = %+v, map %v", got, p.tenants)
	}
}

// TestPriorityOrder: higher priority first, FIFO within a priority.
func TestPriorityOrder(t *testing.T) {
	clock := newClock()
	p := mustNew(t, 1, Options{Policy: PolicyPriority, Now: clock.Now})
	hold := mustGrant(t, p, Request{Slots: 1})
	reqs := []struct {
		v    string
		prio int
		pos  int // returned by EnqueueRequest
	}{
		{"n1", 0, 1}, {"l1", -1, 2}, {"h1", 1, 1}, {"n2", 0, 3}, {"h2", 1, 2}, {"l2", -1, 6}, {"n3", 0, 5}, {"h3", 1, 3},
	}
	ws := map[string]*Waiter{}
	for _, r := range reqs {
		clock.Advance(time.Millisecond)
		w, granted, pos := enqueue(t, p, Request{Slots: 1, Priority: r.prio, Value: r.v})
		if granted || pos != r.pos {
			t.Fatalf("%s: granted %t, position %d; want queued at %d", r.v, granted, pos, r.pos)
		}
		ws[r.v] = w
	}
	want := []string{"h1", "h2", "h3", "n1", "n2", "n3", "l1", "l2"}
	for i, v := range want {
		if pos := p.Position(ws[v]); pos != i+1 {
			t.Errorf("Position(%s) = %d, want %d", v, pos, i+1)
		}
	}
	checkPolicy(t, p, true)
	var got []string
	g := p.Release(hold.Slots)
	for len(g) > 0 {
		got = append(got, g[0].Value.(string))
		g = p.ReleaseFor(g[0].Tenant, g[0].Slots)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("grant order %v, want %v", got, want)
	}
	wantStats(t, p, Stats{Capacity: 1, Available: 1, Policy: PolicyPriority})
}

// TestPriorityAging: a request gains one priority level per AgingStep
// waited, so it goes before a request k levels higher that arrives k steps
// or more after it, and after one that arrives sooner.
func TestPriorityAging(t *testing.T) {
	for _, c := range []struct {
		later time.Duration // when the high request arrives after the low one
		prio  int
		first string
	}{
		{19 * time.Second, 1, "high"},
		{20 * time.Second, 1, "low"}, // same virtual time: arrival order
		{21 * time.Second, 1, "low"},
		{29 * time.Second, 2, "high"},
		{31 * time.Second, 2, "low"},
		{9 * time.Second, 0, "high"},
		{11 * time.Second, 0, "low"},
		{1000 * time.Hour, 1 << 40, "high"}, // clamped, still above
	} {
		clock := newClock()
		p := mustNew(t, 1, Options{Policy: PolicyPriority, AgingStep: 10 * time.Second, Now: clock.Now})
		hold := mustGrant(t, p, Request{Slots: 1})
		mustQueue(t, p, Request{Slots: 1, Priority: -1, Value: "low"})
		clock.Advance(c.later)
		mustQueue(t, p, Request{Slots: 1, Priority: c.prio, Value: "high"})
		g := p.Release(hold.Slots)
		if len(g) != 1 || g[0].Value != c.first {
			t.Errorf("priority %d arriving %v after a low one: granted %v, want %s", c.prio, c.later, values(g), c.first)
		}
	}
}

// TestPriorityAgingPromotes: a low-priority request behind a steady stream
// of high-priority ones is served once it has waited out the difference.
func TestPriorityAgingPromotes(t *testing.T) {
	clock := newClock()
	p := mustNew(t, 1, Options{Policy: PolicyPriority, AgingStep: 10 * time.Second, Now: clock.Now})
	hold := mustGrant(t, p, Request{Slots: 1})
	low := mustQueue(t, p, Request{Slots: 1, Priority: -1, Value: "low"})
	arrived := map[*Waiter]time.Duration{}
	var since time.Duration
	held := hold
	for i := range 100 {
		clock.Advance(time.Second)
		since += time.Second
		arrived[mustQueue(t, p, Request{Slots: 1, Priority: 1})] = since
		g := p.ReleaseFor(held.Tenant, held.Slots)
		if len(g) != 1 {
			t.Fatalf("round %d: granted %d", i, len(g))
		}
		held = g[0]
		if held == low {
			t.Logf("low granted after %v, in round %d", since, i)
			// It went before every high request that arrived 20s or more
			// after it.
			for w, at := range arrived {
				if at >= 20*time.Second && w.Granted() {
					t.Errorf("high request from %v granted before low", at)
				}
			}
			return
		}
	}
	t.Fatal("low-priority request starved")
}

// TestPriorityJumpsBlockedHead: a newcomer of higher priority than the
// blocked head goes first, and is granted at once if it fits; one of the
// same priority waits behind it.
func TestPriorityJumpsBlockedHead(t *testing.T) {
	p := mustNew(t, 4, Options{Policy: PolicyPriority})
	mustGrant(t, p, Request{Slots: 2})
	big := mustQueue(t, p, Request{Slots: 3})
	if _, err := p.TryAcquireRequest(Request{Slots: 1}); !errors.Is(err, ErrWouldWait) {
		t.Errorf("TryAcquireRequest of priority 0 behind a blocked head = %v, want ErrWouldWait", err)
	}
	mustGrant(t, p, Request{Slots: 1, Priority: 1})
	if w, err := p.TryAcquireRequest(Request{Slots: 1, Priority: 1}); err != nil || !w.Granted() {
		t.Errorf("TryAcquireRequest of priority 1 that fits = %v, %v", w, err)
	}
	hi := mustQueue(t, p, Request{Slots: 1, Priority: 1}) // full now
	if pos := p.Position(hi); pos != 1 || p.Position(big) != 2 {
		t.Errorf("positions high %d, big %d; want 1, 2", pos, p.Position(big))
	}
	checkPolicy(t, p, true)
}

// drain releases the held waiters and then each granted waiter in turn,
// one at a time, until n grants, returning the grants in order: the pool's
// service order, since the next waiter blocks until it fits.
func drain(p *Pool, n int, held ...*Waiter) []*Waiter {
	var out []*Waiter
	queue := held
	for len(queue) > 0 && len(out) < n {
		w := queue[0]
		queue = queue[1:]
		g := p.ReleaseFor(w.Tenant, w.Slots)
		out = append(out, g...)
		queue = append(queue, g...)
	}
	return out
}

// TestFairRatio: with every tenant backlogged, 1-slot requests and one slot
// released at a time, grants follow the weights.
func TestFairRatio(t *testing.T) {
	for _, c := range []struct {
		weights map[string]int
		queued  int // per tenant
		grants  int
	}{
		{map[string]int{"a": 3, "b": 1}, 300, 400},
		{map[string]int{"a": 1, "b": 1}, 300, 400},
		{map[string]int{"a": 5, "b": 3, "c": 2}, 600, 1000},
		{map[string]int{"a": 3, "b": 2, "c": 1}, 600, 1000},
	} {
		t.Run(fmt.Sprint(c.weights), func(t *testing.T) {
			p := mustNew(t, 1, Options{Policy: PolicyFair, Weights: c.weights})
			hold := mustGrant(t, p, Request{Slots: 1, Tenant: "holder"})
			names := slices.Sorted(func(yield func(string) bool) {
				for n := range c.weights {
					if !yield(n) {
						return
					}
				}
			})
			for range c.queued {
				for _, n := range names {
					mustQueue(t, p, Request{Slots: 1, Tenant: n})
				}
			}
			g := drain(p, c.grants, hold)
			if len(g) < c.grants {
				t.Fatalf("drained %d grants, want %d", len(g), c.grants)
			}
			g = g[:c.grants]
			count := map[string]int{}
			for _, w := range g {
				count[w.Tenant]++
			}
			var total int
			for _, w := range c.weights {
				total += w
			}
			for _, n := range names {
				want := float64(c.grants) * float64(c.weights[n]) / float64(total)
				if got := float64(count[n]); got < 0.9*want || got > 1.1*want {
					t.Errorf("tenant %s (weight %d): %d of %d grants, want %.0f ±10%%", n, c.weights[n], count[n], c.grants, want)
				}
			}
			t.Logf("grants %v; first 12: %s", count, tenantsOf(g[:12]))
			checkPolicy(t, p, true)
		})
	}
}

// TestFairNewTenantNextRound: a tenant that becomes active mid-drain is
// served before any other tenant gets more than its per-round share again.
func TestFairNewTenantNextRound(t *testing.T) {
	weights := map[string]int{"a": 3, "b": 1}
	for after := range 12 { // grants before c arrives: every point of a round
		p := mustNew(t, 1, Options{Policy: PolicyFair, Weights: weights})
		hold := mustGrant(t, p, Request{Slots: 1, Tenant: "holder"})
		for range 100 {
			mustQueue(t, p, Request{Slots: 1, Tenant: "a"})
			mustQueue(t, p, Request{Slots: 1, Tenant: "b"})
		}
		held := hold
		for range after {
			held = p.ReleaseFor(held.Tenant, held.Slots)[0]
		}
		c := mustQueue(t, p, Request{Slots: 1, Tenant: "c"})
		mustQueue(t, p, Request{Slots: 1, Tenant: "c"})
		pos := p.Position(c)
		count := map[string]int{}
		var order []*Waiter
		for !c.Granted() {
			held = p.ReleaseFor(held.Tenant, held.Slots)[0]
			order = append(order, held)
			count[held.Tenant]++
			if count["a"] > weights["a"] || count["b"] > weights["b"] {
				t.Fatalf("after %d grants: c waited while others got %v (order %s)", after, count, tenantsOf(order))
			}
		}
		if pos != len(order) {
			t.Errorf("after %d grants: c's position was %d, granted %d-th (%s)", after, pos, len(order), tenantsOf(order))
		}
	}
}

// TestFairTenantCap: a tenant at its cap is passed over, and waits for its
// own releases without holding up others.
func TestFairTenantCap(t *testing.T) {
	p := mustNew(t, 10, Options{Policy: PolicyFair, TenantCap: 2})
	if _, _, _, err := p.EnqueueRequest(Request{Slots: 3, Tenant: "a"}); !errors.Is(err, ErrExceedsCapacity) || !strings.Contains(err.Error(), "tenant cap is 2") {
		t.Errorf("request above the cap: %v", err)
	}
	a1 := mustGrant(t, p, Request{Slots: 1, Tenant: "a"})
	mustGrant(t, p, Request{Slots: 1, Tenant: "a"})
	a3 := mustQueue(t, p, Request{Slots: 1, Tenant: "a"})
	if _, err := p.TryAcquireRequest(Request{Slots: 1, Tenant: "a"}); !errors.Is(err, ErrWouldWait) {
		t.Errorf("TryAcquireRequest at the cap = %v", err)
	}
	mustQueue(t, p, Request{Slots: 1, Tenant: "a"})
	b1 := mustGrant(t, p, Request{Slots: 2, Tenant: "b"}) // a's queue does not hold b up
	b2 := mustQueue(t, p, Request{Slots: 2, Tenant: "b"})
	mustGrant(t, p, Request{Slots: 1, Tenant: "c"})
	want := []TenantStats{
		{Tenant: "a", Weight: 1, InUse: 2, QueuedRequests: 2, QueuedSlots: 2},
		{Tenant: "b", Weight: 1, InUse: 2, QueuedRequests: 1, QueuedSlots: 2},
		{Tenant: "c", Weight: 1, InUse: 1},
	}
	if got := p.Tenants(); !slices.Equal(got, want) {
		t.Errorf("Tenants = %+v, want %+v", got, want)
	}
	checkPolicy(t, p, true)

	if g := p.ReleaseFor("a", a1.Slots); len(g) != 1 || g[0] != a3 {
		t.Errorf("release by a granted %v, want a's next", tenantsOf(g))
	}
	if g := p.ReleaseFor("b", b1.Slots); len(g) != 1 || g[0] != b2 {
		t.Errorf("release by b granted %v, want b's next", tenantsOf(g))
	}
	checkPolicy(t, p, true)

	// A capped tenant's request does not block others that fit, even when
	// capacity is short.
	p = mustNew(t, 3, Options{Policy: PolicyFair, TenantCap: 2})
	mustGrant(t, p, Request{Slots: 2, Tenant: "a"})
	mustQueue(t, p, Request{Slots: 1, Tenant: "a"})
	x := mustGrant(t, p, Request{Slots: 1, Tenant: "b"})
	y := mustQueue(t, p, Request{Slots: 1, Tenant: "b"})
	if g := p.ReleaseFor("b", x.Slots); len(g) != 1 || g[0] != y {
		t.Errorf("release by b granted %q, want b's next", tenantsOf(g))
	}
	checkPolicy(t, p, true)
}

// TestFairRestoreOverCap: RestoreFor may take a tenant over its cap; it is
// then passed over until it is back under.
func TestFairRestoreOverCap(t *testing.T) {
	p := mustNew(t, 10, Options{Policy: PolicyFair, TenantCap: 2})
	p.RestoreFor("a", 3)
	a := mustQueue(t, p, Request{Slots: 1, Tenant: "a"})
	mustGrant(t, p, Request{Slots: 1, Tenant: "b"})
	if g := p.ReleaseFor("a", 1); g != nil {
		t.Errorf("a at its cap was granted %v", values(g))
	}
	if g := p.ReleaseFor("a", 1); len(g) != 1 || g[0] != a {
		t.Errorf("a under its cap: granted %v", values(g))
	}
	checkPolicy(t, p, true)

	// Capping the tenant whose request was next lets a smaller one fit;
	// RestoreFor cannot return it, the next release does.
	p = mustNew(t, 10, Options{Policy: PolicyFair, TenantCap: 3})
	mustGrant(t, p, Request{Slots: 3, Tenant: "b"})
	mustGrant(t, p, Request{Slots: 3, Tenant: "d"})
	mustGrant(t, p, Request{Slots: 2, Tenant: "e"})
	mustQueue(t, p, Request{Slots: 3, Tenant: "a"})
	c := mustQueue(t, p, Request{Slots: 1, Tenant: "c"})
	p.RestoreFor("a", 1)
	checkPolicy(t, p, false)
	if g := p.ReleaseFor("b", 0); len(g) != 1 || g[0] != c {
		t.Errorf("ReleaseFor(b, 0) after the restore granted %v, want c", values(g))
	}
	checkPolicy(t, p, true)
}

// TestFairLargeRequests: requests far above the quanta are served in the
// right proportion, and quickly (rounds are skipped, not played).
func TestFairLargeRequests(t *testing.T) {
	const big = 1 << 40
	p := mustNew(t, big, Options{Policy: PolicyFair, Weights: map[string]int{"a": 2}})
	hold := mustGrant(t, p, Request{Slots: big, Tenant: "h"})
	for range 50 {
		mustQueue(t, p, Request{Slots: big, Tenant: "a"})
		mustQueue(t, p, Request{Slots: big / 2, Tenant: "b"})
	}
	start := time.Now()
	g := drain(p, 60, hold)
	// Per round a is credited 2 and b 1: in slots, a gets twice b's share,
	// and b's requests are half the size, so they alternate.
	if s := tenantsOf(g[:20]); s != strings.Repeat("ab", 10) && s != strings.Repeat("ba", 10) {
		t.Errorf("grant order %s", s)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("drain took %v", d)
	}
}

func TestReleaseForPanics(t *testing.T) {
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		f()
	}
	p := mustNew(t, 4, Options{Policy: PolicyFair})
	mustGrant(t, p, Request{Slots: 2, Tenant: "a"})
	mustPanic("ReleaseFor of a tenant holding nothing", func() { p.ReleaseFor("b", 1) })
	mustPanic("Release of tenant \"\" holding nothing", func() { p.Release(1) })
	mustPanic("ReleaseFor more than the tenant holds", func() { p.ReleaseFor("a", 3) })
	mustPanic("RestoreFor(-1)", func() { p.RestoreFor("a", -1) })
	if g := p.ReleaseFor("b", 0); g != nil {
		t.Errorf("ReleaseFor(b, 0) = %v", g)
	}
	checkPolicy(t, p, true)
	if got := p.Tenants(); len(got) != 1 || got[0].Tenant != "a" {
		t.Errorf("Tenants = %+v", got)
	}
}

// TestQueueFull: ErrQueueFull exactly when MaxQueue requests are queued
// and the new one cannot be granted at once.
func TestQueueFull(t *testing.T) {
	for _, pol := range policies {
		t.Run(string(pol), func(t *testing.T) {
			p := mustNew(t, 4, Options{Policy: pol, MaxQueue: 2})
			hold := mustGrant(t, p, Request{Slots: 4, Tenant: "a"})
			q1 := mustQueue(t, p, Request{Slots: 1, Tenant: "a"})
			mustQueue(t, p, Request{Slots: 2, Tenant: "b"})
			_, _, _, err := p.EnqueueRequest(Request{Slots: 1, Tenant: "c"})
			if !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "2 requests queued, max_queue is 2") {
				t.Fatalf("third request: %v, want ErrQueueFull", err)
			}
			if err := p.Acquire(bounded(t), 1); !errors.Is(err, ErrQueueFull) {
				t.Errorf("Acquire on a full queue = %v", err)
			}
			if _, err := p.TryAcquireRequest(Request{Slots: 1, Tenant: "c"}); !errors.Is(err, ErrWouldWait) {
				t.Errorf("TryAcquireRequest on a full queue = %v, want ErrWouldWait", err)
			}
			if s := p.Stats(); s.QueuedRequests != 2 || s.MaxQueue != 2 {
				t.Errorf("Stats = %+v", s)
			}
			if removed, _ := p.Cancel(q1); !removed {
				t.Fatal("Cancel failed")
			}
			mustQueue(t, p, Request{Slots: 1, Tenant: "c"})
			if _, _, _, err := p.EnqueueRequest(Request{Slots: 1}); !errors.Is(err, ErrQueueFull) {
				t.Errorf("after cancel and refill: %v, want ErrQueueFull", err)
			}
			if g := p.ReleaseFor("a", hold.Slots); len(g) != 2 {
				t.Errorf("release granted %d, want 2", len(g))
			}
			wantStats(t, p, Stats{Capacity: 4, InUse: 3, Available: 1, MaxQueue: 2, Policy: p.Stats().Policy})
			checkPolicy(t, p, true)
		})
	}

	// A full queue does not refuse a request that is granted at once.
	p := mustNew(t, 4, Options{Policy: PolicyPriority, MaxQueue: 1})
	mustGrant(t, p, Request{Slots: 2})
	mustQueue(t, p, Request{Slots: 3})
	if _, _, _, err := p.EnqueueRequest(Request{Slots: 1}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("priority, same priority: %v, want ErrQueueFull", err)
	}
	mustGrant(t, p, Request{Slots: 1, Priority: 1})

	p = mustNew(t, 4, Options{Policy: PolicyFair, TenantCap: 2, MaxQueue: 1})
	mustGrant(t, p, Request{Slots: 2, Tenant: "a"})
	mustQueue(t, p, Request{Slots: 1, Tenant: "a"}) // capped
	if _, _, _, err := p.EnqueueRequest(Request{Slots: 1, Tenant: "a"}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("fair, capped tenant: %v, want ErrQueueFull", err)
	}
	mustGrant(t, p, Request{Slots: 1, Tenant: "b"})
}

// TestTryAcquireRequest: it grants exactly when EnqueueRequest would grant
// at once (TestRandomPolicies checks this against the model at random).
func TestTryAcquireRequest(t *testing.T) {
	for _, pol := range policies {
		t.Run(string(pol), func(t *testing.T) {
			p := mustNew(t, 4, Options{Policy: pol})
			if _, err := p.TryAcquireRequest(Request{Slots: 0}); !errors.Is(err, ErrInvalidSlots) {
				t.Errorf("0 slots: %v", err)
			}
			if _, err := p.TryAcquireRequest(Request{Slots: 5}); !errors.Is(err, ErrExceedsCapacity) {
				t.Errorf("5 slots: %v", err)
			}
			w, err := p.TryAcquireRequest(Request{Slots: 3, Tenant: "a", Value: "v"})
			if err != nil || !w.Granted() || w.Tenant != "a" || w.Value != "v" || w.Slots != 3 {
				t.Fatalf("TryAcquireRequest on an empty pool = %+v, %v", w, err)
			}
			if _, err := p.TryAcquireRequest(Request{Slots: 2, Tenant: "b"}); !errors.Is(err, ErrWouldWait) || !strings.Contains(err.Error(), "2 slots requested, 1 free, 0 requests queued") {
				t.Errorf("not enough free: %v", err)
			}
			mustQueue(t, p, Request{Slots: 2, Tenant: "b"})
			// One slot is free, but a request is waiting: under every
			// policy the waiting one goes first.
			if _, err := p.TryAcquireRequest(Request{Slots: 1, Tenant: "c"}); !errors.Is(err, ErrWouldWait) {
				t.Errorf("behind a waiting request: %v", err)
			}
			if s := p.Stats(); s.QueuedRequests != 1 || s.InUse != 3 {
				t.Errorf("TryAcquireRequest changed the pool: %+v", s)
			}
			checkPolicy(t, p, true)
		})
	}
}

// TestMultiSlotNotStarved: under every policy a 3-slot request in a
// capacity-4 pool is granted despite a steady stream of 1-slot requests
// from others, since the next request in service order blocks until it
// fits.
func TestMultiSlotNotStarved(t *testing.T) {
	for _, pol := range policies {
		t.Run(string(pol), func(t *testing.T) {
			clock := newClock()
			p := mustNew(t, 4, Options{Policy: pol, Now: clock.Now})
			var held []*Waiter
			for range 4 {
				held = append(held, mustGrant(t, p, Request{Slots: 1, Tenant: "small"}))
			}
			big := mustQueue(t, p, Request{Slots: 3, Tenant: "big"})
			for i := range 50 {
				clock.Advance(time.Second)
				mustQueue(t, p, Request{Slots: 1, Tenant: "small"})
				w := held[0]
				held = append(held[1:], p.ReleaseFor(w.Tenant, w.Slots)...)
				if big.Granted() {
					t.Logf("granted after %d releases", i+1)
					checkPolicy(t, p, true)
					return
				}
			}
			t.Fatal("3-slot request starved")
		})
	}

	// Under priority, against a stream of higher priority, aging gets it
	// through.
	clock := newClock()
	p := mustNew(t, 4, Options{Policy: PolicyPriority, AgingStep: 10 * time.Second, Now: clock.Now})
	var held []*Waiter
	for range 4 {
		held = append(held, mustGrant(t, p, Request{Slots: 1, Priority: 1}))
	}
	big := mustQueue(t, p, Request{Slots: 3, Priority: -1})
	for i := range 100 {
		clock.Advance(time.Second)
		mustQueue(t, p, Request{Slots: 1, Priority: 1})
		w := held[0]
		held = append(held[1:], p.ReleaseFor(w.Tenant, w.Slots)...)
		if big.Granted() {
			t.Logf("priority -1 against priority 1: granted after %d releases", i+1)
			return
		}
	}
	t.Fatal("low-priority 3-slot request starved")
}

// TestPositionMatchesGrantOrder: with nothing else arriving, waiters are
// granted in the order of their positions.
func TestPositionMatchesGrantOrder(t *testing.T) {
	sizes := map[string]int64{"": 1, "a": 2, "b": 1, "c": 3}
	names := []string{"", "a", "b", "c"}
	for _, pol := range policies {
		t.Run(string(pol), func(t *testing.T) {
			for seed := range uint64(10) {
				r := rand.New(rand.NewPCG(seed, 9))
				clock := newClock()
				p := mustNew(t, 4, Options{Policy: pol, Now: clock.Now, Weights: map[string]int{"a": 2, "c": 3}})
				hold := mustGrant(t, p, Request{Slots: 4, Tenant: "h"})
				// A little traffic first, so the fair round is under way.
				for range 5 {
					tn := names[r.IntN(len(names))]
					mustQueue(t, p, Request{Slots: sizes[tn], Tenant: tn})
				}
				held := drain(p, 1, hold)
				var ws []*Waiter
				for range 60 {
					clock.Advance(time.Duration(r.IntN(3000)) * time.Millisecond)
					tn := names[r.IntN(len(names))]
					w, granted, _ := enqueue(t, p, Request{Slots: sizes[tn], Tenant: tn, Priority: r.IntN(3) - 1})
					if granted { // priority: ahead of the blocked head, and fits
						held = append(held, w)
						continue
					}
					ws = append(ws, w)
				}
				queued := p.Stats().QueuedRequests
				byPos := make([]*Waiter, queued+1)
				for _, w := range ws {
					pos := p.Position(w)
					if pos < 1 || pos > queued || byPos[pos] != nil {
						t.Fatalf("seed %d: position %d out of range or taken", seed, pos)
					}
					byPos[pos] = w
				}
				g := drain(p, queued+len(held), held...)
				// Those queued before ws are not in byPos.
				var order []*Waiter
				for _, w := range g {
					if slices.Contains(ws, w) {
						order = append(order, w)
					}
				}
				var want []*Waiter
				for _, w := range byPos[1:] {
					if w != nil {
						want = append(want, w)
					}
				}
				if !sameWaiters(order, want) {
					t.Fatalf("seed %d: grant order differs from positions", seed)
				}
			}
		})
	}
}

type stressConfig struct {
	opts      Options
	capacity  int64
	maxSlots  int64
	tenants   []string
	serialize bool
}

// runStress has many goroutines enqueue requests, wait for their grant
// with a short random deadline, cancel on expiry, hold a moment and release
// with ReleaseFor. Grants returned by any call are handed to the waiting
// goroutine through its Value, a channel.
//
// With serialize, each pool call that grants or releases runs under the
// test's mutex together with the test's own bookkeeping of slots granted
// and not released per tenant, which therefore mirrors the pool exactly;
// it is checked against the capacity, the tenant cap and Tenants after
// every such call. Without it the pool's mutex is contended for real, and
// the holders check lower bounds: slots counted between grant and release.
// Either way nothing may be left in use or queued at the end.
func runStress(t *testing.T, cfg stressConfig) {
	const goroutines = 32
	loops := 100
	if testing.Short() {
		loops = 40
	}
	p := mustNew(t, cfg.capacity, cfg.opts)
	tcap := cfg.opts.TenantCap
	if tcap > 0 {
		cfg.maxSlots = min(cfg.maxSlots, tcap)
	}

	var tm sync.Mutex
	exact := map[string]int64{} // serialize only, under tm
	var total int64
	lock := func() {
		if cfg.serialize {
			tm.Lock()
		}
	}
	unlock := func() {
		if cfg.serialize {
			tm.Unlock()
		}
	}
	checkExact := func() { // tm held
		if total > cfg.capacity {
			t.Errorf("%d slots granted and not released, capacity %d", total, cfg.capacity)
		}
		seen := 0
		for _, ts := range p.Tenants() {
			if exact[ts.Tenant] != ts.InUse {
				t.Errorf("tenant %q: pool says %d in use, test counted %d", ts.Tenant, ts.InUse, exact[ts.Tenant])
			}
			if ts.InUse > 0 {
				seen++
			}
		}
		for tn, n := range exact {
			if tcap > 0 && n > tcap {
				t.Errorf("tenant %q holds %d slots, cap %d", tn, n, tcap)
			}
			if n > 0 {
				seen--
			}
		}
		if seen != 0 {
			t.Errorf("tenants holding slots differ: pool %+v, test %v", p.Tenants(), exact)
		}
	}
	// account books and hands over the grants a pool call returned; with
	// serialize it runs under tm, right after the call.
	account := func(ws []*Waiter) {
		for _, w := range ws {
			if cfg.serialize {
				exact[w.Tenant] += w.Slots
				total += w.Slots
			}
			close(w.Value.(chan struct{}))
		}
		if cfg.serialize {
			checkExact()
		}
	}

	var held atomic.Int64
	perTenant := map[string]*atomic.Int64{}
	for _, tn := range cfg.tenants {
		perTenant[tn] = new(atomic.Int64)
	}
	var granted, cancelled, full atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for range loops {
				tn := cfg.tenants[r.IntN(len(cfg.tenants))]
				ready := make(chan struct{})
				req := Request{Slots: 1 + r.Int64N(cfg.maxSlots), Tenant: tn, Priority: r.IntN(3) - 1, Value: ready}
				lock()
				w, ok, _, err := p.EnqueueRequest(req)
				if ok {
					account([]*Waiter{w})
				}
				unlock()
				if errors.Is(err, ErrQueueFull) {
					full.Add(1)
					runtime.Gosched()
					continue
				}
				if err != nil {
					t.Errorf("EnqueueRequest(%+v): %v", req, err)
					return
				}
				if !ok {
					if pos := p.Position(w); pos < 0 {
						t.Errorf("Position = %d", pos)
					}
					timer := time.NewTimer(time.Duration(r.IntN(2000)) * time.Microsecond)
					select {
					case <-ready:
					case <-timer.C:
						lock()
						removed, gs := p.Cancel(w)
						account(gs)
						unlock()
						if removed {
							cancelled.Add(1)
							continue
						}
						<-ready // granted meanwhile: the grantor hands it over
					}
					timer.Stop()
				}
				granted.Add(1)
				if h := held.Add(w.Slots); h > cfg.capacity {
					t.Errorf("%d slots held, capacity %d", h, cfg.capacity)
				}
				if h := perTenant[tn].Add(w.Slots); tcap > 0 && h > tcap {
					t.Errorf("tenant %q holds %d slots, cap %d", tn, h, tcap)
				}
				if s := p.Stats(); s.InUse > cfg.capacity {
					t.Errorf("Stats: %d in use, capacity %d", s.InUse, cfg.capacity)
				}
				for _, ts := range p.Tenants() {
					if tcap > 0 && ts.InUse > tcap {
						t.Errorf("Tenants: %q holds %d, cap %d", ts.Tenant, ts.InUse, tcap)
					}
				}
				if r.IntN(2) == 0 {
					runtime.Gosched()
				}
				held.Add(-w.Slots)
				perTenant[tn].Add(-w.Slots)
				lock()
				if cfg.serialize {
					exact[tn] -= w.Slots
					total -= w.Slots
				}
				account(p.ReleaseFor(tn, w.Slots))
				unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("granted %d, cancelled %d, queue full %d", granted.Load(), cancelled.Load(), full.Load())
	if granted.Load() == 0 {
		t.Error("nothing was ever granted")
	}
	if s := p.Stats(); s.InUse != 0 || s.QueuedRequests != 0 || s.QueuedSlots != 0 {
		t.Errorf("left over: %+v", s)
	}
	if ts := p.Tenants(); len(ts) != 0 {
		t.Errorf("tenants left over: %+v", ts)
	}
	checkPolicy(t, p, true)
}

// TestStressPolicies: under every policy, with many goroutines using
// EnqueueRequest, Cancel and ReleaseFor, the slots held never exceed the
// capacity nor a tenant's cap, and nothing is lost.
func TestStressPolicies(t *testing.T) {
	tenants := []string{"", "a", "b", "c"}
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"fifo", Options{}},
		{"priority", Options{Policy: PolicyPriority, AgingStep: time.Millisecond}},
		{"fair", Options{Policy: PolicyFair, Weights: map[string]int{"a": 3, "b": 2}}},
		{"fair/cap", Options{Policy: PolicyFair, Weights: map[string]int{"a": 3}, TenantCap: 3}},
		{"fair/cap/maxqueue", Options{Policy: PolicyFair, TenantCap: 2, MaxQueue: 8}},
		{"priority/maxqueue", Options{Policy: PolicyPriority, MaxQueue: 8}},
	} {
		for _, serialize := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/serialize=%t", c.name, serialize), func(t *testing.T) {
				t.Parallel()
				runStress(t, stressConfig{opts: c.o, capacity: 8, maxSlots: 3, tenants: tenants, serialize: serialize})
			})
		}
	}
}

// TestAcquireStressPolicies is TestStress under every policy: Acquire with
// random deadlines, racing grants against cancellations.
func TestAcquireStressPolicies(t *testing.T) {
	for _, pol := range policies {
		t.Run(string(pol), func(t *testing.T) {
			t.Parallel()
			const capacity = 6
			p := mustNew(t, capacity, Options{Policy: pol, MaxQueue: 40})
			loops := 100
			if testing.Short() {
				loops = 40
			}
			var held, granted atomic.Int64
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 5))
					for range loops {
						n := 1 + r.Int64N(capacity)
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(2000))*time.Microsecond)
						err := p.Acquire(ctx, n)
						cancel()
						if err != nil {
							if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrQueueFull) {
								t.Errorf("Acquire(%d) = %v", n, err)
								return
							}
							continue
						}
						granted.Add(1)
						if h := held.Add(n); h > capacity {
							t.Errorf("%d slots held, capacity %d", h, capacity)
						}
						runtime.Gosched()
						held.Add(-n)
						p.Release(n)
					}
				})
			}
			wg.Wait()
			if granted.Load() == 0 {
				t.Error("nothing was ever granted")
			}
			if s := p.Stats(); s.InUse != 0 || s.QueuedRequests != 0 {
				t.Errorf("left over: %+v", s)
			}
			checkPolicy(t, p, true)
		})
	}
}

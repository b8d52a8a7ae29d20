package pools

import (
	"errors"
	"testing"
	"time"
)

// shadowGrant admits r into p and fails unless p grants it at once, as a
// shadow pool grants everything it could ever grant; it returns the
// waiter's Shadow.
func shadowGrant(t *testing.T, p *Pool, r Request) Shadowed {
	t.Helper()
	a, err := p.Admit(r)
	if err != nil || !a.Granted || a.Dropped != nil {
		t.Fatalf("Admit(%+v) = %+v, %v; want granted at once, nobody dropped", r, a, err)
	}
	return a.Waiter.Shadow
}

func TestShadowCountsWhatEachLimitWouldHaveDone(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	one := Request{Slots: 1}
	for _, tc := range []struct {
		name string
		cap  int64
		o    Options
		reqs []Request
		want []Shadowed // per request, zero: granted by the limits too
	}{
		{name: "capacity queues", cap: 1, reqs: []Request{one, one, one},
			want: []Shadowed{{}, {ShadowCapacity, ShadowQueued}, {ShadowCapacity, ShadowQueued}}},
		{name: "fail fast refuses", cap: 1, o: Options{FailFast: true}, reqs: []Request{one, one},
			want: []Shadowed{{}, {ShadowCapacity, ShadowWouldWait}}},
		{name: "max queue refuses", cap: 1, o: Options{MaxQueue: 1}, reqs: []Request{one, one, one},
			want: []Shadowed{{}, {ShadowCapacity, ShadowQueued}, {ShadowCapacity, ShadowQueueFull}}},
		{name: "drop oldest drops", cap: 1, o: Options{MaxQueue: 1, OnFull: OnFullDropOldest}, reqs: []Request{one, one, one},
			want: []Shadowed{{}, {ShadowCapacity, ShadowQueued}, {ShadowCapacity, ShadowDropped}}},
		{name: "rate holds", cap: 10, o: Options{Rate: Rate{Slots: 1, Per: time.Hour}, Burst: 1}, reqs: []Request{one, one},
			// The bucket starts empty, and a shadow grant owes nothing.
			want: []Shadowed{{ShadowRate, ShadowQueued}, {ShadowRate, ShadowQueued}}},
		{name: "key limit", cap: 10, o: Options{Policy: PolicyFair, KeyCap: 1},
			reqs: []Request{{Slots: 1, Key: "a"}, {Slots: 1, Key: "b"}, {Slots: 1, Key: "a"}},
			want: []Shadowed{{}, {}, {ShadowKeyLimit, ShadowQueued}}},
		{name: "budget holds", cap: 10, o: Options{Budget: Rate{Slots: 100, Per: time.Minute}},
			// 60 + 60 is over the window's 100: the second would have
			// waited, and both estimates are reserved.
			reqs: []Request{{Slots: 1, Units: 60}, {Slots: 1, Units: 60}, {Slots: 1, Units: 1}},
			want: []Shadowed{{}, {ShadowBudget, ShadowQueued}, {ShadowBudget, ShadowQueued}}},
		{name: "tenant cap", cap: 10, o: Options{Policy: PolicyFair, TenantCap: 1},
			reqs: []Request{{Slots: 1, Tenant: "t"}, {Slots: 1, Tenant: "u"}, {Slots: 1, Tenant: "t", Key: "k"}},
			want: []Shadowed{{}, {}, {ShadowTenantCap, ShadowQueued}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Shadow, tc.o.Now = true, clock
			p, err := NewWithOptions(tc.cap, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range tc.reqs {
				if got := shadowGrant(t, p, r); got != tc.want[i] {
					t.Errorf("request %d: Shadow = %+v, want %+v", i, got, tc.want[i])
				}
			}
			s := p.Stats()
			if !s.Shadow || s.InUse != int64(len(tc.reqs)) || s.QueuedRequests != 0 {
				t.Errorf("Stats = %+v, want shadow, %d in use, none queued", s, len(tc.reqs))
			}
			var units int64
			for _, r := range tc.reqs {
				units += r.Units
			}
			if s.BudgetReserved != units {
				t.Errorf("Stats.BudgetReserved = %d, want every grant's estimate, %d", s.BudgetReserved, units)
			}
		})
	}
}

func TestShadowTryWouldWait(t *testing.T) {
	p, _ := NewWithOptions(1, Options{Shadow: true})
	for i, want := range []Shadowed{{}, {ShadowCapacity, ShadowWouldWait}} {
		w, err := p.TryAcquireRequest(Request{Slots: 1})
		if err != nil || w.Shadow != want {
			t.Fatalf("try %d: %+v, %v; want granted with Shadow %+v", i, w, err, want)
		}
	}
	if !p.TryAcquire(1) {
		t.Fatal("TryAcquire in a shadow pool over its capacity: refused")
	}
	if err := p.Acquire(t.Context(), 1); err != nil {
		t.Fatalf("Acquire in a shadow pool over its capacity: %v", err)
	}
	if s := p.Stats(); s.InUse != 4 {
		t.Fatalf("in use %d, want 4", s.InUse)
	}
}

// A request no pool of this shape could grant is refused in shadow mode
// too: it is not held back by a limit.
func TestShadowRefusesWhatCouldNeverBeGranted(t *testing.T) {
	p, _ := NewWithOptions(2, Options{Shadow: true, Rate: Rate{Slots: 5, Per: time.Second}, Burst: 1})
	for _, n := range []int64{0, -1, 3, 2} { // 2 > burst 1
		if _, err := p.Admit(Request{Slots: n}); !errors.Is(err, ErrInvalidSlots) && !errors.Is(err, ErrExceedsCapacity) {
			t.Errorf("Admit(%d slots) = %v, want refused", n, err)
		}
	}
	if s := p.Stats(); s.InUse != 0 {
		t.Errorf("in use %d after refusals", s.InUse)
	}
}

// Over its capacity, a shadow pool gives slots back as any pool does; a
// pool made again without shadow mode over restored slots (a restart)
// queues newcomers until holders give back enough.
func TestShadowOffAfterOverCapacity(t *testing.T) {
	p, _ := NewWithOptions(1, Options{Shadow: true})
	for range 3 {
		shadowGrant(t, p, Request{Slots: 1})
	}
	if got := p.Release(1); got != nil {
		t.Fatalf("release granted %v", got)
	}
	q := New(1)
	q.Restore(2) // what the shadow pool still holds
	w, granted, _, err := q.Enqueue(1, "new")
	if err != nil || granted || w.Shadow != (Shadowed{}) {
		t.Fatalf("Enqueue beside 2 restored of 1: granted %v, %v", granted, err)
	}
	if got := q.Release(1); got != nil {
		t.Fatalf("one release of 2 held granted %v; want none until under capacity", got)
	}
	if got := q.Release(1); len(got) != 1 || got[0] != w {
		t.Fatalf("second release granted %v, want the waiter", got)
	}
}

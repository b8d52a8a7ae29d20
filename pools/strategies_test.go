package pools

import (
	"errors"
	"testing"
)

// The queue strategies beside the service order: lifo, a full queue's
// drop_oldest (Admit), and fail fast. TestRandomPolicies checks them
// against the model at random; these tests show each promise plainly.

// TestLIFO: the newest waiter is served first, and a newcomer whose slots
// are free goes at once even with others waiting.
func TestLIFO(t *testing.T) {
	p := mustNew(t, 2, Options{Policy: PolicyLIFO})
	mustGrant(t, p, Request{Slots: 2})
	a := mustQueue(t, p, Request{Slots: 1, Value: "a"})
	b := mustQueue(t, p, Request{Slots: 1, Value: "b"})
	c := mustQueue(t, p, Request{Slots: 1, Value: "c"})
	for w, want := range map[*Waiter]int{a: 3, b: 2, c: 1} {
		if got := p.Position(w); got != want {
			t.Errorf("Position(%v) = %d, want %d", w.Value, got, want)
		}
	}
	got := p.ReleaseFor("", 1)
	if len(got) != 1 || got[0] != c {
		t.Fatalf("first release granted %v, want [c]", values(got))
	}
	// One slot held by c, one by hold: a newcomer waits, and is then the
	// newest.
	d := mustQueue(t, p, Request{Slots: 1, Value: "d"})
	if got := p.ReleaseFor("", 1); len(got) != 1 || got[0] != d {
		t.Fatalf("second release granted %v, want [d]", values(got))
	}
	// Free slots go to a newcomer at once, ahead of a and b.
	p.ReleaseFor("", 1) // d's: b is granted
	if !b.Granted() || a.Granted() {
		t.Fatalf("b granted %t, a granted %t; want b only", b.Granted(), a.Granted())
	}
	p.ReleaseFor("", 1) // c's: a is granted
	p.ReleaseFor("", 1) // b's: one slot free
	mustGrant(t, p, Request{Slots: 1, Value: "e"})
	checkPolicy(t, p, true)
}

// TestDropOldest: a full drop_oldest queue keeps the newest MaxQueue
// requests, under every policy, dropping the first to arrive whatever its
// place in the service order; a dropped Acquire returns ErrDropped; and
// EnqueueRequest never drops.
func TestDropOldest(t *testing.T) {
	for _, pol := range allPolicies {
		t.Run(string(pol), func(t *testing.T) {
			p := mustNew(t, 2, Options{Policy: pol, MaxQueue: 2, OnFull: OnFullDropOldest})
			mustGrant(t, p, Request{Slots: 2, Tenant: "h"})
			if s := p.Stats(); s.OnFull != OnFullDropOldest {
				t.Errorf("Stats().OnFull = %q", s.OnFull)
			}
			old := mustQueue(t, p, Request{Slots: 1, Tenant: "a", Priority: 1, Value: "old"})
			mid := mustQueue(t, p, Request{Slots: 1, Tenant: "b", Value: "mid"})
			if _, _, _, err := p.EnqueueRequest(Request{Slots: 1, Tenant: "c"}); !errors.Is(err, ErrQueueFull) {
				t.Fatalf("EnqueueRequest on a full queue = %v, want ErrQueueFull", err)
			}
			a, err := p.Admit(Request{Slots: 1, Tenant: "c", Value: "new"})
			if err != nil || a.Granted || a.Waiter == nil || a.Position < 1 || a.Dropped != old || len(a.Let) != 0 {
				t.Fatalf("Admit = %+v, %v; want queued, dropping the oldest", a, err)
			}
			if old.Granted() || p.Position(old) != 0 {
				t.Error("the dropped waiter is still queued or granted")
			}
			if removed, _ := p.Cancel(old); removed {
				t.Error("Cancel removed the dropped waiter")
			}
			if s := p.Stats(); s.QueuedRequests != 2 || s.QueuedSlots != 2 {
				t.Errorf("after the drop: %+v", s)
			}
			// Acquire's waiter, when the oldest, is woken with ErrDropped.
			removed, _ := p.Cancel(mid)
			if !removed {
				t.Fatal("Cancel(mid) did not remove it")
			}
			errc := make(chan error, 1)
			go func() { errc <- p.Acquire(bounded(t), 1) }()
			waitQueued(t, p, 2)
			if _, err := p.Admit(Request{Slots: 1, Tenant: "d"}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Admit(Request{Slots: 1, Tenant: "e"}); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; !errors.Is(err, ErrDropped) {
				t.Errorf("Acquire dropped: %v, want ErrDropped", err)
			}
			checkPolicy(t, p, true)
		})
	}
}

// TestDropOldestLetsOthersIn: dropping a large waiter that blocked the
// queue grants those behind it that fit, before the newcomer is admitted.
func TestDropOldestLetsOthersIn(t *testing.T) {
	p := mustNew(t, 4, Options{MaxQueue: 2, OnFull: OnFullDropOldest})
	mustGrant(t, p, Request{Slots: 2})
	big := mustQueue(t, p, Request{Slots: 3, Value: "big"})
	small := mustQueue(t, p, Request{Slots: 1, Value: "small"})
	a, err := p.Admit(Request{Slots: 1, Value: "new"})
	if err != nil || a.Dropped != big || len(a.Let) != 1 || a.Let[0] != small || !a.Granted {
		t.Fatalf("Admit = %+v, %v; want big dropped, small let in, new granted", a, err)
	}
	checkPolicy(t, p, true)
}

// TestFailFast: a pool without a queue grants what it can at once and
// refuses the rest with ErrWouldWait, through every way in.
func TestFailFast(t *testing.T) {
	for _, pol := range allPolicies {
		t.Run(string(pol), func(t *testing.T) {
			p := mustNew(t, 2, Options{Policy: pol, FailFast: true})
			if s := p.Stats(); !s.FailFast || s.MaxQueue != 0 {
				t.Errorf("Stats() = %+v, want fail_fast", s)
			}
			mustGrant(t, p, Request{Slots: 1, Tenant: "a"})
			_, _, _, err := p.EnqueueRequest(Request{Slots: 2, Tenant: "a"})
			if !errors.Is(err, ErrWouldWait) {
				t.Errorf("EnqueueRequest = %v, want ErrWouldWait", err)
			}
			if _, err := p.Admit(Request{Slots: 2}); !errors.Is(err, ErrWouldWait) {
				t.Errorf("Admit = %v, want ErrWouldWait", err)
			}
			if err := p.Acquire(bounded(t), 2); !errors.Is(err, ErrWouldWait) {
				t.Errorf("Acquire = %v, want ErrWouldWait", err)
			}
			mustGrant(t, p, Request{Slots: 1, Tenant: "b"})
			if s := p.Stats(); s.QueuedRequests != 0 || s.InUse != 2 {
				t.Errorf("Stats() = %+v", s)
			}
		})
	}
}

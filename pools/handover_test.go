package pools

import (
	"testing"
	"time"
)

// HandOver grants as ReleaseKey does when that grants anyone, and
// otherwise changes nothing: the slots stay with their holder.
func TestHandOver(t *testing.T) {
	p := New(2)
	mustEnqueue(t, p, 2, "holder", true, 0)

	// Nobody waiting: nothing changes.
	if g := p.HandOver("", "", 2); g != nil {
		t.Fatalf("HandOver with nobody waiting granted %v", values(g))
	}
	wantStats(t, p, Stats{Capacity: 2, InUse: 2})

	// A waiter that fits in the slots handed over is granted.
	mustEnqueue(t, p, 1, "b", false, 1)
	mustEnqueue(t, p, 1, "c", false, 2)
	if g := p.HandOver("", "", 2); len(g) != 2 || g[0].Value != "b" || g[1].Value != "c" {
		t.Fatalf("HandOver granted %v, want [b c]", values(g))
	}
	wantStats(t, p, Stats{Capacity: 2, InUse: 2})

	// A waiter the slots handed over cannot fit: nothing changes.
	mustEnqueue(t, p, 2, "d", false, 1)
	if g := p.HandOver("", "", 1); g != nil {
		t.Fatalf("HandOver of 1 slot granted %v to a 2-slot waiter", values(g))
	}
	wantStats(t, p, Stats{Capacity: 2, InUse: 2, QueuedRequests: 1, QueuedSlots: 2})
	if g := p.Release(1); g != nil {
		t.Fatalf("Release granted %v with 1 slot free for a 2-slot waiter", values(g))
	}
	if g := p.Release(1); len(g) != 1 || g[0].Value != "d" {
		t.Fatalf("Release granted %v, want [d]", values(g))
	}
}

// Under a start rate, HandOver grants nothing while the rate holds the
// next waiter back, and leaves the slots taken.
func TestHandOverUnderRate(t *testing.T) {
	p, err := NewWithOptions(1, Options{Rate: Rate{Slots: 1, Per: time.Hour}, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	p.RestoreKey("", "", 1) // the holder; the bucket starts empty
	mustEnqueue(t, p, 1, "next", false, 1)
	if g := p.HandOver("", "", 1); g != nil {
		t.Fatalf("HandOver granted %v past the start rate", values(g))
	}
	wantStats(t, p, Stats{Capacity: 1, InUse: 1, QueuedRequests: 1, QueuedSlots: 1, Rate: "1/h", Burst: 1})
}

// HandOver checks what it is given as ReleaseKey does.
func TestHandOverPanicsOnSlotsNotHeld(t *testing.T) {
	p := New(2)
	defer func() {
		if recover() == nil {
			t.Fatal("HandOver of slots nobody holds did not panic")
		}
	}()
	p.HandOver("", "", 1)
}

package pools

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	b, err := newBucket(Rate{Slots: 10, Per: time.Second}, 5, t0)
	if err != nil {
		t.Fatal(err)
	}
	if b.allows(t0, 1) {
		t.Fatal("a new bucket must start empty")
	}
	if w := b.when(t0, 1); w != 100*time.Millisecond {
		t.Fatalf("first slot in %v, want 100ms", w)
	}
	if !b.allows(at(100*time.Millisecond), 1) || b.allows(at(100*time.Millisecond), 2) {
		t.Fatal("after 100ms exactly one slot")
	}
	// Long idle: full at the burst, never more.
	if got := b.tokens(at(time.Hour)); got != 5 {
		t.Fatalf("tokens after an hour %d, want the burst 5", got)
	}
	b.take(5)
	if w := b.when(at(time.Hour), 3); w != 300*time.Millisecond {
		t.Fatalf("3 slots in %v, want 300ms", w)
	}
	// Over any window from a full bucket, starts <= burst + rate*t.
	b, _ = newBucket(Rate{Slots: 60, Per: time.Minute}, 2, t0)
	started := 0
	for ms := 0; ms <= 60_000; ms += 5 {
		for b.allows(at(time.Duration(ms)*time.Millisecond), 1) {
			b.take(1)
			started++
		}
	}
	if started != 60 { // empty start: one a second, for 60 s
		t.Fatalf("%d starts in 60s at 60/m from empty, want 60", started)
	}
	for _, bad := range []struct {
		r     Rate
		burst int64
	}{{Rate{0, time.Second}, 1}, {Rate{1, 0}, 1}, {Rate{1, time.Second}, 0}, {Rate{1, time.Hour}, 1 << 62}} {
		if _, err := newBucket(bad.r, bad.burst, t0); err == nil {
			t.Errorf("newBucket(%v, %d) accepted", bad.r, bad.burst)
		}
	}
}

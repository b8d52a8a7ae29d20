package pools

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// checkInvariants verifies the invariants documented on Pool's fields.
func checkInvariants(t testing.TB, p *Pool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inUse < 0 {
		t.Errorf("in_use = %d < 0", p.inUse)
	}
	if p.queuedSlots < 0 {
		t.Errorf("queued_slots = %d < 0", p.queuedSlots)
	}
	var sum int64
	var lastSeq uint64
	for e := p.waiters.Front(); e != nil; e = e.Next() {
		w := e.Value.(*Waiter)
		if w.state != stateQueued || w.elem != e || w.pool != p {
			t.Errorf("queued waiter seq %d: state %d, elem ok %t, pool ok %t", w.seq, w.state, w.elem == e, w.pool == p)
		}
		if w.Slots <= 0 || w.Slots > p.capacity {
			t.Errorf("queued waiter seq %d wants %d slots, capacity %d", w.seq, w.Slots, p.capacity)
		}
		if w.seq <= lastSeq {
			t.Errorf("queue out of order: seq %d after %d", w.seq, lastSeq)
		}
		lastSeq = w.seq
		sum += w.Slots
	}
	if sum != p.queuedSlots {
		t.Errorf("queued_slots = %d, sum over queue = %d", p.queuedSlots, sum)
	}
	if e := p.waiters.Front(); e != nil {
		if w := e.Value.(*Waiter); p.capacity-p.inUse >= w.Slots {
			t.Errorf("head waiter (%d slots) fits (capacity %d, in use %d) but was not granted", w.Slots, p.capacity, p.inUse)
		}
	}
}

func wantStats(t testing.TB, p *Pool, want Stats) {
	t.Helper()
	if got := p.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
	checkInvariants(t, p)
}

func mustEnqueue(t testing.TB, p *Pool, n int64, v any, wantGranted bool, wantPos int) *Waiter {
	t.Helper()
	w, granted, pos, err := p.Enqueue(n, v)
	if err != nil {
		t.Fatalf("Enqueue(%d, %v): %v", n, v, err)
	}
	if granted != wantGranted || pos != wantPos {
		t.Fatalf("Enqueue(%d, %v) = granted %t, position %d; want %t, %d", n, v, granted, pos, wantGranted, wantPos)
	}
	if w == nil || w.Slots != n || w.Value != v || w.Granted() != granted {
		t.Fatalf("Enqueue(%d, %v) returned waiter %+v", n, v, w)
	}
	return w
}

// values returns the Values of ws, to compare grant order.
func values(ws []*Waiter) []any {
	var out []any
	for _, w := range ws {
		out = append(out, w.Value)
	}
	return out
}

func wantValues(t testing.TB, what string, got []*Waiter, want ...any) {
	t.Helper()
	g := values(got)
	if len(g) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, g, want)
	}
	for i := range g {
		if g[i] != want[i] {
			t.Fatalf("%s: got %v, want %v", what, g, want)
		}
	}
	for _, w := range got {
		if strings.HasPrefix(what, "rejected") {
			if w.Granted() {
				t.Fatalf("%s: %v reports Granted", what, w.Value)
			}
		} else if !w.Granted() {
			t.Fatalf("%s: %v does not report Granted", what, w.Value)
		}
	}
}

// bounded returns a context that ends the test's blocking calls if a bug
// would otherwise leave them blocked forever.
func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitQueued spins (without sleeping) until p has n queued requests, which
// is how the tests learn that a goroutine is blocked in Acquire.
func waitQueued(t testing.TB, p *Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().QueuedRequests != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue never reached %d requests: %+v", n, p.Stats())
		}
		runtime.Gosched()
	}
}

func TestImmediateGrant(t *testing.T) {
	p := New(4)
	wantStats(t, p, Stats{Capacity: 4, Available: 4})

	w := mustEnqueue(t, p, 2, "a", true, 0)
	if pos := p.Position(w); pos != 0 {
		t.Errorf("Position of granted waiter = %d, want 0", pos)
	}
	wantStats(t, p, Stats{Capacity: 4, InUse: 2, Available: 2})

	if !p.TryAcquire(2) {
		t.Fatal("TryAcquire(2) with 2 free failed")
	}
	wantStats(t, p, Stats{Capacity: 4, InUse: 4, Available: 0})
	if p.TryAcquire(1) {
		t.Fatal("TryAcquire(1) on a full pool succeeded")
	}
	if err := p.Acquire(context.Background(), 0); !errors.Is(err, ErrInvalidSlots) {
		t.Fatalf("Acquire(0) = %v", err)
	}
	if g := p.Release(2); g != nil {
		t.Fatalf("Release with nobody waiting granted %v", values(g))
	}
	if g := p.Release(2); g != nil {
		t.Fatalf("Release with nobody waiting granted %v", values(g))
	}
	wantStats(t, p, Stats{Capacity: 4, Available: 4})
	if removed, _ := p.Cancel(w); removed {
		t.Fatal("Cancel of a granted waiter reported removed")
	}
}

func TestFIFO(t *testing.T) {
	p := New(2)
	mustEnqueue(t, p, 2, "holder", true, 0)
	a := mustEnqueue(t, p, 1, "a", false, 1)
	b := mustEnqueue(t, p, 1, "b", false, 2)
	c := mustEnqueue(t, p, 2, "c", false, 3)
	d := mustEnqueue(t, p, 1, "d", false, 4)
	wantStats(t, p, Stats{Capacity: 2, InUse: 2, QueuedRequests: 4, QueuedSlots: 5})
	for i, w := range []*Waiter{a, b, c, d} {
		if pos := p.Position(w); pos != i+1 {
			t.Errorf("Position(%v) = %d, want %d", w.Value, pos, i+1)
		}
	}

	wantValues(t, "Release(2)", p.Release(2), "a", "b")
	wantStats(t, p, Stats{Capacity: 2, InUse: 2, QueuedRequests: 2, QueuedSlots: 3})
	if pos := p.Position(c); pos != 1 {
		t.Errorf("Position(c) = %d, want 1", pos)
	}
	if pos := p.Position(a); pos != 0 {
		t.Errorf("Position(granted a) = %d, want 0", pos)
	}
	wantValues(t, "Release(1) with c (2 slots) at head", p.Release(1))
	wantStats(t, p, Stats{Capacity: 2, InUse: 1, Available: 1, QueuedRequests: 2, QueuedSlots: 3})
	wantValues(t, "Release(1)", p.Release(1), "c")
	wantStats(t, p, Stats{Capacity: 2, InUse: 2, QueuedRequests: 1, QueuedSlots: 1})
	wantValues(t, "Release(2)", p.Release(2), "d")
	wantStats(t, p, Stats{Capacity: 2, InUse: 1, Available: 1})
	wantValues(t, "Release(1)", p.Release(1))
	wantStats(t, p, Stats{Capacity: 2, Available: 2})
}

// TestNoJumpingTheQueue: a 1-slot newcomer must not be granted ahead of a
// waiting 3-slot request even though one slot is free, or a stream of small
// requests could starve the large one.
func TestNoJumpingTheQueue(t *testing.T) {
	p := New(4)
	mustEnqueue(t, p, 1, "holder1", true, 0)
	mustEnqueue(t, p, 1, "holder2", true, 0)
	big := mustEnqueue(t, p, 3, "big", false, 1)
	small := mustEnqueue(t, p, 1, "small", false, 2)
	wantStats(t, p, Stats{Capacity: 4, InUse: 2, Available: 2, QueuedRequests: 2, QueuedSlots: 4})
	if p.TryAcquire(1) {
		t.Fatal("TryAcquire(1) jumped the queue")
	}

	// A blocking Acquire(1) queues behind them too.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Acquire(ctx, 1) }()
	waitQueued(t, p, 3)
	wantStats(t, p, Stats{Capacity: 4, InUse: 2, Available: 2, QueuedRequests: 3, QueuedSlots: 5})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued Acquire(1) = %v, want context.Canceled", err)
	}
	wantStats(t, p, Stats{Capacity: 4, InUse: 2, Available: 2, QueuedRequests: 2, QueuedSlots: 4})

	// One slot released: 3 free, the head goes first and takes them all.
	wantValues(t, "Release(1)", p.Release(1), "big")
	if small.Granted() || p.Position(small) != 1 {
		t.Fatalf("small: granted %t, position %d; want queued at 1", small.Granted(), p.Position(small))
	}
	wantStats(t, p, Stats{Capacity: 4, InUse: 4, QueuedRequests: 1, QueuedSlots: 1})
	wantValues(t, "Release(1)", p.Release(1), "small")
	wantStats(t, p, Stats{Capacity: 4, InUse: 4})
	_ = big
}

func TestCancelMiddle(t *testing.T) {
	p := New(1)
	mustEnqueue(t, p, 1, "holder", true, 0)
	mustEnqueue(t, p, 1, "a", false, 1)
	b := mustEnqueue(t, p, 1, "b", false, 2)
	c := mustEnqueue(t, p, 1, "c", false, 3)

	removed, granted := p.Cancel(b)
	if !removed || granted != nil {
		t.Fatalf("Cancel(b) = %t, %v; want true, none", removed, values(granted))
	}
	if b.Granted() || p.Position(b) != 0 {
		t.Fatal("cancelled b is granted or still queued")
	}
	if p.Position(c) != 2 {
		t.Fatalf("Position(c) = %d, want 2", p.Position(c))
	}
	wantStats(t, p, Stats{Capacity: 1, InUse: 1, QueuedRequests: 2, QueuedSlots: 2})
	if removed, _ := p.Cancel(b); removed {
		t.Fatal("second Cancel(b) reported removed")
	}
	if removed, _ := p.Cancel(nil); removed {
		t.Fatal("Cancel(nil) reported removed")
	}
	wantValues(t, "Release(1)", p.Release(1), "a")
	wantValues(t, "Release(1)", p.Release(1), "c")
	wantStats(t, p, Stats{Capacity: 1, InUse: 1})
}

func TestCancelHeadUnblocks(t *testing.T) {
	p := New(4)
	mustEnqueue(t, p, 2, "holder", true, 0)
	big := mustEnqueue(t, p, 3, "big", false, 1)
	mustEnqueue(t, p, 1, "s1", false, 2)
	mustEnqueue(t, p, 1, "s2", false, 3)
	s3 := mustEnqueue(t, p, 1, "s3", false, 4)
	wantStats(t, p, Stats{Capacity: 4, InUse: 2, Available: 2, QueuedRequests: 4, QueuedSlots: 6})

	removed, granted := p.Cancel(big)
	if !removed {
		t.Fatal("Cancel(head) not removed")
	}
	wantValues(t, "Cancel(head)", granted, "s1", "s2")
	if p.Position(s3) != 1 {
		t.Fatalf("Position(s3) = %d, want 1", p.Position(s3))
	}
	wantStats(t, p, Stats{Capacity: 4, InUse: 4, QueuedRequests: 1, QueuedSlots: 1})

	// Cancelling the head when nothing is free grants nothing.
	removed, granted = p.Cancel(s3)
	if !removed || granted != nil {
		t.Fatalf("Cancel(s3) = %t, %v", removed, values(granted))
	}
	wantStats(t, p, Stats{Capacity: 4, InUse: 4})
}

func TestErrors(t *testing.T) {
	p := New(4)
	for _, n := range []int64{0, -1} {
		if _, _, _, err := p.Enqueue(n, nil); !errors.Is(err, ErrInvalidSlots) {
			t.Errorf("Enqueue(%d) = %v, want ErrInvalidSlots", n, err)
		}
		if err := p.Acquire(context.Background(), n); !errors.Is(err, ErrInvalidSlots) {
			t.Errorf("Acquire(%d) = %v, want ErrInvalidSlots", n, err)
		}
		if p.TryAcquire(n) {
			t.Errorf("TryAcquire(%d) succeeded", n)
		}
	}
	_, _, _, err := p.Enqueue(5, nil)
	if !errors.Is(err, ErrExceedsCapacity) {
		t.Fatalf("Enqueue(capacity+1) = %v, want ErrExceedsCapacity", err)
	}
	if want := "5 slots requested, capacity is 4"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if err := p.Acquire(context.Background(), 5); !errors.Is(err, ErrExceedsCapacity) {
		t.Errorf("Acquire(capacity+1) = %v, want ErrExceedsCapacity", err)
	}
	if p.TryAcquire(5) {
		t.Error("TryAcquire(capacity+1) succeeded")
	}
	wantStats(t, p, Stats{Capacity: 4, Available: 4})

	zero := New(0)
	if _, _, _, err := zero.Enqueue(1, nil); !errors.Is(err, ErrExceedsCapacity) {
		t.Errorf("Enqueue(1) on capacity 0 = %v, want ErrExceedsCapacity", err)
	}
	wantStats(t, zero, Stats{})
}

func TestPanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	mustPanic("New(-1)", func() { New(-1) })
	mustPanic("Release on empty pool", func() { New(1).Release(1) })
	mustPanic("Release(-1)", func() { New(1).Release(-1) })
	mustPanic("Restore(-1)", func() { New(1).Restore(-1) })
	mustPanic("SetCapacity(-1)", func() { New(1).SetCapacity(-1) })
	mustPanic("Cancel of another pool's waiter", func() {
		a, b := New(1), New(1)
		a.TryAcquire(1)
		w, _, _, _ := a.Enqueue(1, nil)
		b.Cancel(w)
	})

	p := New(3)
	p.TryAcquire(2)
	mustPanic("Release(3) with 2 in use", func() { p.Release(3) })
	wantStats(t, p, Stats{Capacity: 3, InUse: 2, Available: 1})
}

func TestRestoreAboveCapacity(t *testing.T) {
	p := New(4)
	p.Restore(6)
	wantStats(t, p, Stats{Capacity: 4, InUse: 6})
	if p.TryAcquire(1) {
		t.Fatal("TryAcquire succeeded with in_use above capacity")
	}
	mustEnqueue(t, p, 1, "a", false, 1)
	mustEnqueue(t, p, 2, "b", false, 2)
	wantStats(t, p, Stats{Capacity: 4, InUse: 6, QueuedRequests: 2, QueuedSlots: 3})

	wantValues(t, "Release(2) back to capacity", p.Release(2))
	wantStats(t, p, Stats{Capacity: 4, InUse: 4, QueuedRequests: 2, QueuedSlots: 3})
	wantValues(t, "Release(1)", p.Release(1), "a")
	wantStats(t, p, Stats{Capacity: 4, InUse: 4, QueuedRequests: 1, QueuedSlots: 2})
	wantValues(t, "Release(2)", p.Release(2), "b")
	wantStats(t, p, Stats{Capacity: 4, InUse: 4})
}

func TestSetCapacity(t *testing.T) {
	p := New(2)
	mustEnqueue(t, p, 2, "holder", true, 0)
	mustEnqueue(t, p, 1, "a", false, 1)
	mustEnqueue(t, p, 2, "b", false, 2)
	mustEnqueue(t, p, 1, "c", false, 3)

	// Grow: grants what now fits, FIFO, stopping at the head.
	granted, rejected := p.SetCapacity(4)
	wantValues(t, "grow to 4", granted, "a")
	wantValues(t, "rejected by grow to 4", rejected)
	wantStats(t, p, Stats{Capacity: 4, InUse: 3, Available: 1, QueuedRequests: 2, QueuedSlots: 3})
	granted, rejected = p.SetCapacity(6)
	wantValues(t, "grow to 6", granted, "b", "c")
	wantValues(t, "rejected by grow to 6", rejected)
	wantStats(t, p, Stats{Capacity: 6, InUse: 6})

	// Shrink below in use: nothing is granted until enough is released.
	granted, rejected = p.SetCapacity(3)
	if granted != nil || rejected != nil {
		t.Fatalf("shrink to 3: granted %v, rejected %v", values(granted), values(rejected))
	}
	wantStats(t, p, Stats{Capacity: 3, InUse: 6})
	mustEnqueue(t, p, 1, "d", false, 1)
	wantValues(t, "Release(2)", p.Release(2))
	wantValues(t, "Release(1)", p.Release(1))
	wantStats(t, p, Stats{Capacity: 3, InUse: 3, QueuedRequests: 1, QueuedSlots: 1})
	wantValues(t, "Release(1)", p.Release(1), "d")
	wantStats(t, p, Stats{Capacity: 3, InUse: 3})
	p.Release(3)

	// Shrink rejects the waiters that could never fit, keeps the others.
	p = New(4)
	mustEnqueue(t, p, 4, "holder", true, 0)
	e := mustEnqueue(t, p, 3, "e", false, 1)
	mustEnqueue(t, p, 1, "f", false, 2)
	g := mustEnqueue(t, p, 2, "g", false, 3)
	mustEnqueue(t, p, 1, "h", false, 4)
	granted, rejected = p.SetCapacity(1)
	wantValues(t, "shrink to 1", granted)
	wantValues(t, "rejected by shrink to 1", rejected, "e", "g")
	for _, w := range []*Waiter{e, g} {
		if p.Position(w) != 0 {
			t.Errorf("rejected %v still queued", w.Value)
		}
		if removed, _ := p.Cancel(w); removed {
			t.Errorf("Cancel of rejected %v reported removed", w.Value)
		}
	}
	wantStats(t, p, Stats{Capacity: 1, InUse: 4, QueuedRequests: 2, QueuedSlots: 2})

	// Rejecting the head lets the waiters behind it through.
	p = New(4)
	mustEnqueue(t, p, 1, "holder", true, 0)
	mustEnqueue(t, p, 4, "big", false, 1)
	mustEnqueue(t, p, 1, "small", false, 2)
	granted, rejected = p.SetCapacity(3)
	wantValues(t, "shrink to 3", granted, "small")
	wantValues(t, "rejected by shrink to 3", rejected, "big")
	wantStats(t, p, Stats{Capacity: 3, InUse: 2, Available: 1})
}

func TestStatsJSON(t *testing.T) {
	p := New(4)
	p.Restore(1)
	b, err := json.Marshal(p.Stats())
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"capacity":4,"in_use":1,"available":3,"queued":0,"queued_slots":0}`
	if string(b) != want {
		t.Fatalf("json = %s, want %s", b, want)
	}
}

func TestAcquireBlocksUntilRelease(t *testing.T) {
	p := New(2)
	ctx := bounded(t)
	if err := p.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 2)
	go func() { errc <- p.Acquire(ctx, 2) }()
	waitQueued(t, p, 1)
	go func() { errc <- p.Acquire(ctx, 1) }()
	waitQueued(t, p, 2)
	wantStats(t, p, Stats{Capacity: 2, InUse: 2, QueuedRequests: 2, QueuedSlots: 3})

	// Waiters created by Acquire are woken, not returned.
	if g := p.Release(2); g != nil {
		t.Fatalf("Release returned Acquire's waiters: %v", values(g))
	}
	if err := <-errc; err != nil {
		t.Fatalf("first Acquire = %v", err)
	}
	wantStats(t, p, Stats{Capacity: 2, InUse: 2, QueuedRequests: 1, QueuedSlots: 1})
	p.Release(2)
	if err := <-errc; err != nil {
		t.Fatalf("second Acquire = %v", err)
	}
	wantStats(t, p, Stats{Capacity: 2, InUse: 1, Available: 1})
}

func TestAcquireDoneContext(t *testing.T) {
	p := New(2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Acquire(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with done ctx = %v, want context.Canceled", err)
	}
	wantStats(t, p, Stats{Capacity: 2, Available: 2})
}

// TestAcquireCancelUnblocksBehind: a cancelled Acquire at the head of the
// queue must let the requests behind it through (x/sync's
// TestAllocCancelDoesntStarve).
func TestAcquireCancelUnblocksBehind(t *testing.T) {
	p := New(10)
	if err := p.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	bigErr := make(chan error, 1)
	go func() { bigErr <- p.Acquire(ctx, 10) }()
	waitQueued(t, p, 1)
	smallErr := make(chan error, 1)
	go func() { smallErr <- p.Acquire(bounded(t), 1) }()
	waitQueued(t, p, 2)

	cancel()
	if err := <-bigErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire(10) = %v, want context.Canceled", err)
	}
	if err := <-smallErr; err != nil {
		t.Fatalf("Acquire(1) behind the cancelled head = %v", err)
	}
	wantStats(t, p, Stats{Capacity: 10, InUse: 2, Available: 8})
}

func TestAcquireRejectedBySetCapacity(t *testing.T) {
	p := New(4)
	p.Restore(1)
	errc := make(chan error, 1)
	go func() { errc <- p.Acquire(bounded(t), 4) }()
	waitQueued(t, p, 1)
	granted, rejected := p.SetCapacity(3)
	if granted != nil || rejected != nil {
		t.Fatalf("SetCapacity returned Acquire's waiter: granted %v, rejected %v", values(granted), values(rejected))
	}
	err := <-errc
	if !errors.Is(err, ErrExceedsCapacity) || !strings.Contains(err.Error(), "4 slots requested, capacity is 3") {
		t.Fatalf("rejected Acquire = %v", err)
	}
	wantStats(t, p, Stats{Capacity: 3, InUse: 1, Available: 2})
}

// TestAcquireCancelAfterGrant makes the grant and the cancellation both
// happen, atomically, while Acquire is blocked: whichever Acquire sees
// first, it must return ctx.Err() and give the slots back.
func TestAcquireCancelAfterGrant(t *testing.T) {
	p := New(1)
	for i := range 500 {
		if !p.TryAcquire(1) {
			t.Fatalf("iteration %d: pool not empty: %+v", i, p.Stats())
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- p.Acquire(ctx, 1) }()
		waitQueued(t, p, 1)

		p.mu.Lock()
		cancel()
		p.inUse--
		if g := p.grant(nil); g != nil {
			t.Fatalf("grant returned Acquire's waiter")
		}
		p.mu.Unlock()

		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("iteration %d: Acquire = %v, want context.Canceled", i, err)
		}
		wantStats(t, p, Stats{Capacity: 1, Available: 1})
	}
}

// TestAcquireCancelRace cancels the context at the same moment the slot is
// released, many times. Acquire may win or lose, but no slot may leak.
func TestAcquireCancelRace(t *testing.T) {
	p := New(3)
	var won, lost int
	for i := range 2000 {
		if !p.TryAcquire(3) {
			t.Fatalf("iteration %d: pool not empty: %+v", i, p.Stats())
		}
		ctx, cancel := context.WithCancel(context.Background())
		n := int64(1 + i%3)
		errc := make(chan error, 1)
		go func() { errc <- p.Acquire(ctx, n) }()
		waitQueued(t, p, 1)

		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; cancel() })
		wg.Go(func() { <-start; p.Release(3) })
		close(start)
		wg.Wait()

		switch err := <-errc; {
		case err == nil:
			won++
			p.Release(n)
		case errors.Is(err, context.Canceled):
			lost++
		default:
			t.Fatalf("iteration %d: Acquire = %v", i, err)
		}
		wantStats(t, p, Stats{Capacity: 3, Available: 3})
	}
	t.Logf("Acquire won %d, lost %d", won, lost)
}

// TestLargeAcquireDoesntStarve: goroutines holding one slot each keep
// releasing and re-acquiring it; a request for all slots must still get
// through, since the re-acquires queue behind it.
func TestLargeAcquireDoesntStarve(t *testing.T) {
	const n = 8
	p := New(n)
	loopCtx := bounded(t)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range n {
		if err := p.Acquire(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer p.Release(1)
			for !stop.Load() {
				p.Release(1)
				runtime.Gosched()
				if err := p.Acquire(loopCtx, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.Acquire(ctx, n)
	stop.Store(true)
	if err != nil {
		t.Fatalf("Acquire(%d) starved: %v", n, err)
	}
	p.Release(n)
	wg.Wait()
	wantStats(t, p, Stats{Capacity: n, Available: n})
}

// TestStress runs many goroutines acquiring random slot counts with random
// short timeouts, checking that the slots held never exceed capacity and
// that nothing leaks.
func TestStress(t *testing.T) {
	const (
		goroutines = 64
		capacity   = 10
	)
	loops := 300
	if testing.Short() {
		loops = 50
	}
	p := New(capacity)
	var held, maxHeld, granted, timedOut atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range loops {
				n := 1 + r.Int64N(capacity)
				var err error
				if r.IntN(8) == 0 {
					if !p.TryAcquire(n) {
						continue
					}
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(3000))*time.Microsecond)
					err = p.Acquire(ctx, n)
					cancel()
				}
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Acquire(%d) = %v", n, err)
						return
					}
					timedOut.Add(1)
					continue
				}
				granted.Add(1)
				h := held.Add(n)
				if h > capacity {
					t.Errorf("%d slots held, capacity %d", h, capacity)
				}
				for m := maxHeld.Load(); h > m && !maxHeld.CompareAndSwap(m, h); m = maxHeld.Load() {
				}
				if r.IntN(2) == 0 {
					runtime.Gosched()
				}
				held.Add(-n)
				p.Release(n)
			}
		})
	}
	wg.Wait()
	t.Logf("granted %d, timed out %d, max held %d", granted.Load(), timedOut.Load(), maxHeld.Load())
	if granted.Load() == 0 {
		t.Error("nothing was ever granted")
	}
	wantStats(t, p, Stats{Capacity: capacity, Available: capacity})
}

// model is a naive reference implementation of the pool's accounting.
type model struct {
	capacity, inUse int64
	queue           []*Waiter
}

func (m *model) grant() (out []*Waiter) {
	for len(m.queue) > 0 && m.capacity-m.inUse >= m.queue[0].Slots {
		m.inUse += m.queue[0].Slots
		out = append(out, m.queue[0])
		m.queue = m.queue[1:]
	}
	return out
}

func (m *model) stats() Stats {
	s := Stats{Capacity: m.capacity, InUse: m.inUse, Available: max(0, m.capacity-m.inUse), QueuedRequests: len(m.queue)}
	for _, w := range m.queue {
		s.QueuedSlots += w.Slots
	}
	return s
}

func sameWaiters(a, b []*Waiter) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRandomAgainstModel drives a pool with random operations and compares
// every result with the naive model, checking the invariants after each.
func TestRandomAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 2))
		p := New(8)
		m := &model{capacity: 8}
		var held []int64 // grants the test owns
		for step := range 2000 {
			switch op := r.IntN(100); {
			case op < 40:
				n := 1 + r.Int64N(m.capacity+1)
				w, granted, pos, err := p.Enqueue(n, step)
				switch {
				case n > m.capacity:
					if !errors.Is(err, ErrExceedsCapacity) {
						t.Fatalf("seed %d step %d: Enqueue(%d) = %v", seed, step, n, err)
					}
				case len(m.queue) == 0 && m.capacity-m.inUse >= n:
					if err != nil || !granted || pos != 0 {
						t.Fatalf("seed %d step %d: Enqueue(%d) = %t, %d, %v; want granted", seed, step, n, granted, pos, err)
					}
					m.inUse += n
					held = append(held, n)
				default:
					if err != nil || granted || pos != len(m.queue)+1 {
						t.Fatalf("seed %d step %d: Enqueue(%d) = %t, %d, %v; want queued at %d", seed, step, n, granted, pos, err, len(m.queue)+1)
					}
					m.queue = append(m.queue, w)
				}
			case op < 70:
				if len(held) == 0 {
					continue
				}
				i := r.IntN(len(held))
				n := held[i]
				held = append(held[:i], held[i+1:]...)
				got := p.Release(n)
				m.inUse -= n
				want := m.grant()
				if !sameWaiters(got, want) {
					t.Fatalf("seed %d step %d: Release(%d) granted %v, want %v", seed, step, n, values(got), values(want))
				}
				for _, w := range got {
					held = append(held, w.Slots)
				}
			case op < 85:
				if len(m.queue) == 0 {
					continue
				}
				i := r.IntN(len(m.queue))
				w := m.queue[i]
				if pos := p.Position(w); pos != i+1 {
					t.Fatalf("seed %d step %d: Position = %d, want %d", seed, step, pos, i+1)
				}
				removed, got := p.Cancel(w)
				m.queue = append(m.queue[:i:i], m.queue[i+1:]...)
				want := m.grant()
				if !removed || !sameWaiters(got, want) {
					t.Fatalf("seed %d step %d: Cancel = %t, %v; want true, %v", seed, step, removed, values(got), values(want))
				}
				for _, w := range got {
					held = append(held, w.Slots)
				}
			case op < 92:
				if p.TryAcquire(1) != (len(m.queue) == 0 && m.capacity-m.inUse >= 1) {
					t.Fatalf("seed %d step %d: TryAcquire(1) disagrees with model %+v", seed, step, m.stats())
				}
				if len(m.queue) == 0 && m.capacity-m.inUse >= 1 {
					m.inUse++
					held = append(held, 1)
				}
			case op < 97:
				c := r.Int64N(13)
				got, gotRej := p.SetCapacity(c)
				m.capacity = c
				var wantRej []*Waiter
				keep := m.queue[:0:0]
				for _, w := range m.queue {
					if w.Slots > c {
						wantRej = append(wantRej, w)
					} else {
						keep = append(keep, w)
					}
				}
				m.queue = keep
				want := m.grant()
				if !sameWaiters(got, want) || !sameWaiters(gotRej, wantRej) {
					t.Fatalf("seed %d step %d: SetCapacity(%d) = %v, %v; want %v, %v", seed, step, c, values(got), values(gotRej), values(want), values(wantRej))
				}
				for _, w := range got {
					held = append(held, w.Slots)
				}
			default:
				n := 1 + r.Int64N(3)
				p.Restore(n)
				m.inUse += n
				held = append(held, n)
			}
			if got, want := p.Stats(), m.stats(); got != want {
				t.Fatalf("seed %d step %d: Stats = %+v, want %+v", seed, step, got, want)
			}
			checkInvariants(t, p)
		}
	}
}

package pools

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sync/semaphore"
)

// acquirer is what Pool and semaphore.Weighted have in common.
type acquirer interface {
	Acquire(ctx context.Context, n int64) error
}

type poolAcquirer struct{ *Pool }

func (p poolAcquirer) release(n int64) { p.Release(n) }

type semAcquirer struct{ *semaphore.Weighted }

func (s semAcquirer) release(n int64) { s.Release(n) }

type impl struct {
	name string
	new  func(capacity int64) (acquirer, func(int64))
}

var impls = []impl{
	{"pools", func(c int64) (acquirer, func(int64)) { p := poolAcquirer{New(c)}; return p, p.release }},
	{"semaphore", func(c int64) (acquirer, func(int64)) {
		s := semAcquirer{semaphore.NewWeighted(c)}
		return s, s.release
	}},
}

// BenchmarkUncontended: one goroutine acquires and releases one slot.
func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) {
			a, release := im.new(1)
			b.ReportAllocs()
			for b.Loop() {
				if err := a.Acquire(ctx, 1); err != nil {
					b.Fatal(err)
				}
				release(1)
			}
		})
	}
}

// BenchmarkContended: GOMAXPROCS goroutines acquire and release one slot
// of a small pool.
func BenchmarkContended(b *testing.B) {
	ctx := context.Background()
	for _, capacity := range []int64{4, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("cap=%d/%s", capacity, im.name), func(b *testing.B) {
				a, release := im.new(capacity)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := a.Acquire(ctx, 1); err != nil {
							b.Error(err)
							return
						}
						release(1)
					}
				})
			})
		}
	}
}

// BenchmarkEnqueueGrant: with a queue of N waiters behind a full pool, each
// iteration queues one more at the tail and releases one slot, which grants
// the head. It reports the cost per grant and the memory per queued waiter.
func BenchmarkEnqueueGrant(b *testing.B) {
	for _, queued := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) {
			p := New(1)
			if !p.TryAcquire(1) {
				b.Fatal("TryAcquire on an empty pool failed")
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range queued {
				if _, granted, _, err := p.Enqueue(1, nil); granted || err != nil {
					b.Fatal("Enqueue on a full pool did not queue", err)
				}
			}
			runtime.ReadMemStats(&after)
			b.ReportAllocs()
			for b.Loop() {
				if _, granted, _, _ := p.Enqueue(1, nil); granted {
					b.Fatal("Enqueue on a full pool granted")
				}
				if g := p.Release(1); len(g) != 1 {
					b.Fatalf("Release granted %d waiters, want 1", len(g))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/grant")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(queued), "B/waiter")
			if s := p.Stats(); s.QueuedRequests != queued || s.InUse != 1 {
				b.Fatalf("after the run: %+v", s)
			}
		})
	}
}

// BenchmarkEnqueueGrantPolicy is BenchmarkEnqueueGrant for the priority
// and fair policies (and fifo through EnqueueRequest, for comparison):
// each iteration queues one request, with its position, and releases one
// slot, which grants the next in service order. Priorities cycle through
// -1, 0 and 1 on the real clock; tenants cycle through 8, weighted 1 to 4.
func BenchmarkEnqueueGrantPolicy(b *testing.B) {
	const tenants = 8
	names := make([]string, tenants)
	weights := map[string]int{}
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%d", i)
		weights[names[i]] = 1 + i%4
	}
	for _, pol := range []Policy{PolicyFIFO, PolicyPriority, PolicyFair} {
		for _, queued := range []int{1_000, 10_000, 100_000} {
			b.Run(fmt.Sprintf("%s/queued=%d", pol, queued), func(b *testing.B) {
				p, err := NewWithOptions(1, Options{Policy: pol, Weights: weights})
				if err != nil {
					b.Fatal(err)
				}
				held, err := p.TryAcquireRequest(Request{Slots: 1, Tenant: names[0]})
				if err != nil {
					b.Fatal(err)
				}
				i := 0
				req := func() Request {
					i++
					return Request{Slots: 1, Tenant: names[i%tenants], Priority: i%3 - 1}
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for range queued {
					if _, granted, _, err := p.EnqueueRequest(req()); granted || err != nil {
						b.Fatal("EnqueueRequest on a full pool did not queue", err)
					}
				}
				runtime.ReadMemStats(&after)
				b.ReportAllocs()
				for b.Loop() {
					if _, granted, pos, _ := p.EnqueueRequest(req()); granted || pos < 1 {
						b.Fatal("EnqueueRequest on a full pool granted")
					}
					g := p.ReleaseFor(held.Tenant, held.Slots)
					if len(g) != 1 {
						b.Fatalf("ReleaseFor granted %d waiters, want 1", len(g))
					}
					held = g[0]
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/grant")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(queued), "B/waiter")
				if s := p.Stats(); s.QueuedRequests != queued || s.InUse != 1 {
					b.Fatalf("after the run: %+v", s)
				}
			})
		}
	}
}

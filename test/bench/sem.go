package main

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/slotlease/slotlease/pools"
)

// semBench: goroutines loop Acquire(1)+Release(1) on a pools.Pool or a
// semaphore.Weighted of the given capacity, as pools/bench_test.go does.
// An op is far too short to time one by one, so the figure is wall time
// per op over all goroutines, and there is no latency column.
func semBench(cfg config, impl string, goroutines int, capacity int64) (*result, error) {
	ctx := context.Background()
	const batch = 1024 // ops between looks at the stop flag
	// The loops are written out per implementation so neither pays for an
	// indirect call the other does not.
	var loop func(stop *atomic.Bool) (ops int64, err error)
	switch impl {
	case "pools":
		p := pools.New(capacity)
		loop = func(stop *atomic.Bool) (ops int64, err error) {
			for !stop.Load() {
				for range batch {
					if err := p.Acquire(ctx, 1); err != nil {
						return ops, err
					}
					p.Release(1)
				}
				ops += batch
			}
			return ops, nil
		}
	case "semaphore":
		s := semaphore.NewWeighted(capacity)
		loop = func(stop *atomic.Bool) (ops int64, err error) {
			for !stop.Load() {
				for range batch {
					if err := s.Acquire(ctx, 1); err != nil {
						return ops, err
					}
					s.Release(1)
				}
				ops += batch
			}
			return ops, nil
		}
	default:
		return nil, fmt.Errorf("unknown implementation %q", impl)
	}
	ops := make([]int64, goroutines)
	var errs atomic.Int64
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	elapsed, cpu := runFor(cfg.duration, goroutines, func(i int, stop *atomic.Bool) {
		n, err := loop(stop)
		ops[i] = n
		if err != nil {
			errs.Add(1)
		}
	})
	r := &result{Clients: goroutines, Ops: sum(ops), Elapsed: elapsed, CPU: cpu, Errors: errs.Load()}
	runtime.ReadMemStats(&m1)
	if r.Ops > 0 {
		r.Note = fmt.Sprintf("%.1f ns/op, %.1f B/op, %.2f allocs/op", r.nsPerOp(),
			float64(m1.TotalAlloc-m0.TotalAlloc)/float64(r.Ops), float64(m1.Mallocs-m0.Mallocs)/float64(r.Ops))
	}
	return r, nil
}

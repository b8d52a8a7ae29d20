package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
)

// leaseCycle runs clients that loop Acquire→Release of one slot through the
// real lease.Client against a real manager.Manager. Clients share a
// lease.Client per connection, clientsPerConn to a connection, as the
// workers of one executor process would.
func leaseCycle(ctx context.Context, cfg config, clients, capacity int) (*result, error) {
	return leaseCycleWith(ctx, cfg, clients, capacity, managerParts{})
}

// leaseCycleWith runs leaseCycle against a manager with parts in place of
// the product's.
func leaseCycleWith(ctx context.Context, cfg config, clients, capacity int, parts managerParts) (*result, error) {
	e, err := startEnvWith(parts.accounts)
	if err != nil {
		return nil, err
	}
	defer e.close()
	n, err := e.startManagerWith(ctx, recordTTL, parts, manager.PoolConfig{Name: "p", Capacity: int64(capacity)})
	if err != nil {
		return nil, err
	}
	defer n.m.Close()
	conns, err := e.clientConns(clients)
	if err != nil {
		return nil, err
	}
	lcs := make([]*lease.Client, len(conns))
	for i, nc := range conns {
		if lcs[i], err = lease.NewClient(nc, benchNode, lease.WithHolder("bench-"+strconv.Itoa(i))); err != nil {
			return nil, err
		}
		defer lcs[i].Close()
	}
	hs := make([]*hist, clients)
	as := make([]*hist, clients)
	ops := make([]int64, clients)
	var errs atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		errs.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	msgs0 := e.msgs()
	elapsed, cpu := runFor(cfg.duration, clients, func(i int, stop *atomic.Bool) {
		h, a := &hist{}, &hist{}
		hs[i], as[i] = h, a
		c := lcs[i/clientsPerConn]
		for !stop.Load() {
			t0 := time.Now()
			l, err := c.Acquire(ctx, "p", 1)
			if err != nil {
				fail(err)
				continue
			}
			t1 := time.Now()
			if err := l.Release(ctx); err != nil {
				fail(err)
				continue
			}
			h.record(time.Since(t0))
			a.record(t1.Sub(t0))
			ops[i]++
		}
	})
	r := &result{Clients: clients, Ops: sum(ops), Elapsed: elapsed, CPU: cpu, Lat: mergeAll(hs), Acq: mergeAll(as), Errors: errs.Load(), Msgs: e.msgs() - msgs0}
	if s, ok := firstErr.Load().(string); ok {
		r.Note = fmt.Sprintf("first error: %s", s)
	}
	return r, nil
}

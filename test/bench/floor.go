package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// payload is about the size of a lease request or reply.
var payload = []byte(`{"request_id":"Vx3nBq8ZpL2cY7tK0mJ4aR","holder":"bench-client-00:12345","slots":1,"pad":"................................................................................"}`)

// floorReqRep: clients send a request to a responder that replies at once.
func floorReqRep(ctx context.Context, cfg config, clients int) (*result, error) {
	e, err := startEnv()
	if err != nil {
		return nil, err
	}
	defer e.close()
	rnc, err := e.connect("bench-responder")
	if err != nil {
		return nil, err
	}
	sub, err := rnc.Subscribe("floor.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := rnc.Flush(); err != nil {
		return nil, err
	}
	conns, err := e.clientConns(clients)
	if err != nil {
		return nil, err
	}
	hs := make([]*hist, clients)
	ops := make([]int64, clients)
	var errs atomic.Int64
	msgs0 := e.msgs()
	elapsed, cpu := runFor(cfg.duration, clients, func(i int, stop *atomic.Bool) {
		h := &hist{}
		hs[i] = h
		nc := conns[i/clientsPerConn]
		for !stop.Load() {
			t0 := time.Now()
			if _, err := nc.Request("floor.echo", payload, 5*time.Second); err != nil {
				errs.Add(1)
				continue
			}
			h.record(time.Since(t0))
			ops[i]++
		}
	})
	return &result{Clients: clients, Ops: sum(ops), Elapsed: elapsed, CPU: cpu, Lat: mergeAll(hs), Errors: errs.Load(), Msgs: e.msgs() - msgs0,
		Note: "design: p50 91us at c=1, 96k/s at c=64"}, nil
}

// floorKVCreateDelete: each writer creates a key with a TTL and purges it
// at the revision it created, as the product stores and drops a lease.
func floorKVCreateDelete(ctx context.Context, cfg config, clients int) (*result, error) {
	e, err := startEnv()
	if err != nil {
		return nil, err
	}
	defer e.close()
	conns, err := e.clientConns(clients)
	if err != nil {
		return nil, err
	}
	if _, err := bucket(ctx, conns[0], "floor_cd"); err != nil {
		return nil, err
	}
	kvs := make([]jetstream.KeyValue, len(conns))
	for i, nc := range conns {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		if kvs[i], err = js.KeyValue(ctx, "floor_cd"); err != nil {
			return nil, err
		}
	}
	hs := make([]*hist, clients)
	ops := make([]int64, clients)
	var errs atomic.Int64
	msgs0 := e.msgs()
	elapsed, cpu := runFor(cfg.duration, clients, func(i int, stop *atomic.Bool) {
		h := &hist{}
		hs[i] = h
		kv := kvs[i/clientsPerConn]
		prefix := "w" + strconv.Itoa(i) + "-"
		for n := 0; !stop.Load(); n++ {
			key := prefix + strconv.Itoa(n)
			t0 := time.Now()
			rev, err := kv.Create(ctx, key, payload, jetstream.KeyTTL(recordTTL))
			if err == nil {
				err = kv.Purge(ctx, key, jetstream.LastRevision(rev), jetstream.PurgeTTL(time.Minute))
			}
			if err != nil {
				errs.Add(1)
				continue
			}
			h.record(time.Since(t0))
			ops[i]++
		}
	})
	return &result{Clients: clients, Ops: sum(ops), Elapsed: elapsed, CPU: cpu, Lat: mergeAll(hs), Errors: errs.Load(), Msgs: e.msgs() - msgs0,
		Note: "design: p50 158us at c=1, 24k/s at c=64"}, nil
}

// floorKVPutAsync: each writer publishes to its keys' subjects with a TTL
// without waiting, 64 at a time, then collects the acks. The latency of an
// op is from its publish to its ack being seen.
func floorKVPutAsync(ctx context.Context, cfg config, clients int) (*result, error) {
	e, err := startEnv()
	if err != nil {
		return nil, err
	}
	defer e.close()
	conns, err := e.clientConns(clients)
	if err != nil {
		return nil, err
	}
	if _, err := bucket(ctx, conns[0], "floor_put"); err != nil {
		return nil, err
	}
	const batch = 64
	hs := make([]*hist, clients)
	ops := make([]int64, clients)
	var errs atomic.Int64
	var setupErr atomic.Value
	msgs0 := e.msgs()
	elapsed, cpu := runFor(cfg.duration, clients, func(i int, stop *atomic.Bool) {
		h := &hist{}
		hs[i] = h
		js, err := jetstream.New(conns[i/clientsPerConn], jetstream.WithPublishAsyncTimeout(10*time.Second))
		if err != nil {
			setupErr.Store(err)
			return
		}
		subjects := make([]string, 256)
		for k := range subjects {
			subjects[k] = fmt.Sprintf("$KV.floor_put.w%d-%d", i, k)
		}
		futures := make([]jetstream.PubAckFuture, batch)
		sent := make([]time.Time, batch)
		for n := 0; !stop.Load(); {
			m := 0
			for ; m < batch; m++ {
				sent[m] = time.Now()
				f, err := js.PublishAsync(subjects[(n+m)%len(subjects)], payload, jetstream.WithMsgTTL(recordTTL))
				if err != nil {
					errs.Add(1)
					break
				}
				futures[m] = f
			}
			for k := range m {
				select {
				case <-futures[k].Ok():
					h.record(time.Since(sent[k]))
					ops[i]++
				case <-futures[k].Err(): // also on the ack timeout
					errs.Add(1)
				}
			}
			n += m
		}
	})
	if err, _ := setupErr.Load().(error); err != nil {
		return nil, err
	}
	return &result{Clients: clients, Ops: sum(ops), Elapsed: elapsed, CPU: cpu, Lat: mergeAll(hs), Errors: errs.Load(), Msgs: e.msgs() - msgs0,
		Note: "64 in flight per writer; design: ~90k/s"}, nil
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

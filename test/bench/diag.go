package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
)

// Diagnostic scenarios (-diag) take the product's lease cycle apart, to see
// where its time goes. They are not part of the targets.

// leaseCycleNopEvents is leaseCycle with a manager that publishes no events.
func leaseCycleNopEvents(ctx context.Context, cfg config, clients, capacity int) (*result, error) {
	return leaseCycleWith(ctx, cfg, clients, capacity, managerParts{events: manager.NopEvents{}})
}

// leaseCycleAcked is leaseCycle with a manager that waits for each write's
// acknowledgement, as a Store without EchoWriter makes it: one message
// more per write, and the answer by another path than the watch.
func leaseCycleAcked(ctx context.Context, cfg config, clients, capacity int) (*result, error) {
	return leaseCycleWith(ctx, cfg, clients, capacity, managerParts{acked: true})
}

// leaseCycleMemStore is leaseCycle with a manager whose store costs
// nothing (memStore): the ceiling of the cycle if durable writes and their
// watch echoes were free, with everything else (clients, messaging, events,
// the manager's own work) unchanged.
func leaseCycleMemStore(ctx context.Context, cfg config, clients, capacity int) (*result, error) {
	return leaseCycleWith(ctx, cfg, clients, capacity, managerParts{store: newMemStore()})
}

// rawLeaseCycle drives the real manager (with events) from clients that speak
// the wire protocol directly, without lease.Client: no heartbeat goroutine,
// no reply dispatch through the client's inbox subscription, no spans. The
// difference to the lease/ rows is the client library's share.
func rawLeaseCycle(ctx context.Context, cfg config, clients, capacity int) (*result, error) {
	e, err := startEnv()
	if err != nil {
		return nil, err
	}
	defer e.close()
	n, err := e.startManager(ctx, recordTTL, manager.PoolConfig{Name: "p", Capacity: int64(capacity)})
	if err != nil {
		return nil, err
	}
	defer n.m.Close()
	conns, err := e.clientConns(clients)
	if err != nil {
		return nil, err
	}
	acqSubj := lease.Subject(lease.DefaultPrefix, benchNode, "p", lease.VerbAcquire)
	relSubj := lease.Subject(lease.DefaultPrefix, benchNode, "p", lease.VerbRelease)
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
		nc := conns[i/clientsPerConn]
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			fail(err)
			return
		}
		defer sub.Unsubscribe()
		holder := "raw-" + strconv.Itoa(i)
		queuedMark := []byte(`"status":"queued"`)
		for k := 0; !stop.Load(); k++ {
			id := fmt.Sprintf("r%d-%d", i, k)
			body, _ := json.Marshal(lease.AcquireRequest{RequestID: id, Holder: holder, Slots: 1})
			t0 := time.Now()
			if err := nc.PublishRequest(acqSubj, inbox, body); err != nil {
				fail(err)
				continue
			}
			var r lease.Reply
			for {
				msg, err := sub.NextMsg(30 * time.Second)
				if err != nil {
					fail(err)
					return
				}
				if bytes.Contains(msg.Data, queuedMark) {
					continue
				}
				if err := json.Unmarshal(msg.Data, &r); err != nil {
					fail(err)
					return
				}
				break
			}
			if r.Status != lease.StatusGranted || r.Lease == nil {
				fail(fmt.Errorf("acquire: %+v", r))
				continue
			}
			t1 := time.Now()
			body, _ = json.Marshal(lease.ReleaseRequest{LeaseID: r.Lease.ID, Token: r.Lease.Token})
			msg, err := nc.Request(relSubj, body, 30*time.Second)
			if err != nil || !bytes.Contains(msg.Data, []byte(lease.StatusReleased)) {
				fail(fmt.Errorf("release: %v %s", err, msgData(msg)))
				continue
			}
			h.record(time.Since(t0))
			a.record(t1.Sub(t0))
			ops[i]++
		}
	})
	r := &result{Clients: clients, Ops: sum(ops), Elapsed: elapsed, CPU: cpu, Lat: mergeAll(hs), Acq: mergeAll(as), Errors: errs.Load(), Msgs: e.msgs() - msgs0}
	if s, ok := firstErr.Load().(string); ok {
		r.Note = "first error: " + s
	}
	return r, nil
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	slconfig "github.com/slotlease/slotlease/config"
	sljs "github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/manager"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// heapInUse returns the live heap after a full collection.
func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// poolWaiters: a pools.Pool of capacity 1, held, with n waiters queued by
// Enqueue. Each op queues one more waiter at the tail and releases the slot,
// which grants the head, so the queue stays n deep. The heap figure is the
// live heap added by enqueueing the n waiters, per waiter.
func poolWaiters(cfg config, n int) (*result, error) {
	p := pools.New(1)
	if !p.TryAcquire(1) {
		return nil, errors.New("TryAcquire on an empty pool failed")
	}
	before := heapInUse()
	var mid *pools.Waiter
	for i := range n {
		w, granted, _, err := p.Enqueue(1, nil)
		if granted || err != nil {
			return nil, fmt.Errorf("enqueue on a full pool: granted=%v err=%v", granted, err)
		}
		if i == n/2 {
			mid = w
		}
	}
	perWaiter := float64(heapInUse()-before) / float64(n)
	// What the manager pays, under its lock, to answer a queued client's
	// poll (lease.Client re-sends a queued acquire every poll interval) from
	// the middle of the queue.
	t0 := time.Now()
	if pos := p.Position(mid); pos != n/2+1 {
		return nil, fmt.Errorf("middle waiter at position %d, want %d", pos, n/2+1)
	}
	walk := time.Since(t0)

	const batch = 256
	var ops int64
	var errs atomic.Int64
	elapsed, cpu := runFor(cfg.duration, 1, func(_ int, stop *atomic.Bool) {
		for !stop.Load() {
			for range batch {
				if _, granted, _, _ := p.Enqueue(1, nil); granted {
					errs.Add(1)
				}
				if g := p.Release(1); len(g) != 1 {
					errs.Add(1)
				}
			}
			ops += batch
		}
	})
	if s := p.Stats(); s.QueuedRequests != n || s.InUse != 1 {
		errs.Add(1)
	}
	r := &result{Clients: 1, Ops: ops, Elapsed: elapsed, CPU: cpu, Errors: errs.Load(), BytesPerWaiter: perWaiter}
	r.Note = fmt.Sprintf("%.0f ns/grant, %.0f B/waiter, Position(middle) %s", r.nsPerOp(), perWaiter, fmtDur(walk))
	return r, nil
}

type grantMsg struct {
	id    string
	token uint64
}

// managerWaiters: a real manager with a pool of capacity 1, held by one
// lease, and n acquire requests queued behind it, sent raw on the wire (no
// lease.Client: each would poll, and polls are not what is measured here).
// Each op releases the held lease, waits for the head of the queue to be
// granted, and queues one more request at the tail, so the queue stays n
// deep; the op's latency is release sent → grant received. The heap figure
// is the live heap of the whole process (manager, server, benchmark) added
// by queueing the n requests, per request.
func managerWaiters(ctx context.Context, cfg config, n int) (*result, error) {
	e, err := startEnv()
	if err != nil {
		return nil, err
	}
	defer e.close()
	// A TTL far longer than the run, so no lease here lapses: raw leases
	// are not heartbeated.
	// The queue holds them all: its default bound (slconfig.DefaultMaxQueue)
	// is below the deepest queue measured.
	node, err := e.startManager(ctx, 10*time.Minute, manager.PoolConfig{Name: "w", Capacity: 1, Options: pools.Options{MaxQueue: slconfig.MaxQueueLimit}})
	if err != nil {
		return nil, err
	}
	defer node.m.Close()
	nc, err := e.connect("bench-waiters")
	if err != nil {
		return nil, err
	}

	var queued, replyErrs atomic.Int64
	var closing atomic.Bool
	grants := make(chan grantMsg, 1024)
	queuedSignal := make(chan struct{}, 1)
	queuedMark := []byte(`"status":"queued"`)
	inbox := nc.NewInbox()
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		if bytes.Contains(m.Data, queuedMark) {
			queued.Add(1)
			select {
			case queuedSignal <- struct{}{}:
			default:
			}
			return
		}
		var r lease.Reply
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Status != lease.StatusGranted || r.Lease == nil {
			if !closing.Load() {
				replyErrs.Add(1)
			}
			return
		}
		select {
		case grants <- grantMsg{id: r.Lease.ID, token: r.Lease.Token}:
		default:
			replyErrs.Add(1)
		}
	})
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	defer closing.Store(true)

	acqSubj := lease.Subject(lease.DefaultPrefix, benchNode, "w", lease.VerbAcquire)
	relSubj := lease.Subject(lease.DefaultPrefix, benchNode, "w", lease.VerbRelease)
	acquire := func(id string) error {
		body, err := json.Marshal(lease.AcquireRequest{RequestID: id, Holder: "bench-waiters", Slots: 1})
		if err != nil {
			return err
		}
		return nc.PublishRequest(acqSubj, inbox+"."+id, body)
	}
	waiterID := func(i int) string { return "w" + strconv.Itoa(i) }
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	nextGrant := func(d time.Duration) (grantMsg, error) {
		timeout.Reset(d)
		select {
		case g := <-grants:
			return g, nil
		case <-timeout.C:
			return grantMsg{}, errors.New("no grant")
		}
	}

	if err := acquire("holder"); err != nil {
		return nil, err
	}
	cur, err := nextGrant(10 * time.Second)
	if err != nil {
		return nil, fmt.Errorf("the first lease: %w", err)
	}

	// Every allocation from here to the end of queueing is in the memory
	// profile, so the heap can be split between the manager and the server.
	oldRate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	ownersBefore := sampleHeapOwners()
	before := heapInUse()
	for i := range n {
		if err := acquire(waiterID(i)); err != nil {
			return nil, err
		}
		// Keep the burst within what the server buffers for a connection.
		for i-int(queued.Load()) > 20_000 {
			time.Sleep(time.Millisecond)
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for queued.Load() < int64(n) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d requests queued", queued.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	// The manager may write something per queued request in the background
	// (a queue entry): wait until the lease bucket's stream stops growing,
	// so the heap figure does not count writes still in flight.
	if err := waitStreamSettled(ctx, nc, "KV_"+sljs.NamesFor(lease.DefaultPrefix).Leases); err != nil {
		return nil, err
	}
	perWaiter := float64(heapInUse()-before) / float64(n)
	owners := sampleHeapOwners().sub(ownersBefore)
	runtime.MemProfileRate = oldRate
	if s := node.m.Stats(); len(s) != 1 || s[0].QueuedRequests != n {
		return nil, fmt.Errorf("manager stats after queueing %d: %+v", n, s)
	}

	// Polls: lease.Client re-sends a queued acquire (same request id) every
	// poll interval; the manager answers with the request's position. Time
	// some from the middle of the queue, one at a time.
	const polls = 100
	pollLat := &hist{}
	for k := range polls {
		select {
		case <-queuedSignal:
		default:
		}
		t0 := time.Now()
		if err := acquire(waiterID(n/2 + k%(n/2))); err != nil {
			return nil, err
		}
		timeout.Reset(10 * time.Second)
		select {
		case <-queuedSignal:
		case <-timeout.C:
			return nil, errors.New("no answer to a poll")
		}
		pollLat.record(time.Since(t0))
	}

	var ops, fifoViolations int64
	var errs atomic.Int64
	h := &hist{}
	next, expect := n, 0
	elapsed, cpu := runFor(cfg.duration, 1, func(_ int, stop *atomic.Bool) {
		for !stop.Load() {
			t0 := time.Now()
			body, _ := json.Marshal(lease.ReleaseRequest{LeaseID: cur.id, Token: cur.token})
			msg, err := nc.Request(relSubj, body, 10*time.Second)
			if err != nil || !bytes.Contains(msg.Data, []byte(lease.StatusReleased)) {
				errs.Add(1)
				return
			}
			if err := acquire(waiterID(next)); err != nil {
				errs.Add(1)
				return
			}
			next++
			g, err := nextGrant(10 * time.Second)
			if err != nil {
				errs.Add(1)
				return
			}
			h.record(time.Since(t0))
			ops++
			if g.id != waiterID(expect) {
				fifoViolations++
			}
			expect++
			cur = g
		}
	})
	// Wait for the manager to answer every request sent, so none is still
	// being handled when the manager is closed.
	for deadline := time.Now().Add(10 * time.Second); queued.Load() < int64(next+polls) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	r := &result{Clients: 1, Ops: ops, Elapsed: elapsed, CPU: cpu, Lat: h, Errors: errs.Load() + replyErrs.Load() + fifoViolations,
		BytesPerWaiter: perWaiter, ManagerBytesPerWaiter: float64(owners.manager) / float64(n)}
	r.Note = fmt.Sprintf("%.0f B/waiter (manager %.0f, server %.0f, other %.0f), poll p50 %s", perWaiter,
		float64(owners.manager)/float64(n), float64(owners.server)/float64(n), float64(owners.other)/float64(n),
		fmtDur(pollLat.quantile(0.5)))
	if fifoViolations > 0 {
		r.Note += fmt.Sprintf(", %d grants out of FIFO order", fifoViolations)
	}
	return r, nil
}

// waitStreamSettled waits until stream's message count has not changed for
// 200ms.
func waitStreamSettled(ctx context.Context, nc *nats.Conn, stream string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	var last uint64
	stable := time.Now()
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != last {
			last, stable = info.State.Msgs, time.Now()
		} else if time.Since(stable) >= 200*time.Millisecond {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("stream %s still growing after 5 minutes", stream)
}

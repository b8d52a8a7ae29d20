package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// naiveService is the lease service one would write first with nats.go and
// a KV bucket, and none of the product's code: one subscription whose
// handler does everything in turn. A grant is one KV Create with a TTL
// (stored before the requester hears of it, as in the product), a release
// one KV Delete at the granted revision. It keeps a count of slots in use
// and, in FIFO mode, a queue of requests answered when a slot frees; in
// deny mode a full pool answers "denied" and the client retries.
//
// Wire: "naive.acquire" with the request id as body answers "g<revision>"
// or "d"; "naive.release" with "<id> <revision>" answers "r". Anything else
// is "e".
type naiveService struct {
	ctx      context.Context
	nc       *nats.Conn
	kv       jetstream.KeyValue
	fifo     bool
	capacity int
	inUse    int
	queue    []naiveWaiter
	head     int
}

type naiveWaiter struct{ id, reply string }

func (s *naiveService) handle(m *nats.Msg) {
	switch m.Subject {
	case "naive.acquire":
		id := string(m.Data)
		if s.inUse < s.capacity && s.head == len(s.queue) {
			s.grant(id, m.Reply)
			return
		}
		if !s.fifo {
			_ = m.Respond([]byte("d"))
			return
		}
		s.queue = append(s.queue, naiveWaiter{id, m.Reply})
	case "naive.release":
		id, revStr, ok := bytes.Cut(m.Data, []byte(" "))
		rev, err := strconv.ParseUint(string(revStr), 10, 64)
		if !ok || err != nil {
			_ = m.Respond([]byte("e"))
			return
		}
		if err := s.kv.Delete(s.ctx, string(id), jetstream.LastRevision(rev)); err != nil {
			_ = m.Respond([]byte("e"))
			return
		}
		s.inUse--
		_ = m.Respond([]byte("r"))
		for s.inUse < s.capacity && s.head < len(s.queue) {
			w := s.queue[s.head]
			s.queue[s.head] = naiveWaiter{}
			s.head++
			if s.head == len(s.queue) {
				s.queue, s.head = s.queue[:0], 0
			}
			s.grant(w.id, w.reply)
		}
	default:
		_ = m.Respond([]byte("e"))
	}
}

func (s *naiveService) grant(id, reply string) {
	s.inUse++
	rev, err := s.kv.Create(s.ctx, id, payload, jetstream.KeyTTL(recordTTL))
	if err != nil {
		s.inUse--
		_ = s.nc.Publish(reply, []byte("e"))
		return
	}
	_ = s.nc.Publish(reply, strconv.AppendUint([]byte("g"), rev, 10))
}

// naiveLease runs clients that loop acquire→release against a naiveService.
func naiveLease(ctx context.Context, cfg config, fifo bool, clients, capacity int) (*result, error) {
	e, err := startEnv()
	if err != nil {
		return nil, err
	}
	defer e.close()
	snc, err := e.connect("bench-naive-service")
	if err != nil {
		return nil, err
	}
	kv, err := bucket(ctx, snc, "naive")
	if err != nil {
		return nil, err
	}
	svc := &naiveService{ctx: ctx, nc: snc, kv: kv, fifo: fifo, capacity: capacity}
	sub, err := snc.Subscribe("naive.*", svc.handle)
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := snc.Flush(); err != nil {
		return nil, err
	}
	conns, err := e.clientConns(clients)
	if err != nil {
		return nil, err
	}
	hs := make([]*hist, clients)
	as := make([]*hist, clients)
	ops := make([]int64, clients)
	var errs, denied atomic.Int64
	msgs0 := e.msgs()
	elapsed, cpu := runFor(cfg.duration, clients, func(i int, stop *atomic.Bool) {
		h, a := &hist{}, &hist{}
		hs[i], as[i] = h, a
		nc := conns[i/clientsPerConn]
		prefix := "c" + strconv.Itoa(i) + "-"
		buf := make([]byte, 0, 64)
	cycles:
		for n := 0; !stop.Load(); n++ {
			id := prefix + strconv.Itoa(n)
			t0 := time.Now()
			var rev []byte
			for rev == nil {
				msg, err := nc.Request("naive.acquire", []byte(id), 30*time.Second)
				switch {
				case err != nil || len(msg.Data) == 0 || msg.Data[0] == 'e':
					errs.Add(1)
					continue cycles
				case msg.Data[0] == 'g':
					rev = msg.Data[1:]
				default: // denied: back off and ask again
					denied.Add(1)
					if stop.Load() {
						break cycles
					}
					time.Sleep(500*time.Microsecond + rand.N(time.Millisecond))
				}
			}
			t1 := time.Now()
			buf = append(append(append(buf[:0], id...), ' '), rev...)
			msg, err := nc.Request("naive.release", buf, 30*time.Second)
			if err != nil || string(msg.Data) != "r" {
				errs.Add(1)
				continue
			}
			h.record(time.Since(t0))
			a.record(t1.Sub(t0))
			ops[i]++
		}
	})
	r := &result{Clients: clients, Ops: sum(ops), Elapsed: elapsed, CPU: cpu, Lat: mergeAll(hs), Acq: mergeAll(as), Errors: errs.Load(), Msgs: e.msgs() - msgs0}
	if !fifo {
		r.Note = "denied=" + strconv.FormatInt(denied.Load(), 10)
	}
	return r, nil
}

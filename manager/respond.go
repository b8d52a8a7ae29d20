package manager

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"go.opentelemetry.io/otel/trace"
)

// outbox is the manager's side of its NATS connection: the subscriptions
// it serves, the reply rule (replyto.go) on every request and every answer,
// the replies' encoding buffers, and the event sink. Every answer and event
// goes through it, and it checks the leadership term right before each
// one.
//
// Its methods are called with or without the Manager's lock held, so they
// never call back into the Manager; subs has its own lock (mu), the reply
// rule its own.
type outbox struct {
	conn   *nats.Conn
	rule   *replyRule
	events EventSink
	lead   *leadership
	node   string
	log    *slog.Logger

	buffers Buffers // the replies' encoding buffers
	// stopServer is the id of the server that stops with this manager,
	// once a clean stop was announced (stop.go); nil before. Replies with
	// a lease carry it (ServerStopping).
	stopServer atomic.Pointer[string]

	mu   sync.Mutex
	subs []*nats.Subscription // ended by unsubscribe
}

// subscribe subscribes h to subject; unsubscribe ends it with the others.
func (o *outbox) subscribe(subject string, h nats.MsgHandler) (*nats.Subscription, error) {
	sub, err := o.conn.Subscribe(subject, h)
	if err != nil {
		return nil, fmt.Errorf("lease: subscribe %s: %w", subject, err)
	}
	o.mu.Lock()
	o.subs = append(o.subs, sub)
	o.mu.Unlock()
	return sub, nil
}

// unsubscribe ends every subscription: no handler starts after it.
func (o *outbox) unsubscribe() {
	o.mu.Lock()
	subs := o.subs
	o.subs = nil
	o.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
}

// answerer is a request handler that returns its answer, which serve
// sends: the one place a handler's answer leaves. A zero Reply (no
// Status) means the answer comes later, from the store write or the queue.
type answerer func(msg *nats.Msg) lease.Reply

// serve is h behind guard, its answer sent to the request's reply subject.
func (o *outbox) serve(h answerer) nats.MsgHandler {
	return o.guard(func(msg *nats.Msg) {
		if r := h(msg); r.Status != "" {
			o.respond(msg.Reply, r)
		}
	})
}

// guard keeps the reply rule (replyto.go) for a request handler: a request
// without a reply subject, or whose reply subject is not an inbox, is
// dropped before the handler sees it. The handler runs under protect.
func (o *outbox) guard(h nats.MsgHandler) nats.MsgHandler {
	h = o.protect(h)
	return func(msg *nats.Msg) {
		if msg.Reply == "" {
			o.rule.ignoreNoReply(o.log, msg.Subject)
			return
		}
		if !o.rule.allowed(msg.Reply) {
			o.rule.refuse(o.log, msg.Subject, msg.Reply)
			return
		}
		h(msg)
	}
}

// protect keeps a bug in one handler from taking the process down with
// input from the network: it logs the panic and answers an internal error
// to the reply subject, if any. The server's advisories, which come
// without a reply, are handled under protect alone.
func (o *outbox) protect(h nats.MsgHandler) nats.MsgHandler {
	return func(msg *nats.Msg) {
		defer func() {
			if r := recover(); r != nil {
				o.log.Error("handler panic", "subject", echo.Clip(msg.Subject), "panic", r)
				o.respond(msg.Reply, lease.Reply{Status: lease.StatusError, Error: errorf(lease.CodeInternal, "internal error")})
			}
		}()
		h(msg)
	}
}

// flush logs the refused reply subjects not logged yet; Close calls it.
func (o *outbox) flush() { o.rule.flush(o.log) }

// emit publishes ev as p's event, with p's figures after the change.
func (o *outbox) emit(p *pool, ev lease.Event) {
	if !o.lead.serving() {
		return // fenced: a deposed manager announces nothing
	}
	ev.Time = time.Now().UTC()
	ev.Node = o.node
	ev.Pool = p.name
	ev.Stats = p.p.Stats()
	o.events.Publish(ev)
}

// flushEvents sends the events the sink holds back, if it does (Flusher).
func (o *outbox) flushEvents() {
	if f, ok := o.events.(Flusher); ok {
		f.Flush()
	}
}

func (o *outbox) respond(reply string, r lease.Reply) {
	if reply == "" {
		return // no one to answer
	}
	if s := o.stopServer.Load(); s != nil && r.Lease != nil {
		r.ServerStopping = *s // stop.go
	}
	b := o.buffers.Get()
	data, err := appendReply(*b, &r)
	if err != nil {
		o.log.Error("encoding a reply", "err", err)
		return
	}
	o.publish(reply, nil, data)
	o.buffers.Put(b, data)
}

// endpointAnswer answers a request to an admin endpoint (discovery.go). An
// error also goes in the headers micro uses (Nats-Service-Error,
// Nats-Service-Error-Code), so micro-aware tools see it, and counts in the
// endpoint's figures.
func (o *outbox) endpointAnswer(e *endpoint, reply string, r lease.Reply) {
	if r.Error == nil || reply == "" {
		o.respond(reply, r)
		return
	}
	code, desc := serviceErrorCode(r.Error.Code), headerSafe(r.Error.Message)
	e.failed(code, desc)
	data, err := appendReply(nil, &r)
	if err != nil {
		o.log.Error("encoding a reply", "err", err)
		return
	}
	o.publish(reply, nats.Header{micro.ErrorHeader: {desc}, micro.ErrorCodeHeader: {code}}, data)
}

// answer sends data to msg's reply subject; guard has checked it.
func (o *outbox) answer(msg *nats.Msg, data []byte) { o.publish(msg.Reply, nil, data) }

// publish sends data (with hdr, if any) to reply, a reply subject, if
// the reply rule allows it and the fence is valid: every answer, discovery
// and resize errors included, goes through here. Requests were checked on
// arrival (guard); this check also covers reply subjects restored from
// stored queue entries.
func (o *outbox) publish(reply string, hdr nats.Header, data []byte) {
	if !o.lead.serving() {
		return // fenced: a deposed manager answers nothing
	}
	if !o.rule.allowed(reply) {
		o.rule.refuse(o.log, "", reply)
		return
	}
	var err error
	if hdr == nil {
		err = o.conn.Publish(reply, data)
	} else {
		err = o.conn.PublishMsg(&nats.Msg{Subject: reply, Header: hdr, Data: data})
	}
	if err != nil {
		o.log.Warn("sending a reply", "subject", reply, "err", err)
	}
}

// reject returns the error answer of an acquire and, for a pool this node
// has (p not nil), publishes a rejected event. Unknown pools get no event:
// their name comes from the network and must not mint event subjects.
func (o *outbox) reject(span trace.Span, p *pool, poolName string, req lease.AcquireRequest, e *lease.Error) lease.Reply {
	natstrace.Fail(span, string(e.Code), e.Message)
	if p != nil {
		// The request failed validation, maybe for its size: echo a bounded part.
		o.emit(p, lease.Event{Kind: lease.EventRejected, RequestID: echo.Clip(req.RequestID), Holder: echo.Clip(req.Holder), Slots: req.Slots, Code: e.Code, Message: e.Message})
	} else {
		o.log.Debug("acquire rejected", "pool", echo.Clip(poolName), "code", e.Code, "message", e.Message)
	}
	return errReply(e)
}

func errReply(e *lease.Error) lease.Reply { return lease.Reply{Status: lease.StatusError, Error: e} }

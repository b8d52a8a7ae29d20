package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// delivery is a job the broker fetched for this executor. Its claim is
// the executor's to keep, give back or end, on the delivery's
// acknowledgement subject as any JetStream message's; its final record is
// stored through the broker (settle), with the bind token that proves this
// executor took it.
type delivery struct {
	nc      *nats.Conn
	subject string
	reply   string
	data    []byte
	meta    jetstream.MsgMetadata
	bind    string

	mu   sync.Mutex
	ackd bool
}

var _ jetstream.Msg = (*delivery)(nil)

func newDelivery(nc *nats.Conn, r fetchReply) (*delivery, error) {
	if r.Reply == "" || r.Meta == nil || r.Bind == "" {
		return nil, fmt.Errorf("jobs: the broker's delivery lacks its acknowledgement subject, metadata or bind token")
	}
	m := r.Meta
	return &delivery{nc: nc, subject: r.Subject, reply: r.Reply, data: r.Data, bind: r.Bind,
		meta: jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.StreamSeq, Consumer: m.ConsumerSeq},
			NumDelivered: m.NumDelivered, NumPending: m.NumPending, Timestamp: m.Timestamp, Stream: m.Stream, Consumer: m.Consumer}}, nil
}

func (d *delivery) Metadata() (*jetstream.MsgMetadata, error) { meta := d.meta; return &meta, nil }
func (d *delivery) Data() []byte                              { return d.data }
func (d *delivery) Headers() nats.Header                      { return nil }
func (d *delivery) Subject() string                           { return d.subject }
func (d *delivery) Reply() string                             { return d.reply }

func (d *delivery) Ack() error        { return d.send(nil, "+ACK", true) }
func (d *delivery) Nak() error        { return d.send(nil, "-NAK", true) }
func (d *delivery) InProgress() error { return d.send(nil, "+WPI", false) }
func (d *delivery) Term() error       { return d.send(nil, "+TERM", true) }
func (d *delivery) TermWithReason(reason string) error {
	return d.send(nil, "+TERM "+reason, true)
}

func (d *delivery) NakWithDelay(delay time.Duration) error {
	return d.send(nil, fmt.Sprintf(`-NAK {"delay": %d}`, delay.Nanoseconds()), true)
}

// DoubleAck acknowledges and waits for the server to confirm.
func (d *delivery) DoubleAck(ctx context.Context) error { return d.send(ctx, "+ACK", true) }

// send publishes body on the acknowledgement subject (as a request with
// ctx: the server confirms); final marks the delivery as answered.
func (d *delivery) send(ctx context.Context, body string, final bool) error {
	d.mu.Lock()
	if d.ackd {
		d.mu.Unlock()
		return jetstream.ErrMsgAlreadyAckd
	}
	d.mu.Unlock()
	var err error
	if ctx != nil {
		_, err = d.nc.RequestWithContext(ctx, d.reply, []byte(body))
	} else {
		err = d.nc.Publish(d.reply, []byte(body))
	}
	if err == nil && final {
		d.mu.Lock()
		d.ackd = true
		d.mu.Unlock()
	}
	return err
}

// fetch asks the broker for the next job of one pool, priority and tenant
// key, whose consumer has (or is given) ackWait; nil if there is none.
func (q *Queue) fetch(ctx context.Context, pool string, p Priority, tkey string, ackWait time.Duration) (*delivery, error) {
	var out fetchReply
	if err := q.ask(ctx, verbFetch, consumerRequest{Pool: pool, Priority: p, TenantKey: tkey, AckWaitMs: ackWait.Milliseconds()}, &out); err != nil {
		return nil, err
	}
	if err := brokerError(verbFetch, out.Error); err != nil {
		return nil, err
	}
	if out.Empty {
		return nil, nil
	}
	return newDelivery(q.js.Conn(), out)
}

// consumerInfo asks the broker for the figures of one pool, priority and
// tenant key's consumer; with ackWait > 0 it makes (or updates) it first.
func (q *Queue) consumerInfo(ctx context.Context, pool string, p Priority, tkey string, ackWait time.Duration) (consumerReply, error) {
	var out consumerReply
	if err := q.ask(ctx, verbConsumer, consumerRequest{Pool: pool, Priority: p, TenantKey: tkey, AckWaitMs: ackWait.Milliseconds()}, &out); err != nil {
		return out, err
	}
	return out, brokerError(verbConsumer, out.Error)
}

// settle stores rec, final, through the broker for the taker of d, as
// mode says: at rev (errMoved if the stored record is not), over anything,
// or in the dead-letter bucket. It returns the new revision.
func (q *Queue) settle(ctx context.Context, d *delivery, rec *Record, rev uint64, mode settleMode) (uint64, error) {
	rec.UpdatedAt = time.Now().UTC()
	val, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	var out settleReply
	if err := q.ask(ctx, verbSettle, settleRequest{Reply: d.reply, Bind: d.bind, Dead: mode == settleDead, Any: mode == settleAny, Rev: rev, Record: val}, &out); err != nil {
		return 0, err
	}
	if out.Moved {
		return 0, errMoved
	}
	if err := brokerError(verbSettle, out.Error); err != nil {
		return 0, err
	}
	return out.Rev, nil
}

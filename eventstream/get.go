package eventstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// directGet is the subject prefix of a stream's direct gets.
const directGet = "$JS.API.DIRECT.GET."

// replayTimeout bounds the wait for one batch.
const replayTimeout = 5 * time.Second

// ErrNoEventStream says the managers keep no event stream to read (or the
// caller's account may not read it).
var ErrNoEventStream = errors.New("no event stream: the lease manager keeps none (EVENT_RETENTION=0?)")

// reader is one read's position in a stream.
type reader struct {
	nc              *nats.Conn
	subject, filter string
	last            uint64 // the stream sequence of the last event delivered
}

// batch sends one batched direct get and delivers what it answers, up to
// its end-of-batch (or not-found) status. It returns how many it delivered
// and whether more matching events were stored after them (the server's
// Nats-Num-Pending). A ctx that ends is no error.
func (r *reader) batch(ctx context.Context, req []byte, fn func(string, []byte)) (n int, more bool, err error) {
	err = r.each(ctx, req, func(msg *nats.Msg) {
		seq, err := strconv.ParseUint(msg.Header.Get(nats.JSSequence), 10, 64)
		if err != nil || seq <= r.last {
			return // not an event of this batch
		}
		pending, _ := strconv.ParseUint(msg.Header.Get("Nats-Num-Pending"), 10, 64)
		r.last, more = seq, pending > 0
		n++
		fn(msg.Header.Get(nats.JSSubject), msg.Data)
	})
	return n, more, err
}

// each sends one direct get and hands every stored message it answers to
// fn, until the end-of-batch or not-found status.
func (r *reader) each(ctx context.Context, req []byte, fn func(*nats.Msg)) error {
	if ctx.Err() != nil {
		return nil
	}
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := r.nc.PublishRequest(r.subject, inbox, req); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, replayTimeout)
	defer cancel()
	for {
		msg, err := sub.NextMsgWithContext(bctx)
		if errors.Is(err, nats.ErrNoResponders) {
			return ErrNoEventStream
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("eventstream: no answer from the event stream: %w", err)
		}
		switch status := msg.Header.Get("Status"); status {
		case "":
			fn(msg)
			if msg.Header.Get("Nats-Num-Pending") == "" {
				return nil // a single get: no batch, no end-of-batch status
			}
		case "204", "404": // end of batch; nothing (more) stored
			return nil
		case "503":
			return ErrNoEventStream
		default:
			return fmt.Errorf("eventstream: %s %s", status, msg.Header.Get("Description"))
		}
	}
}

// Last returns the newest limit events on filter (the stream's subjects,
// <prefix>.events.>, for every event), oldest first, as they were stored.
func Last(ctx context.Context, nc *nats.Conn, stream, filter string, limit int) ([][]byte, error) {
	if limit <= 0 {
		return nil, nil
	}
	r := reader{nc: nc, subject: directGet + stream, filter: filter}
	var last uint64
	req := fmt.Appendf(nil, `{"last_by_subj":%q}`, filter)
	if err := r.each(ctx, req, func(msg *nats.Msg) {
		last, _ = strconv.ParseUint(msg.Header.Get(nats.JSSequence), 10, 64)
	}); err != nil {
		return nil, err
	}
	if last == 0 {
		return [][]byte{}, nil
	}
	var from uint64 = 1
	if last > uint64(limit) {
		from = last - uint64(limit) + 1
	}
	out := make([][]byte, 0, limit)
	req = fmt.Appendf(nil, `{"seq":%d,"batch":%d,"next_by_subj":%q,"up_to_seq":%d}`, from, limit, filter, last)
	_, _, err := r.batch(ctx, req, func(_ string, data []byte) { out = append(out, data) })
	return out, err
}

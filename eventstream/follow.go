package eventstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Follow reads batches of direct gets from a sequence on; live events on
// the imported event subjects only wake it to read the next batch, and a
// poll every replayPoll covers a wake-up that came before the stream
// stored the event.

const (
	// replayBatch is how many events one direct get asks for.
	replayBatch = 256
	// replayPoll is how often a follow that heard nothing asks anyway.
	replayPoll = time.Second
	// replayRetry is how soon it asks again after a wake-up that found
	// nothing new: the stream stores an event just after it passes.
	replayRetry = 50 * time.Millisecond
)

// Follow delivers the stored events on filter since the given time, then
// follows new ones, until ctx ends. fn runs on the caller's goroutine, in
// stream order, each event once.
func Follow(ctx context.Context, nc *nats.Conn, stream, filter string, since time.Time, fn func(subject string, data []byte)) error {
	wake := make(chan struct{}, 1)
	live, err := nc.Subscribe(filter, func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer live.Unsubscribe()
	if err := nc.FlushTimeout(replayTimeout); err != nil {
		return err
	}
	r := reader{nc: nc, subject: directGet + stream, filter: filter}
	first, err := json.Marshal(map[string]any{"start_time": since.UTC(), "batch": replayBatch, "next_by_subj": filter})
	if err != nil {
		return err
	}
	n, more, err := r.batch(ctx, first, fn)
	if errors.Is(err, ErrNoEventStream) {
		return fmt.Errorf("%w (stream %q)", err, stream)
	}
	poll := time.NewTimer(replayPoll)
	defer poll.Stop()
	for err == nil {
		if more { // the batch ended with events still stored: read on
			n, more, err = r.next(ctx, fn)
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			if n, more, err = r.next(ctx, fn); n == 0 {
				poll.Reset(replayRetry)
			}
		case <-poll.C:
			n, more, err = r.next(ctx, fn)
			poll.Reset(replayPoll)
		}
	}
	return err
}

// next reads the batch after the last event delivered.
func (r *reader) next(ctx context.Context, fn func(string, []byte)) (int, bool, error) {
	req := fmt.Appendf(nil, `{"seq":%d,"batch":%d,"next_by_subj":%q}`, r.last+1, replayBatch, r.filter)
	return r.batch(ctx, req, fn)
}

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/slotlease/slotlease/manager"
)

// Watch streams the latest record of every key matching filter, then every
// change, each with the TTL it was stored with. It is nats.go's KV watch (an
// ordered push consumer delivering the last message per key) read at the
// message level, because a KV entry does not carry its headers, and the
// manager refuses records stored without a TTL (manager.Change.TTL). It goes
// through the legacy JetStreamContext because that is what kv.Watch itself
// uses: the same consumer, heartbeats and gap recovery as before, where the
// newer API's ordered consumer is pull-based and would change them.
//
// ctx bounds the setup and the watch: it runs until Stop, until ctx ends or
// until the connection closes, and then closes Changes. ctx bounds the
// consumer's creation (a connection reset during set-up must not hold a
// manager's take-over for the JetStream API timeout); the resets of the
// ordered consumer later use the JetStream context's own settings, and the
// end of ctx calls Stop.
func (s *LeaseStore) Watch(ctx context.Context, filter string) (manager.Watcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jetstream: watch %q: %w", filter, err)
	}
	js, err := s.nc.JetStream()
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	// The stream leader's last sequence of the filter, asked before the
	// consumer exists: the initial state is complete only once the watch
	// has delivered it (or a later one). The ordered consumer may live on a
	// follower that is still catching up after a restart, whose pending
	// count says "nothing more" while the leader holds records it lacks; a
	// rebuild that trusted it would serve with leases missing, over-grant
	// them, and later delete their records as another instance's
	// (TestRollingRestart).
	last, err := s.leaderLastSeq(ctx, s.subject+filter)
	if err != nil {
		return nil, fmt.Errorf("jetstream: watch %q: %w", filter, err)
	}
	w := &watcher{out: make(chan manager.Change, 256), stop: make(chan struct{}), prefix: len(s.subject), last: last}
	// Held until the initial state is known, so that no change is sent
	// before the caught-up marker of an empty bucket.
	w.mu.Lock()
	defer w.mu.Unlock()
	sub, err := js.Subscribe(s.subject+filter, w.deliver,
		nats.BindStream("KV_"+s.kv.Bucket()), nats.OrderedConsumer(), nats.DeliverLastPerSubject(), nats.Context(ctx))
	if err != nil {
		return nil, fmt.Errorf("jetstream: watch %q: %w", filter, err)
	}
	// Called on the subscription's delivery goroutine after its last
	// message, so no send races the close.
	sub.SetClosedHandler(func(string) { close(w.out) })
	w.sub = sub
	if ctx.Err() != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("jetstream: watch %q: %w", filter, ctx.Err())
	}
	if pending, err := sub.InitialConsumerPending(); err == nil && pending == 0 && w.seen == 0 && last == 0 {
		w.caughtUp = true
		w.out <- manager.Change{Op: manager.ChangeCaughtUp} // out is empty: cannot block
	}
	stopCtx := context.AfterFunc(ctx, func() { _ = w.Stop() })
	w.stopCtx.Store(&stopCtx)
	return w, nil
}

// watcher translates the bucket's messages into changes. Its goroutine is
// the subscription's own: Stop unsubscribes, which ends it, and it closes
// Changes on its way out.
type watcher struct {
	sub      *nats.Subscription
	out      chan manager.Change
	stop     chan struct{}
	stopOnce sync.Once
	stopCtx  atomic.Pointer[func() bool] // unregisters the Stop that ctx's end would call
	prefix   int                         // length of "$KV.<bucket>."

	mu       sync.Mutex // serializes deliveries with the end of the setup
	seen     int
	caughtUp bool
	last     uint64 // the stream leader's last sequence of the filter at the start
	maxSeq   uint64 // the highest sequence delivered
}

func (w *watcher) Changes() <-chan manager.Change { return w.out }

func (w *watcher) Stop() error {
	var err error
	w.stopOnce.Do(func() {
		if stop := w.stopCtx.Load(); stop != nil {
			(*stop)()
		}
		close(w.stop)
		err = w.sub.Unsubscribe()
		if errors.Is(err, nats.ErrBadSubscription) || errors.Is(err, nats.ErrConsumerNotFound) {
			// Already ended with the connection, or the server had
			// already dropped the ordered consumer Unsubscribe deletes
			// (seen at shutdown): either way nothing is left to stop.
			err = nil
		}
	})
	return err
}

func (w *watcher) send(c manager.Change) bool {
	select {
	case w.out <- c:
		return true
	case <-w.stop:
		return false
	}
}

// deliver translates one message. The initial state is complete at the
// first message with nothing pending after it once the leader's last
// sequence of the filter has been delivered, or at once when the leader
// held nothing for it (see Watch).
func (w *watcher) deliver(m *nats.Msg) {
	meta, err := m.Metadata()
	if err != nil || len(m.Subject) <= w.prefix {
		return
	}
	c := manager.Change{Key: m.Subject[w.prefix:], Value: m.Data, Rev: meta.Sequence.Stream, Op: manager.ChangePut, TTL: MsgTTL(m.Header)}
	switch m.Header.Get(kvOperation) {
	case "DEL":
		c.Op = manager.ChangeDelete
	case "PURGE":
		c.Op = manager.ChangeExpire
	case "":
		switch m.Header.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			c.Op = manager.ChangeExpire
		case "Remove":
			c.Op = manager.ChangeDelete
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen++
	if !w.send(c) {
		return
	}
	w.maxSeq = max(w.maxSeq, meta.Sequence.Stream)
	if !w.caughtUp && meta.NumPending == 0 && w.maxSeq >= w.last {
		w.caughtUp = true
		w.send(manager.Change{Op: manager.ChangeCaughtUp})
	}
}

// MsgTTL reads a stored message's TTL header (Nats-TTL) as the server
// reads it: a Go duration or whole seconds; 0 if there is none, if it says
// "never", or if it does not parse.
func MsgTTL(h nats.Header) time.Duration {
	v := h.Get(jetstream.MsgTTLHeader)
	if v == "" || strings.EqualFold(v, "never") {
		return 0
	}
	if d, err := time.ParseDuration(v); err == nil {
		return max(d, 0)
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && n < int64(1<<63-1)/int64(time.Second) {
		return time.Duration(n) * time.Second
	}
	return 0
}

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// AuditConfig describes the stream that keeps lease events for replay.
type AuditConfig struct {
	Stream   string        // NamesFor(prefix).Events
	Subjects string        // lease.EventFilter(prefix, "", "", "") with '>' : <prefix>.events.>
	MaxAge   time.Duration // retention; required (> 0)
	MaxBytes int64         // size cap; 256 MiB if zero
	Replicas int           // 1 if zero
}

// EnsureAuditStream creates or updates the event stream. Events are
// published on core NATS; the stream captures them as they pass, so the
// publisher never waits for it.
func EnsureAuditStream(ctx context.Context, nc *nats.Conn, cfg AuditConfig) error {
	if cfg.MaxAge <= 0 {
		return errors.New("jetstream: event retention must be positive")
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 256 << 20
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "slotlease: lease events, kept for replay (leasemgr watch --since)",
		Subjects:    []string{cfg.Subjects},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      cfg.MaxAge,
		MaxBytes:    cfg.MaxBytes,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("jetstream: event stream %q: %w", cfg.Stream, err)
	}
	return nil
}

// ReplayEvents delivers the stored events on filter since the given time,
// then follows new ones, until ctx ends. fn runs on one goroutine, in order.
func ReplayEvents(ctx context.Context, nc *nats.Conn, stream, filter string, since time.Time, fn func(subject string, data []byte)) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("no event stream %q: the lease manager keeps none (EVENT_RETENTION=0?)", stream)
		}
		return fmt.Errorf("jetstream: replay events: %w", err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done() // the caller's end, or our return
		msgs.Stop()
	}()
	for {
		msg, err := msgs.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		fn(msg.Subject(), msg.Data())
	}
}

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
// publisher never waits for it. Direct gets are allowed: they are how
// readers replay it (ReplayEvents).
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
		// Readers replay it with direct gets (replay.go): the one
		// JetStream request their account may make of the managers'.
		AllowDirect: true,
	})
	if err != nil {
		return fmt.Errorf("jetstream: event stream %q: %w", cfg.Stream, err)
	}
	return nil
}

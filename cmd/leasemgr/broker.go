package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
)

// startJobBroker starts the job queue's broker (jobs/broker.go) on jobsNC,
// the connection with the job queue administrator's rights, signing with
// the cluster's key, read (or made, on first start) through nc in the
// managers' account. Outcomes stored before the key existed are signed
// once, when it is made. refused counts the records a verify refused.
func startJobBroker(ctx context.Context, nc, jobsNC *nats.Conn, cfg *config.Manager, log *slog.Logger, refused func(int)) (*jobs.Broker, error) {
	// The key's bucket is made as the set-up's are, and tried again as
	// they are while JetStream does not answer: right after a cluster
	// forms, two managers starting at once saw their creates go
	// unanswered for tens of seconds, and leasemgr exited.
	var (
		key     []byte
		created bool
	)
	_, err := retrying(ctx, log, "the job broker's key", func(attempt int) error {
		kctx, cancel := context.WithTimeout(ctx, stepTimeout(attempt))
		defer cancel()
		var err error
		key, created, err = jetstream.JobsKey(kctx, nc, cfg.SubjectPrefix, cfg.Replicas)
		return err
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := jobs.StartBroker(ctx, jobs.BrokerConfig{Conn: jobsNC, Prefix: cfg.SubjectPrefix, Key: key, Logger: log, Refused: refused})
	if err != nil {
		return nil, fmt.Errorf("the job queue's broker: %w", err)
	}
	if created {
		n, err := b.Adopt(ctx)
		if err != nil {
			log.Warn("signing the outcomes stored before this version; readers refuse the rest", "signed", n, "err", err)
		} else if n > 0 {
			log.Info("signed the job outcomes stored before this version", "records", n)
		}
	}
	return b, nil
}

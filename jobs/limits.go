package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Every stream and bucket an executor may write is capped, in bytes and
// in messages, so that one executor credential cannot fill its account's
// store (or, on a server without account limits, the server's, which the
// lease managers need to renew their leases and leadership). The job
// stream (Config.MaxBytes) refuses submits once full; the buckets are
// capped at fractions of it, so one figure sizes the whole queue:
//
//	job stream   MaxBytes        1 GiB by default
//	results      MaxBytes / 2    512 MiB
//	dead letters MaxBytes / 4    256 MiB
//
// 7/4 of MaxBytes in all. Full buckets refuse new keys but still take a
// new revision of a key they hold that is no larger (the server replaces
// it in place), so the jobs already recorded can still finish.
const (
	resultsShare = 2 // results get MaxBytes / resultsShare
	deadShare    = 4 // dead letters get MaxBytes / deadShare
	// bytesPerRecord bounds a bucket's keys at one per this many bytes of
	// its cap: the server keeps an index entry in memory for every key,
	// whatever its size, so a flood of tiny values under distinct keys
	// would cost it memory the byte cap does not bound.
	bytesPerRecord = 512
)

// MaxBytesFor is the Config.MaxBytes whose stream and buckets fit in an
// account's store cap of store bytes: half of it, so that the queue
// reserves 7/8 of the cap.
func MaxBytesFor(store int64) int64 { return store / 2 }

// StoreBytes is what a queue of cfg reserves in all, per replica.
func (cfg Config) StoreBytes() int64 {
	m := cmp.Or(cfg.MaxBytes, DefaultMaxQueuedBytes)
	return m + m/resultsShare + m/deadShare
}

// caps are one stream's limits.
type caps struct {
	stream   string
	maxBytes int64
	maxMsgs  int64 // 0: no message cap (the job stream: few subjects)
}

// capsOf are the caps of the queue's stream and buckets for cfg (with
// defaults applied).
func capsOf(n Names, cfg Config) []caps {
	results, dead := cfg.MaxBytes/resultsShare, cfg.MaxBytes/deadShare
	return []caps{
		{stream: n.Stream, maxBytes: cfg.MaxBytes},
		{stream: "KV_" + n.Results, maxBytes: results, maxMsgs: results / bytesPerRecord},
		{stream: "KV_" + n.Dead, maxBytes: dead, maxMsgs: dead / bytesPerRecord},
	}
}

// ApplyCaps gives the queue's stream and buckets the caps of cfg where
// they have others: a store made before the buckets had caps, or a new
// store cap (NATS_EXECUTORS_MAX_STORE). Lowered caps go first, so that
// the account's reservations (the sum of its streams' caps, which must fit
// its store cap) fit at every step. A lowered cap drops nothing stored:
// the queue's streams discard new messages, never old ones, so one that
// holds more than its new cap refuses writes until its records expire.
// Only the executors' account's administrator may update streams;
// leasemgr calls this at start.
func (q *Queue) ApplyCaps(ctx context.Context, cfg Config) error {
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, DefaultMaxQueuedBytes)
	type change struct {
		cfg   jetstream.StreamConfig
		lower bool
	}
	var changes []change
	for _, c := range capsOf(q.names, cfg) {
		s, err := q.js.Stream(ctx, c.stream)
		if err != nil {
			return fmt.Errorf("jobs: stream %s: %w", c.stream, err)
		}
		sc := s.CachedInfo().Config
		if sc.MaxBytes == c.maxBytes && (c.maxMsgs == 0 || sc.MaxMsgs == c.maxMsgs) {
			continue
		}
		lower := sc.MaxBytes > c.maxBytes
		sc.MaxBytes = c.maxBytes
		if c.maxMsgs > 0 {
			sc.MaxMsgs = c.maxMsgs
		}
		changes = append(changes, change{cfg: sc, lower: lower})
	}
	slices.SortStableFunc(changes, func(a, b change) int {
		switch {
		case a.lower == b.lower:
			return 0
		case a.lower:
			return -1
		}
		return 1
	})
	var errs []error
	for _, c := range changes {
		if _, err := q.js.UpdateStream(ctx, c.cfg); err != nil {
			errs = append(errs, fmt.Errorf("jobs: capping stream %s at %d bytes: %w", c.cfg.Name, c.cfg.MaxBytes, err))
		}
	}
	return errors.Join(errs...)
}

// capNewBucket gives a bucket just created its message cap, which a
// bucket's configuration cannot carry: whoever created it may update it.
func capNewBucket(ctx context.Context, js jetstream.JetStream, bucket string, maxMsgs int64) error {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return err
	}
	sc := s.CachedInfo().Config
	if sc.MaxMsgs == maxMsgs {
		return nil
	}
	sc.MaxMsgs = maxMsgs
	_, err = js.UpdateStream(ctx, sc)
	return err
}

package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Reading a bucket without a consumer. A KV watch is a consumer on the
// bucket's stream, and consumers are what one credential can use up for
// everyone sharing the account (a stream's consumer limit, the server's
// memory): executors therefore have no right to make any on the job
// queue's buckets (docs/security.md, "Limits per account"). They read a
// bucket in stream order with batched direct gets instead: every entry of
// the bucket's subjects after the last sequence read, which for a bucket
// keeping one value per key (History 1) is what a watch delivers, in the
// order the values were written.

// scanBatch is how many entries one direct get answers at most, and
// scanMaxBytes how many bytes: a record is at most 2 x MaxSpecBytes.
const (
	scanBatch    = 128
	scanMaxBytes = 8 << 20
)

// scanEntry is one value of a bucket as stored.
type scanEntry struct {
	key     string
	seq     uint64
	deleted bool // a delete, purge or expiry marker: the key has no value
	value   []byte
	header  nats.Header
}

// scanner reads the entries of one bucket's subjects matching filter, in
// stream order, from sequence next on. It is not safe for concurrent use.
type scanner struct {
	nc     *nats.Conn
	api    string // $JS.API.DIRECT.GET.KV_<bucket>
	prefix string // $KV.<bucket>.
	filter string // subjects read: prefix + a key pattern
	next   uint64 // the first sequence not read yet
}

// newScanner reads bucket's keys matching pattern (a NATS subject pattern
// over keys, "*" for every job record) from sequence from on.
func newScanner(nc *nats.Conn, bucket, pattern string, from uint64) *scanner {
	prefix := "$KV." + bucket + "."
	return &scanner{nc: nc, api: "$JS.API.DIRECT.GET.KV_" + bucket, prefix: prefix, filter: prefix + pattern, next: max(from, 1)}
}

// errScanAnswer: the server's answer to a batched read was not one.
var errScanAnswer = errors.New("jobs: unexpected answer to a bucket read")

// read returns the entries written since the last read (at most one
// batch), and whether it read up to the end of the stream as it stood.
func (s *scanner) read(ctx context.Context) (entries []scanEntry, caughtUp bool, err error) {
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	body := fmt.Appendf(nil, `{"seq":%d,"next_by_subj":%q,"batch":%d,"max_bytes":%d}`, s.next, s.filter, scanBatch, scanMaxBytes)
	if err := s.nc.PublishRequest(s.api, inbox, body); err != nil {
		return nil, false, err
	}
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("jobs: reading %s: %w", strings.TrimSuffix(s.prefix, "."), err)
		}
		switch status := msg.Header.Get("Status"); status {
		case "":
		case "404": // nothing after next
			return entries, true, nil
		case "204": // end of the batch
			return entries, msg.Header.Get("Nats-Num-Pending") == "0", nil
		case "503":
			return nil, false, fmt.Errorf("jobs: reading %s: %w", strings.TrimSuffix(s.prefix, "."), nats.ErrNoResponders)
		default:
			return nil, false, fmt.Errorf("%w: status %s %s", errScanAnswer, status, msg.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(msg.Header.Get("Nats-Sequence"), 10, 64)
		subject := msg.Header.Get("Nats-Subject")
		key, ok := strings.CutPrefix(subject, s.prefix)
		if err != nil || !ok || seq < s.next {
			return nil, false, fmt.Errorf("%w: entry %q at %q", errScanAnswer, subject, msg.Header.Get("Nats-Sequence"))
		}
		s.next = seq + 1
		entries = append(entries, scanEntry{key: key, seq: seq, deleted: deleteMarker(msg.Header), value: msg.Data, header: msg.Header})
	}
}

// readAll reads until it has caught up with the stream, calling f for each
// entry.
func (s *scanner) readAll(ctx context.Context, f func(scanEntry)) error {
	for {
		entries, caughtUp, err := s.read(ctx)
		if err != nil {
			return err
		}
		for _, e := range entries {
			f(e)
		}
		if caughtUp {
			return nil
		}
	}
}

// recordOf decodes a job record entry: ok is false for anything else (a
// cancel marker, a delete, a value that is not a record of its key).
func recordOf(e scanEntry) (rec Record, ok bool) {
	if e.deleted || strings.Contains(e.key, ".") {
		return Record{}, false
	}
	r, err := decodeRecord(e)
	if err != nil || r.ID != e.key {
		return Record{}, false
	}
	return *r, true
}

// getEntry reads the value of key in bucket with a direct get, headers and
// all (a KeyValue's Get drops the signature); ErrNotFound if it has none.
func (q *Queue) getEntry(ctx context.Context, bucket, key string) (scanEntry, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	subject := "$KV." + bucket + "." + key
	msg, err := q.js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_"+bucket+"."+subject, nil)
	if err != nil {
		return scanEntry{}, fmt.Errorf("jobs: reading %s: %w", key, err)
	}
	switch status := msg.Header.Get("Status"); status {
	case "":
	case "404":
		return scanEntry{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	default:
		return scanEntry{}, fmt.Errorf("jobs: reading %s: %w: status %s %s", key, errScanAnswer, status, msg.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(msg.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return scanEntry{}, fmt.Errorf("jobs: reading %s: %w: no sequence", key, errScanAnswer)
	}
	e := scanEntry{key: key, seq: seq, deleted: deleteMarker(msg.Header), value: msg.Data, header: msg.Header}
	if e.deleted {
		return scanEntry{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return e, nil
}

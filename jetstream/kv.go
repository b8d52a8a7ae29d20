package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/slotlease/slotlease/manager"
)

// MarkerTTL is how long the bucket keeps the markers left by an expired or
// deleted lease. Watchers see a marker the moment it is written; keeping it
// a while longer lets a manager that restarts soon after still see it, and
// then it goes, so released leases do not pile up in the stream.
const MarkerTTL = time.Minute

// BucketConfig describes the lease bucket.
type BucketConfig struct {
	Name     string // NamesFor(prefix).Leases
	Replicas int    // 1 for a single server, 3 on a cluster
}

// LeaseStore keeps lease records in a JetStream KV bucket with a TTL per
// key. It implements manager.Store.
type LeaseStore struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	subject string // "$KV.<bucket>." : writes publish here directly
}

var _ manager.Store = (*LeaseStore)(nil)

// OpenLeaseStore creates or binds the lease bucket. Per-key TTLs need
// LimitMarkerTTL on the bucket; one revision per key is all a lease needs.
func OpenLeaseStore(ctx context.Context, nc *nats.Conn, cfg BucketConfig) (*LeaseStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         cfg.Name,
		Description:    bucketDescription(cfg.Name),
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       cfg.Replicas,
		LimitMarkerTTL: MarkerTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: lease bucket %q: %w", cfg.Name, err)
	}
	return &LeaseStore{nc: nc, js: js, kv: kv, subject: "$KV." + cfg.Name + "."}, nil
}

// Create stores a new record with a TTL. It writes the key expecting no
// earlier revision, as kv.Create does first; only if the key has one (a
// marker left by a delete or an expiry, or a live record) does it hand
// over to kv.Create, which writes over a marker and refuses a live record.
func (s *LeaseStore) Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	rev, err := s.write(ctx, key, value, writeHeader(0, ttl))
	if !wrongLastSeq(err) {
		return rev, err
	}
	opts := []jetstream.KVCreateOpt{}
	if ttl > 0 {
		opts = append(opts, jetstream.KeyTTL(ttl))
	}
	rev, err = s.kv.Create(ctx, key, value, opts...)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %w", manager.ErrStoreExists, err)
	}
	return rev, err
}

// Renew rewrites the record with a fresh TTL if its latest revision is rev.
// kv.Update would drop the TTL (nats.go issue 1994), so this publishes to the
// key's subject with the expected revision and a TTL header itself.
func (s *LeaseStore) Renew(ctx context.Context, key string, value []byte, ttl time.Duration, rev uint64) (uint64, error) {
	newRev, err := s.write(ctx, key, value, writeHeader(rev, ttl))
	if wrongLastSeq(err) {
		return 0, fmt.Errorf("%w: %w", manager.ErrStoreRevision, err)
	}
	return newRev, err
}

// Delete purges the record if its latest revision is rev, as kv.Purge with
// LastRevision and PurgeTTL does: a purge drops all of the key's history,
// and its marker expires after MarkerTTL.
func (s *LeaseStore) Delete(ctx context.Context, key string, rev uint64) error {
	_, err := s.write(ctx, key, nil, purgeHeader(rev))
	if wrongLastSeq(err) {
		return fmt.Errorf("%w: %w", manager.ErrStoreRevision, err)
	}
	return err
}

var _ manager.EchoWriter = (*LeaseStore)(nil)

// SendCreate, SendRenew and SendDelete send the write Create, Renew and
// Delete make without a reply subject: the server stores it, or refuses it,
// without answering, and the watch shows it stored. SendCreate expects no
// revision at all, so unlike Create it is refused where a delete or an
// expiry left a marker.
func (s *LeaseStore) SendCreate(key string, value []byte, ttl time.Duration) error {
	return s.send(key, value, writeHeader(0, ttl))
}

func (s *LeaseStore) SendRenew(key string, value []byte, ttl time.Duration, rev uint64) error {
	return s.send(key, value, writeHeader(rev, ttl))
}

func (s *LeaseStore) SendDelete(key string, rev uint64) error {
	return s.send(key, nil, purgeHeader(rev))
}

func (s *LeaseStore) send(key string, data []byte, h nats.Header) error {
	return s.nc.PublishMsg(&nats.Msg{Subject: s.subject + key, Data: data, Header: h})
}

// purgeHeader is the header of Delete's purge, conditional on rev.
func purgeHeader(rev uint64) nats.Header {
	h := writeHeader(rev, MarkerTTL)
	h[kvOperation] = []string{"PURGE"}
	h[jetstream.MsgRollup] = []string{jetstream.MsgRollupSubject}
	return h
}

// kvOperation is the header that marks a KV delete or purge.
const kvOperation = "KV-Operation"

// writeHeader expects the key's latest revision to be rev (0: no revision,
// as for a new key) and sets the message's TTL, if any.
func writeHeader(rev uint64, ttl time.Duration) nats.Header {
	h := nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(rev, 10)}}
	if ttl > 0 {
		h[jetstream.MsgTTLHeader] = []string{ttl.String()}
	}
	return h
}

// write publishes data to key's subject with h and returns the stored
// revision. It is js.PublishMsg without decoding every acknowledgement with
// encoding/json (2-3 % of a busy manager's CPU): an acknowledgement of the
// usual shape is read by parseAck, anything else by encoding/json.
func (s *LeaseStore) write(ctx context.Context, key string, data []byte, h nats.Header) (uint64, error) {
	msg := &nats.Msg{Subject: s.subject + key, Data: data, Header: h}
	resp, err := s.nc.RequestMsgWithContext(ctx, msg)
	if errors.Is(err, nats.ErrNoResponders) {
		// No stream leader at this moment (an election, a restart):
		// js.PublishMsg retries for a while.
		ack, err := s.js.PublishMsg(ctx, msg)
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	if err != nil {
		return 0, err
	}
	return parseAck(resp.Data)
}

// Put writes a key unconditionally, without a TTL.
func (s *LeaseStore) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return s.kv.Put(ctx, key, value)
}

// parseAck returns the sequence of a JetStream publish acknowledgement.
// The usual one, {"stream":"<name>","seq":<n>} possibly followed by more
// fields, is read by hand; an error or any other shape is decoded as
// js.PublishMsg decodes it, with the same errors.
func parseAck(data []byte) (uint64, error) {
	const streamField, seqField = `{"stream":"`, `","seq":`
	if rest, ok := bytes.CutPrefix(data, []byte(streamField)); ok && !bytes.Contains(data, []byte(`"error"`)) {
		if end := bytes.IndexByte(rest, '"'); end > 0 {
			if rest, ok = bytes.CutPrefix(rest[end:], []byte(seqField)); ok {
				var seq uint64
				n := 0
				for ; n < len(rest) && n < 20 && rest[n] >= '0' && rest[n] <= '9'; n++ {
					seq = seq*10 + uint64(rest[n]-'0')
				}
				if n > 0 && n < 20 && n < len(rest) && (rest[n] == '}' || rest[n] == ',') {
					return seq, nil
				}
			}
		}
	}
	var ack struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(data, &ack); err != nil {
		return 0, jetstream.ErrInvalidJSAck
	}
	if ack.Error != nil {
		return 0, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.Stream == "" {
		return 0, jetstream.ErrInvalidJSAck
	}
	return ack.Seq, nil
}

// wrongLastSeq reports a CAS conflict: 10071, or 10164 on replicated streams.
func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

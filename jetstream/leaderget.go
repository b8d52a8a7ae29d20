package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/slotlease/slotlease/manager"
)

// Reads that must see every acknowledged write go to the stream's leader.
// nats.go's kv.Get is a direct get, which any replica answers, and a
// follower that lags answers with an older record, or "not found" for one
// the leader has stored. A manager that resolved a lost grant
// acknowledgement with such an answer gave the slots back while its record
// still held them: a second holder of one slot (TestRollingRestart, its
// auditor's orphan check, when a server's stop dropped the
// acknowledgement). A stream message get is answered by the leader only.

// leaderMsg is a stream message as a message get returns it.
type leaderMsg struct {
	Seq    uint64 `json:"seq"`
	Data   []byte `json:"data"`
	Header []byte `json:"hdrs"`
}

// leaderLast returns the last message of the stream whose subject matches
// filter, as the stream's leader has it; nil when none matches.
func (s *LeaseStore) leaderLast(ctx context.Context, filter string) (*leaderMsg, error) {
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{filter})
	if err != nil {
		return nil, err
	}
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+s.kv.Bucket(), req)
	if err != nil {
		return nil, fmt.Errorf("the stream leader's last message: %w", err)
	}
	var resp struct {
		Message *leaderMsg `json:"message"`
		Error   *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("the stream leader's last message: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == jsErrNoMessageFound:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("the stream leader's last message: %s (%d)", resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, errors.New("the stream leader's last message: an answer without a message")
	}
	return resp.Message, nil
}

// jsErrNoMessageFound is JetStream's error code for a message get that
// matches nothing.
const jsErrNoMessageFound = 10037

// leaderLastTimeout bounds leaderLastSeq within the watch's set-up.
const leaderLastTimeout = 5 * time.Second

// leaderLastSeq is the sequence of the last message of the stream whose
// subject matches filter, as the stream's leader has it; 0 when none
// matches.
func (s *LeaseStore) leaderLastSeq(ctx context.Context, filter string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderLastTimeout)
	defer cancel()
	m, err := s.leaderLast(ctx, filter)
	if err != nil || m == nil {
		return 0, err
	}
	return m.Seq, nil
}

// Get returns a live record as the stream's leader has it: a key never
// written, deleted, purged or expired is manager.ErrStoreNotFound.
func (s *LeaseStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	m, err := s.leaderLast(ctx, s.subject+key)
	if err != nil {
		return nil, 0, fmt.Errorf("jetstream: get %q: %w", key, err)
	}
	if m == nil {
		return nil, 0, fmt.Errorf("%w: %q", manager.ErrStoreNotFound, key)
	}
	if len(m.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return nil, 0, fmt.Errorf("jetstream: get %q: the record's headers: %w", key, err)
		}
		if gone(h) {
			return nil, 0, fmt.Errorf("%w: %q was deleted", manager.ErrStoreNotFound, key)
		}
	}
	return m.Data, m.Seq, nil
}

// gone reports whether a message with headers h is a KV delete, purge or
// expiry marker, as nats.go's kv.Get decides.
func gone(h nats.Header) bool {
	if op := h.Get(kvOperation); op != "" {
		return op == "DEL" || op == "PURGE"
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge", "Remove":
		return true
	}
	return false
}

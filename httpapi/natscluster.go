package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/lease"
)

var _ ClusterSource = (*NATSSource)(nil)

// Timing of a cluster read: discovery waits this long for every node's
// ping answer (as leasemgr pools --all does), then each node has this long
// to send its snapshot; askers bounds the requests in flight.
const (
	discoverWait = 500 * time.Millisecond
	snapshotWait = time.Second
	askers       = 16
)

// Prefix implements ClusterSource.
func (s *NATSSource) Prefix() string { return s.prefix }

// Discover implements ClusterSource: the nodes whose managers answer a
// service ping now, found as `leasemgr pools --all` finds them.
func (s *NATSSource) Discover(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, discoverWait)
	defer cancel()
	return lease.DiscoverNodes(ctx, s.nc, s.prefix)
}

// Snapshots implements ClusterSource: it asks every node at once (at most
// askers in flight) and returns one result per node, in the given order.
func (s *NATSSource) Snapshots(ctx context.Context, nodes []string, history bool) []NodeResult {
	out := make([]NodeResult, len(nodes))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(askers, len(nodes)) {
		wg.Go(func() {
			for i := range next {
				rctx, cancel := context.WithTimeout(ctx, snapshotWait)
				snap, err := lease.RequestSnapshot(rctx, s.nc, s.prefix, nodes[i], history)
				cancel()
				out[i] = NodeResult{Node: nodes[i], Snapshot: snap, Err: err}
			}
		})
	}
	for i := range nodes {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// RecentEvents implements ClusterSource: the last limit events of every
// node from the event stream, oldest first. The stream holds nothing but
// events, so they are the stream's last limit messages.
func (s *NATSSource) RecentEvents(ctx context.Context, limit int) ([]lease.Event, error) {
	if s.stream == "" {
		return nil, errors.New("no event stream is kept (EVENT_RETENTION=0)")
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, s.stream)
	if err != nil {
		return nil, fmt.Errorf("event stream %q: %w", s.stream, err)
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 || limit <= 0 {
		return []lease.Event{}, nil
	}
	start := state.FirstSeq
	if state.LastSeq >= uint64(limit) && state.LastSeq-uint64(limit)+1 > start {
		start = state.LastSeq - uint64(limit) + 1
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   start,
		// Used once: the server drops it soon, not after the default 5 min,
		// however often pages open.
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("event stream %q: %w", s.stream, err)
	}
	out := make([]lease.Event, 0, limit)
	for len(out) < limit {
		batch, err := cons.Fetch(limit-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("event stream %q: %w", s.stream, err)
		}
		n, last := 0, uint64(0)
		for msg := range batch.Messages() {
			n++
			if md, err := msg.Metadata(); err == nil {
				last = md.Sequence.Stream
			}
			var ev lease.Event
			if json.Unmarshal(msg.Data(), &ev) == nil {
				out = append(out, ev)
			}
		}
		if batch.Error() != nil || n == 0 || last >= state.LastSeq {
			break // all there was when we looked
		}
	}
	return out, nil
}

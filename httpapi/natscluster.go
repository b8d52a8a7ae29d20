package httpapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/slotlease/slotlease/eventstream"
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
// The nodes this process serves answer in process (localManager).
func (s *NATSSource) Snapshots(ctx context.Context, nodes []string, history bool) []NodeResult {
	out := make([]NodeResult, len(nodes))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(askers, len(nodes)) {
		wg.Go(func() {
			for i := range next {
				if m := s.localManager(nodes[i]); m != nil {
					out[i] = NodeResult{Node: nodes[i], Snapshot: m.Snapshot(history)}
					continue
				}
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

// recentSlack is how many messages more than asked RecentEvents reads.
const recentSlack = 32

// RecentEvents implements ClusterSource: the last limit events of every
// node from the event stream, oldest first, read with direct gets (package
// eventstream), which a reader's account may make too.
func (s *NATSSource) RecentEvents(ctx context.Context, limit int) ([]lease.Event, error) {
	if s.stream == "" {
		return nil, errors.New("no event stream is kept (EVENT_RETENTION=0)")
	}
	// A few messages more than limit: the messages of one batch of
	// several subjects may hold events out of their order of time.
	stored, err := eventstream.Last(ctx, s.nc, s.stream, lease.EventFilter(s.prefix, "", "", ""), limit+recentSlack)
	if err != nil {
		return nil, fmt.Errorf("event stream %q: %w", s.stream, err)
	}
	// A stored message holds one or more events, the last limit messages
	// at least the last limit events. Messages of different subjects may
	// overtake each other by a few ms (docs/protocol.md, section 6): the
	// events are put in the order they happened.
	out := make([]lease.Event, 0, len(stored))
	for _, data := range stored {
		if evs, err := lease.DecodeEvents(data); err == nil {
			out = append(out, evs...)
		}
	}
	slices.SortStableFunc(out, func(a, b lease.Event) int { return a.Time.Compare(b.Time) })
	return out[max(0, len(out)-limit):], nil
}

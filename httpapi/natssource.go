package httpapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
)

// NATSSource serves a node's state from the process's active manager, and
// its events from the node's event subjects on NATS, so a standby process
// still streams the events of whichever manager leads the node.
type NATSSource struct {
	nc      *nats.Conn
	prefix  string
	node    string
	manager func() Manager
	stream  string // the event stream replayed by RecentEvents; "" for none

	warnings       func() []string // WithWarnings; nil for none
	clusterManager func() Manager  // WithLocalCluster; nil for none
	servedBy       string          // WithLocalCluster
}

// localManager returns the manager of node this process serves, nil if it
// serves none: a manager does not answer requests on its own process's
// connection (its replies would come back to it), so the source asks it in
// process.
func (s *NATSSource) localManager(node string) Manager {
	var m Manager
	switch {
	case node == s.node:
		m = s.manager()
	case node == lease.ClusterNode && s.clusterManager != nil:
		m = s.clusterManager()
	}
	if m == nil || !m.Serving() {
		return nil
	}
	return m
}

// SourceOption configures a NATSSource.
type SourceOption func(*NATSSource)

// WithEventStream names the JetStream stream that keeps the lease events
// (jetstream.NamesFor(prefix).Events), so the cluster page lists the events
// from before it opened. Without it, RecentEvents says there is none.
func WithEventStream(name string) SourceOption {
	return func(s *NATSSource) { s.stream = name }
}

var _ Source = (*NATSSource)(nil)

// eventBuffer is how many undelivered events one stream holds before NATS
// drops more for it (a slow consumer): enough for a burst of grants.
const eventBuffer = 512

// NewNATSSource returns a source for node. manager returns the active
// manager, or nil while this process stands by or rebuilds; with an
// atomic.Pointer[manager.Manager] that is its Load method.
func NewNATSSource[M interface {
	comparable
	Manager
}](nc *nats.Conn, prefix, node string, manager func() M, opts ...SourceOption) (*NATSSource, error) {
	switch {
	case nc == nil:
		return nil, errors.New("httpapi: nil NATS connection")
	case node == "":
		return nil, errors.New("httpapi: empty node id")
	case manager == nil:
		return nil, errors.New("httpapi: nil manager func")
	}
	if prefix == "" {
		prefix = lease.DefaultPrefix
	}
	s := &NATSSource{nc: nc, prefix: prefix, node: node, manager: managerFunc(manager)}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Node implements Source.
func (s *NATSSource) Node() string { return s.node }

// Ready implements Source: ready when connected to NATS and this process is
// the node's active manager, whose lease state is rebuilt before it is
// published as active.
func (s *NATSSource) Ready() error {
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w: NATS connection is %s", ErrNotReady, st)
	}
	m := s.manager()
	if m == nil {
		return s.standingBy()
	}
	if !m.Serving() {
		// Checked on every probe: a manager resumed after a freeze is not
		// ready from the moment its leadership deadline passed, before it
		// noticed and before it could answer anything.
		return fmt.Errorf("%w: this manager's leadership term is over (deadline passed, deposed or closing)", ErrNotReady)
	}
	return nil
}

func (s *NATSSource) standingBy() error {
	return fmt.Errorf("%w: standing by: another manager leads node %q, or the lease state is not rebuilt yet", ErrNotReady, s.node)
}

// Pools implements Source.
func (s *NATSSource) Pools() (lease.NodePools, error) {
	m := s.manager()
	if m == nil {
		return lease.NodePools{Node: s.node, Pools: []lease.PoolStats{}}, s.standingBy()
	}
	return m.NodePools(), nil
}

// Leases implements Source.
func (s *NATSSource) Leases() ([]lease.Record, error) {
	m := s.manager()
	if m == nil {
		return nil, s.standingBy()
	}
	return m.Leases(), nil
}

// SubscribeEvents implements Source. It returns once the server has the
// subscription, so no event published after the return is missed. One
// goroutine per call decodes and forwards; it unsubscribes and closes the
// channel when ctx ends.
func (s *NATSSource) SubscribeEvents(ctx context.Context) (<-chan lease.Event, error) {
	return s.subscribe(ctx, lease.EventFilter(s.prefix, s.node, "", ""))
}

// SubscribeClusterEvents implements ClusterSource: every node's events.
func (s *NATSSource) SubscribeClusterEvents(ctx context.Context) (<-chan lease.Event, error) {
	return s.subscribe(ctx, lease.EventFilter(s.prefix, "", "", ""))
}

func (s *NATSSource) subscribe(ctx context.Context, filter string) (<-chan lease.Event, error) {
	msgs := make(chan *nats.Msg, eventBuffer)
	sub, err := s.nc.ChanSubscribe(filter, msgs)
	if err != nil {
		return nil, fmt.Errorf("subscribe to lease events: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = s.nc.FlushWithContext(fctx)
	cancel()
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe to lease events: %w", err)
	}
	out := make(chan lease.Event)
	go func() {
		defer close(out)
		defer func() { _ = sub.Unsubscribe() }()
		for {
			select {
			case <-ctx.Done():
				return
			case msg := <-msgs:
				evs, err := lease.DecodeEvents(msg.Data)
				if err != nil {
					continue // not events; nothing a watcher can use
				}
				for _, ev := range evs {
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	return out, nil
}

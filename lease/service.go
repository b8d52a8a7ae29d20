package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ServiceName is the NATS micro service name every lease manager registers
// under, so $SRV.PING.leasemgr, $SRV.INFO and $SRV.STATS (and
// `nats micro ls`) find every node's active manager.
const ServiceName = "leasemgr"

// Version is the protocol and service version.
const Version = "0.1.0"

// addService registers the manager as a micro service. The admin endpoints
// (stats, resize) are micro endpoints; the lease verbs stay plain
// subscriptions on the hot path, and are listed in the metadata.
func (m *Manager) addService() (micro.Service, error) {
	svc, err := micro.AddService(m.cfg.Conn, micro.Config{
		Name:        ServiceName,
		Version:     Version,
		Description: "slot-lease manager for node " + m.cfg.Node,
		Metadata: map[string]string{
			"node":     m.cfg.Node,
			"prefix":   m.cfg.Prefix,
			"instance": m.cfg.Instance,
			"acquire":  Subject(m.cfg.Prefix, m.cfg.Node, "<pool>", VerbAcquire),
			"events":   EventFilter(m.cfg.Prefix, m.cfg.Node, "", ""),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lease: register micro service: %w", err)
	}
	endpoints := []struct {
		name    string
		subject string
		handler nats.MsgHandler
	}{
		{"stats", StatsSubject(m.cfg.Prefix, m.cfg.Node), m.handleStats},
		{"resize", ResizeSubject(m.cfg.Prefix, m.cfg.Node), m.handleResize},
	}
	for _, e := range endpoints {
		h := m.guard(e.handler)
		err := svc.AddEndpoint(e.name, micro.HandlerFunc(func(r micro.Request) {
			h(&nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Data: r.Data()})
		}), micro.WithEndpointSubject(e.subject), micro.WithEndpointQueueGroupDisabled())
		if err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("lease: micro endpoint %s: %w", e.name, err)
		}
	}
	return svc, nil
}

// DiscoverNodes returns the nodes whose active managers answer a micro
// service ping for prefix, sorted. It waits until ctx ends (give it a short
// deadline, e.g. 500ms) to hear every node.
func DiscoverNodes(ctx context.Context, nc *nats.Conn, prefix string) ([]string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.PING."+ServiceName, inbox, nil); err != nil {
		return nil, err
	}
	var nodes []string
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break // the deadline: everyone who answers has answered
		}
		var ping micro.Ping
		if json.Unmarshal(msg.Data, &ping) != nil || ping.Metadata["prefix"] != prefix {
			continue
		}
		if n := ping.Metadata["node"]; n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return nodes, nil
}

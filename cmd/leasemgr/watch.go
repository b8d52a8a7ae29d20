package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/eventstream"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("leasemgr watch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := fs.String("node", "", `node to watch (default NODE_ID; "*" for every node)`)
	pool := fs.String("pool", "*", "pool to watch")
	kind := fs.String("kind", "*", "event kind to watch: "+kindList())
	asJSON := fs.Bool("json", false, "print each event as JSON")
	since := fs.Duration("since", 0, "first replay the events of this long ago (e.g. 1h), then follow")
	if err := parseFlags(fs, args, stdout); err != nil {
		return usageError{err}
	}
	if *since < 0 {
		return usageError{fmt.Errorf("--since %v: must not be negative", *since)}
	}
	if *kind != "*" && !slices.Contains(lease.EventKinds, lease.EventKind(*kind)) {
		return usageError{fmt.Errorf("--kind %q: want one of %s, or *", *kind, kindList())}
	}
	nc, cfg, err := connect("leasemgr watch", config.RoleReader)
	if err != nil {
		return err
	}
	defer nc.Close()
	if *node == "" {
		*node = cfg.NodeID
	}
	for name, v := range map[string]string{"--node": *node, "--pool": *pool, "--kind": *kind} {
		if v != "*" {
			if err := config.ValidToken(v); err != nil {
				return usageError{fmt.Errorf("%s %q: %w", name, v, err)}
			}
		}
	}
	subject := lease.EventFilter(cfg.SubjectPrefix, *node, *pool, lease.EventKind(*kind))
	show := func(subj string, data []byte) {
		if *asJSON {
			fmt.Fprintln(stdout, string(data))
			return
		}
		var ev lease.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			fmt.Fprintf(stdout, "%s: unreadable event: %v\n", subj, err)
			return
		}
		fmt.Fprintln(stdout, formatEvent(ev))
	}
	if *since > 0 {
		fmt.Fprintf(stderr, "replaying %s since %s, then following\n", subject, time.Now().Add(-*since).Format(time.TimeOnly))
		return eventstream.Follow(ctx, nc, jetstream.NamesFor(cfg.SubjectPrefix).Events, subject, time.Now().Add(-*since), show)
	}
	msgs := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(subject, msgs)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "watching %s\n", subject)
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg := <-msgs:
			show(msg.Subject, msg.Data)
		}
	}
}

// kindList names every event kind, for watch's --kind.
func kindList() string {
	names := make([]string, len(lease.EventKinds))
	for i, k := range lease.EventKinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

func formatEvent(ev lease.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-9s %s/%s", ev.Time.Local().Format(time.TimeOnly+".000"), ev.Kind, ev.Node, ev.Pool)
	if ev.LeaseID != "" {
		fmt.Fprintf(&b, " lease=%s", ev.LeaseID)
	} else if ev.RequestID != "" {
		fmt.Fprintf(&b, " request=%s", ev.RequestID)
	}
	if ev.Holder != "" {
		fmt.Fprintf(&b, " holder=%s", ev.Holder)
	}
	if ev.Slots != 0 {
		fmt.Fprintf(&b, " slots=%d", ev.Slots)
	}
	if ev.Token != 0 {
		fmt.Fprintf(&b, " token=%d", ev.Token)
	}
	if ev.Position != 0 {
		fmt.Fprintf(&b, " position=%d", ev.Position)
	}
	if ev.Kind == lease.EventGranted {
		fmt.Fprintf(&b, " waited=%dms", ev.WaitMs)
	}
	if ev.Code != "" {
		fmt.Fprintf(&b, " code=%s", ev.Code)
	}
	if ev.Kind == lease.EventResized {
		fmt.Fprintf(&b, " %s", ev.Message)
	}
	s := ev.Stats
	if s.Capacity == pools.MaxCapacity {
		fmt.Fprintf(&b, "  [in_use=%d queued=%d", s.InUse, s.QueuedRequests) // a pool with only a rate
	} else {
		fmt.Fprintf(&b, "  [in_use=%d/%d queued=%d", s.InUse, s.Capacity, s.QueuedRequests)
	}
	if s.Rate != "" {
		fmt.Fprintf(&b, " tokens=%d/%d", s.Tokens, s.Burst)
	}
	b.WriteString("]")
	return b.String()
}

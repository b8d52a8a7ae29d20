package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/eventstream"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// watchOptions are leasemgr watch's flags.
type watchOptions struct {
	node, pool, kind string
	asJSON           bool
	since            time.Duration
}

func watchSetup(cmd *cobra.Command) action {
	var o watchOptions
	fs := cmd.Flags()
	fs.StringVar(&o.node, "node", "", `node to watch (default NODE_ID; "*" for every node)`)
	fs.StringVar(&o.pool, "pool", "*", "pool to watch")
	fs.StringVar(&o.kind, "kind", "*", "event kind to watch: "+kindList())
	fs.BoolVar(&o.asJSON, "json", false, "print each event as JSON")
	fs.DurationVar(&o.since, "since", 0, "first replay the events of this long ago (e.g. 1h), then follow")
	kinds := []string{"*"}
	for _, k := range lease.EventKinds {
		kinds = append(kinds, string(k))
	}
	_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions(kinds, cobra.ShellCompDirectiveNoFileComp))
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("watch takes no arguments, got %q", args)}
		}
		return runWatch(ctx, o, stdout, stderr)
	}
}

// runWatch prints the events o selects until ctx is done.
func runWatch(ctx context.Context, o watchOptions, stdout, stderr io.Writer) error {
	if o.since < 0 {
		return usageError{fmt.Errorf("--since %v: must not be negative", o.since)}
	}
	if o.kind != "*" && !slices.Contains(lease.EventKinds, lease.EventKind(o.kind)) {
		return usageError{fmt.Errorf("--kind %q: want one of %s, or *", o.kind, kindList())}
	}
	nc, cfg, err := connect("leasemgr watch", config.RoleReader)
	if err != nil {
		return err
	}
	defer nc.Close()
	if o.node == "" {
		o.node = cfg.NodeID
	}
	for name, v := range map[string]string{"--node": o.node, "--pool": o.pool, "--kind": o.kind} {
		if v != "*" {
			if err := config.ValidToken(v); err != nil {
				return usageError{fmt.Errorf("%s %q: %w", name, v, err)}
			}
		}
	}
	subject := lease.EventFilter(cfg.SubjectPrefix, o.node, o.pool, lease.EventKind(o.kind))
	// A message holds the events of its subject since the one before it;
	// each is shown on a line of its own.
	show := func(subj string, data []byte) {
		evs, err := lease.DecodeEvents(data)
		if err != nil {
			fmt.Fprintf(stdout, "%s: unreadable events: %v\n", subj, err)
			return
		}
		for _, ev := range evs {
			if o.asJSON {
				b, _ := json.Marshal(ev) // plain fields: cannot fail
				fmt.Fprintln(stdout, string(b))
			} else {
				fmt.Fprintln(stdout, formatEvent(ev))
			}
		}
	}
	if o.since > 0 {
		fmt.Fprintf(stderr, "replaying %s since %s, then following\n", subject, time.Now().Add(-o.since).Format(time.TimeOnly))
		return eventstream.Follow(ctx, nc, jetstream.NamesFor(cfg.SubjectPrefix).Events, subject, time.Now().Add(-o.since), show)
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
	if ev.Shadow != "" {
		fmt.Fprintf(&b, " shadow=%s/%s", ev.Shadow, ev.ShadowAction) // what the limit would have done
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
	if s.Budget != "" {
		fmt.Fprintf(&b, " budget=%d+%d/%d", s.BudgetUsed, s.BudgetReserved, s.BudgetLimit)
	}
	if s.Shadow {
		b.WriteString(" SHADOW")
	}
	b.WriteString("]")
	return b.String()
}

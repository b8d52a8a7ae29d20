package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/eventstream"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/natsconn"
	"github.com/slotlease/slotlease/pools"
)

// connect dials the NATS this node's manager uses: NATS_URL, or the embedded
// server at NATS_LISTEN, as role when the embedded server's credentials are
// found (config.LoadCommonAs).
func connect(name string, role config.Role) (*nats.Conn, *config.Common, error) {
	cfg, err := config.LoadCommonAs(role)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("configuration:\n%w", err)}
	}
	nc, err := natsconn.Connect(cfg.NATSAddress(), natsconn.ConfigAuth(cfg), name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (is leasemgr running?)", err)
	}
	return nc, cfg, nil
}

func runPools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("leasemgr pools", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	node := fs.String("node", "", "node to ask (default NODE_ID)")
	all := fs.Bool("all", false, "every node whose manager answers (NATS micro service discovery)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return usageError{err}
	}
	nc, cfg, err := connect("leasemgr pools", config.RoleReader)
	if err != nil {
		return err
	}
	defer nc.Close()
	nodes := []string{*node}
	switch {
	case *all:
		if nodes, err = lease.DiscoverNodes(ctx, nc, cfg.SubjectPrefix); err != nil {
			return err
		}
		if len(nodes) == 0 {
			return fmt.Errorf("no lease manager answered on $SRV.PING.%s", lease.ServiceName)
		}
	case *node == "":
		nodes = []string{cfg.NodeID}
	}
	var out []lease.NodePools
	for _, n := range nodes {
		np, err := nodePools(ctx, nc, cfg.SubjectPrefix, n)
		if err != nil {
			return fmt.Errorf("node %s: %w", n, err)
		}
		out = append(out, np)
	}
	if !*all && nodes[0] != lease.ClusterNode {
		// The cluster pools, if a manager serves any: beside the node's.
		// A failure to ask leaves them out, said on stderr: the node's own
		// pools are what was asked for.
		if cp, err := nodePools(ctx, nc, cfg.SubjectPrefix, lease.ClusterNode); err == nil {
			out[0].Cluster = &cp
		} else if !errors.Is(err, lease.ErrUnavailable) {
			fmt.Fprintf(stderr, "leasemgr pools: the cluster pools left out: %v\n", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if !*all {
			return enc.Encode(out[0])
		}
		return enc.Encode(out)
	}
	return printPools(stdout, out...)
}

// nodePools asks node's manager for its pools.
func nodePools(ctx context.Context, nc *nats.Conn, prefix, node string) (lease.NodePools, error) {
	c, err := lease.NewClient(nc, node, lease.WithPrefix(prefix))
	if err != nil {
		return lease.NodePools{}, err
	}
	defer c.Close()
	return c.NodePools(ctx)
}

// printPools prints the pools of nodes in one table, the cluster pools
// (node "cluster") among them, and then what their managers warned of.
func printPools(w io.Writer, nodes ...lease.NodePools) error {
	for i := range nodes {
		if c := nodes[i].Cluster; c != nil {
			nodes = append(nodes, *c)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPOOL\tCAPACITY\tIN USE\tAVAILABLE\tQUEUED\tQUEUED SLOTS\tPOLICY")
	var notes []string
	for _, n := range nodes {
		if n.Node == lease.ClusterNode {
			notes = append(notes, fmt.Sprintf("node %s: the cluster pools, shared by every node; served by the manager of node %s", lease.ClusterNode, n.ServedBy))
		}
		for _, warning := range n.Warnings {
			notes = append(notes, "warning: "+warning)
		}
		for _, s := range n.Pools {
			policy := string(s.Policy)
			if policy == "" {
				policy = "fifo"
			}
			if s.MaxQueue > 0 && s.MaxQueue != config.DefaultMaxQueue { // the default goes without saying
				policy += fmt.Sprintf(" max_queue=%d", s.MaxQueue)
			}
			if s.TenantCap > 0 {
				policy += fmt.Sprintf(" tenant_cap=%d", s.TenantCap)
			}
			if s.Rate != "" {
				policy += fmt.Sprintf(" rate=%s burst=%d tokens=%d", s.Rate, s.Burst, s.Tokens)
			}
			capacity, available := strconv.FormatInt(s.Capacity, 10), strconv.FormatInt(s.Available, 10)
			if s.Capacity == pools.MaxCapacity {
				capacity, available = "unlimited", "-" // a pool with only a rate
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", n.Node, s.Name, capacity, s.InUse, available, s.QueuedRequests, s.QueuedSlots, policy)
			// Per-tenant figures for pools that share by tenant or have
			// tenants other than the unnamed one.
			for _, t := range s.Tenants {
				if t.Tenant == "" && s.Policy != "fair" {
					continue
				}
				name := t.Tenant
				if name == "" {
					name = `""`
				}
				weight := ""
				if t.Weight > 0 {
					weight = fmt.Sprintf(" weight=%d", t.Weight)
				}
				fmt.Fprintf(tw, "\t  tenant %s\t\t%d\t\t%d\t%d\t%s\n", name, t.InUse, t.QueuedRequests, t.QueuedSlots, strings.TrimSpace(weight))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

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

// rateSettings turns resize's --rate name=60/m and --burst name=5 flags
// into the request's rates. A burst without a rate changes the burst of the
// pool's rate.
func rateSettings(rates, bursts []string) (map[string]lease.RateSetting, error) {
	if len(rates) == 0 && len(bursts) == 0 {
		return nil, nil
	}
	out := map[string]lease.RateSetting{}
	for _, f := range rates {
		name, v, ok := strings.Cut(f, "=")
		if !ok || config.ValidToken(name) != nil {
			return nil, fmt.Errorf("--rate %q: want name=60/m (units s, m, h) or name=%s", f, lease.RateOff)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--rate: pool %q given twice", name)
		}
		if v != lease.RateOff {
			if _, err := config.ParseRate(v); err != nil {
				return nil, fmt.Errorf("--rate %q: %w", f, err)
			}
		}
		out[name] = lease.RateSetting{Rate: v}
	}
	for _, f := range bursts {
		name, v, ok := strings.Cut(f, "=")
		if !ok || config.ValidToken(name) != nil {
			return nil, fmt.Errorf("--burst %q: want name=N", f)
		}
		rs := out[name]
		if rs.Burst != 0 {
			return nil, fmt.Errorf("--burst: pool %q given twice", name)
		}
		if rs.Rate == lease.RateOff {
			return nil, fmt.Errorf("--burst %q: pool %q's rate is turned off", f, name)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > config.MaxCapacity {
			return nil, fmt.Errorf("--burst %q: want a burst from 1 to %d", f, int64(config.MaxCapacity))
		}
		rs.Burst = n
		out[name] = rs
	}
	return out, nil
}

// stringList collects a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func runResize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("leasemgr resize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var remove, rates, bursts stringList
	fs.Var(&remove, "remove", "pool to remove (repeatable)")
	fs.Var(&rates, "rate", `start rate, name=60/m (units s, m, h) or name=off (repeatable)`)
	fs.Var(&bursts, "burst", "most slots a rate starts at once, name=5 (repeatable)")
	force := fs.Bool("force", false, "remove pools even with holders (revoked) or waiters (refused)")
	reset := fs.Bool("reset", false, "drop every runtime change first: back to POOL_CAPACITIES")
	node := fs.String("node", "", "node to change (default NODE_ID)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return usageError{err}
	}
	req := lease.ResizeRequest{Remove: remove, Force: *force, Reset: *reset}
	var err error
	for _, arg := range fs.Args() {
		for entry := range strings.SplitSeq(arg, ",") {
			p, err := config.ParsePoolEntry(entry)
			if err != nil {
				return usageError{fmt.Errorf("argument %q: %w", entry, err)}
			}
			if _, dup := req.Set[p.Name]; dup {
				return usageError{fmt.Errorf("argument %q: pool %q given twice", entry, p.Name)}
			}
			if req.Set == nil {
				req.Set = map[string]int64{}
			}
			req.Set[p.Name] = p.Capacity
		}
	}
	if req.Rates, err = rateSettings(rates, bursts); err != nil {
		return usageError{err}
	}
	if len(req.Set) == 0 && len(req.Rates) == 0 && len(req.Remove) == 0 && !req.Reset {
		return usageError{fmt.Errorf("nothing to change: give name=capacity arguments, --rate, --burst, --remove or --reset")}
	}
	nc, cfg, err := connect("leasemgr resize", config.RoleManager)
	if err != nil {
		return err
	}
	defer nc.Close()
	if *node == "" {
		*node = cfg.NodeID
	}
	c, err := lease.NewClient(nc, *node, lease.WithPrefix(cfg.SubjectPrefix))
	if err != nil {
		return err
	}
	defer c.Close()
	stats, err := c.Resize(ctx, req)
	if err != nil {
		return fmt.Errorf("node %s: %w", *node, err)
	}
	return printPools(stdout, lease.NodePools{Node: *node, Pools: stats})
}

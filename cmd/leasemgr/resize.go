package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
)

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
func (l *stringList) Type() string       { return "string" }

func resizeSetup(cmd *cobra.Command) action {
	fs := cmd.Flags()
	var remove, rates, bursts stringList
	fs.Var(&remove, "remove", "pool to remove (repeatable)")
	fs.Var(&rates, "rate", `start rate, name=60/m (units s, m, h) or name=off (repeatable)`)
	fs.Var(&bursts, "burst", "most slots a rate starts at once, name=5 (repeatable)")
	force := fs.Bool("force", false, "remove pools even with holders (revoked) or waiters (refused)")
	reset := fs.Bool("reset", false, "drop every runtime change first: back to POOL_CAPACITIES")
	node := fs.String("node", "", "node to change (default NODE_ID)")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error {
		req, err := resizeRequest(args, remove, rates, bursts, *force, *reset)
		if err != nil {
			return usageError{err}
		}
		return runResize(ctx, *node, req, stdout)
	}
}

// resizeRequest is the change resize's arguments (name=capacity) and flags
// ask for.
func resizeRequest(args, remove, rates, bursts []string, force, reset bool) (lease.ResizeRequest, error) {
	req := lease.ResizeRequest{Remove: remove, Force: force, Reset: reset}
	var err error
	for _, arg := range args {
		for entry := range strings.SplitSeq(arg, ",") {
			p, err := config.ParsePoolEntry(entry)
			if err != nil {
				return req, fmt.Errorf("argument %q: %w", entry, err)
			}
			if _, dup := req.Set[p.Name]; dup {
				return req, fmt.Errorf("argument %q: pool %q given twice", entry, p.Name)
			}
			if req.Set == nil {
				req.Set = map[string]int64{}
			}
			req.Set[p.Name] = p.Capacity
		}
	}
	if req.Rates, err = rateSettings(rates, bursts); err != nil {
		return req, err
	}
	if len(req.Set) == 0 && len(req.Rates) == 0 && len(req.Remove) == 0 && !req.Reset {
		return req, errors.New("nothing to change: give name=capacity arguments, --rate, --burst, --remove or --reset")
	}
	return req, nil
}

// runResize asks node's manager (this node's if "") to make the change req.
func runResize(ctx context.Context, node string, req lease.ResizeRequest, stdout io.Writer) error {
	nc, cfg, err := connect("leasemgr resize", config.RoleManager)
	if err != nil {
		return err
	}
	defer nc.Close()
	if node == "" {
		node = cfg.NodeID
	}
	c, err := lease.NewClient(nc, node, lease.WithPrefix(cfg.SubjectPrefix))
	if err != nil {
		return err
	}
	defer c.Close()
	stats, err := c.Resize(ctx, req)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	return printPools(stdout, lease.NodePools{Node: node, Pools: stats})
}

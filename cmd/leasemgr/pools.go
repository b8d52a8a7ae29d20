package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spf13/cobra"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

func poolsSetup(cmd *cobra.Command) action {
	fs := cmd.Flags()
	asJSON := fs.Bool("json", false, "print JSON")
	node := fs.String("node", "", "node to ask (default NODE_ID)")
	all := fs.Bool("all", false, "every node whose manager answers (NATS micro service discovery)")
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("pools takes no arguments, got %q", args)}
		}
		return runPools(ctx, *node, *all, *asJSON, stdout, stderr)
	}
}

// runPools prints node's pools (this node's if ""), or with all every
// node's.
func runPools(ctx context.Context, node string, all, asJSON bool, stdout, stderr io.Writer) error {
	nc, cfg, err := connect("leasemgr pools", config.RoleReader)
	if err != nil {
		return err
	}
	defer nc.Close()
	nodes := []string{node}
	switch {
	case all:
		if nodes, err = lease.DiscoverNodes(ctx, nc, cfg.SubjectPrefix); err != nil {
			return err
		}
		if len(nodes) == 0 {
			return fmt.Errorf("no lease manager answered on $SRV.PING.%s", lease.ServiceName)
		}
	case node == "":
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
	if !all && nodes[0] != lease.ClusterNode {
		// The cluster pools, if a manager serves any: beside the node's.
		// A failure to ask leaves them out, said on stderr: the node's own
		// pools are what was asked for.
		if cp, err := nodePools(ctx, nc, cfg.SubjectPrefix, lease.ClusterNode); err == nil {
			out[0].Cluster = &cp
		} else if !errors.Is(err, lease.ErrUnavailable) {
			fmt.Fprintf(stderr, "leasemgr pools: the cluster pools left out: %v\n", err)
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if !all {
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

// printKeys prints a fair pool's shares that have a fairness key (the
// tenant rows above show the others), as the scheduler sees them.
func printKeys(w io.Writer, sc *pools.SchedulerStats) {
	if sc == nil {
		return
	}
	for _, k := range sc.Keys {
		if k.Key == "" {
			continue
		}
		name := k.Key
		if k.Tenant != "" {
			name = k.Tenant + "/" + k.Key
		}
		state := fmt.Sprintf("weight=%d deficit=%d ready=%d", k.Weight, k.Deficit, k.Ready)
		if k.Capped {
			state += " capped"
		}
		if k.OldestReadyAgeMs > 0 {
			state += fmt.Sprintf(" oldest_ready=%v", time.Duration(k.OldestReadyAgeMs)*time.Millisecond)
		}
		state += fmt.Sprintf(" selected=%d deferred=%d", k.Selected, k.Deferred)
		fmt.Fprintf(w, "\t  key %s\t\t%d\t\t%d\t%d\t%s\n", name, k.InUse, k.Queued, k.QueuedSlots, state)
	}
	if sc.MoreKeys > 0 {
		fmt.Fprintf(w, "\t  (%d more keys)\t\t\t\t\t\t\n", sc.MoreKeys)
	}
}

// printCounts prints how the pools' requests and leases ended
// (lease.PoolCounts), a table of its own after the figures; nothing if no
// manager reported counts (a version before them).
func printCounts(w io.Writer, nodes []lease.NodePools) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := false
	for _, n := range nodes {
		for _, s := range n.Pools {
			c := s.Counts
			if c == nil {
				continue
			}
			if !header {
				fmt.Fprintln(tw, "\nNODE\tPOOL\tGRANTED\tCOMPLETED\tFAILED\tREJECTED\tDROPPED\tCANCELLED")
				header = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", n.Node, s.Name, c.Granted, c.Completed, c.Failed, c.Rejected, c.Dropped, c.Cancelled)
		}
	}
	return tw.Flush()
}

// printPools prints the pools of nodes in one table, the cluster pools
// (node "cluster") among them, then their counts (printCounts) and what
// shadow pools' limits would have done (printShadowCounts), and then what
// their managers warned of.
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
			if s.Shadow {
				policy = "SHADOW " + policy
				notes = append(notes, shadowNote(n.Node, s))
			}
			if s.MaxQueue > 0 && s.MaxQueue != config.DefaultMaxQueue { // the default goes without saying
				policy += fmt.Sprintf(" max_queue=%d", s.MaxQueue)
			}
			if s.FailFast {
				policy += " fail_fast"
			}
			if s.OnFull != "" {
				policy += " on_full=" + string(s.OnFull)
			}
			if s.TenantCap > 0 {
				policy += fmt.Sprintf(" tenant_cap=%d", s.TenantCap)
			}
			if s.KeyCap > 0 {
				policy += fmt.Sprintf(" key_cap=%d", s.KeyCap)
			}
			if s.Rate != "" {
				policy += fmt.Sprintf(" rate=%s burst=%d tokens=%d", s.Rate, s.Burst, s.Tokens)
			}
			if s.Budget != "" {
				policy += fmt.Sprintf(" budget=%s used=%d reserved=%d", s.Budget, s.BudgetUsed, s.BudgetReserved)
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
			printKeys(tw, s.Scheduler)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printCounts(w, nodes); err != nil {
		return err
	}
	if err := printShadowCounts(w, nodes); err != nil {
		return err
	}
	for _, n := range notes {
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

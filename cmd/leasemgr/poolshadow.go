package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// shadowNote is the note leasemgr pools prints under its tables for a
// pool in shadow mode, so that nobody takes its over-capacity figures for
// a fault.
func shadowNote(node string, s lease.PoolStats) string {
	return fmt.Sprintf("node %s pool %s: shadow mode (POOL_SHADOW): its limits are counted, not enforced; in use may exceed capacity", node, s.Name)
}

// printShadowCounts prints what the shadow pools' limits would have done
// (lease.ShadowCounts), one row per pool and reason, a column per action;
// a shadow pool with nothing counted yet gets a row of zeros. Nothing if
// no pool has any.
func printShadowCounts(w io.Writer, nodes []lease.NodePools) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := false
	for _, n := range nodes {
		for _, s := range n.Pools {
			reasons := shadowReasons(s.ShadowCounts)
			if len(reasons) == 0 && !s.Shadow {
				continue
			}
			if !header {
				heads := []string{"\nNODE", "POOL", "WOULD HAVE (SHADOW)"}
				for _, a := range pools.ShadowActions {
					heads = append(heads, strings.ToUpper(string(a)))
				}
				fmt.Fprintln(tw, strings.Join(heads, "\t"))
				header = true
			}
			if len(reasons) == 0 {
				reasons = []pools.ShadowReason{pools.ShadowCapacity}
			}
			for _, r := range reasons {
				row := []string{n.Node, s.Name, string(r)}
				for _, a := range pools.ShadowActions {
					row = append(row, fmt.Sprint(s.ShadowCounts.Of(r, a)))
				}
				fmt.Fprintln(tw, strings.Join(row, "\t"))
			}
		}
	}
	return tw.Flush()
}

// shadowReasons are the reasons c counts, known ones in their order, then
// any others (from a later version) sorted.
func shadowReasons(c lease.ShadowCounts) []pools.ShadowReason {
	var out []pools.ShadowReason
	for _, r := range pools.ShadowReasons {
		if _, ok := c[r]; ok {
			out = append(out, r)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(c)) {
		if !slices.Contains(pools.ShadowReasons, r) {
			out = append(out, r)
		}
	}
	return out
}

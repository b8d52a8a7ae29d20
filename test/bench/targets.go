package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// target is one of the product's performance targets.
type target struct {
	what    string
	goal    string
	value   float64
	format  func(float64) string
	met     func(float64) bool
	missing bool
}

// naiveFor is the naive row a lease row of c clients on capacity 4 is
// compared with.
func naiveFor(c string) string {
	if c == "1" {
		return "naive-serial/c=1/cap=4"
	}
	return "naive-fifo/c=" + c + "/cap=4"
}

// targets computes the product's targets from one round's rows.
func targets(results []*result) []target {
	var ts []target
	x := func(v float64) string { return fmt.Sprintf("%.2fx", v) }
	opsPerSec := func(r *result) float64 { return r.opsPerSec() }
	nsPerOp := func(r *result) float64 { return r.nsPerOp() }
	cpuPerOp := func(r *result) float64 { return float64(r.cpuPerOp()) }
	ratio := func(what, goal, num, den string, measure func(*result) float64, met func(float64) bool) {
		a, b := find(results, num), find(results, den)
		t := target{what: what, goal: goal, format: x, met: met}
		if a == nil || b == nil {
			t.missing = true
		} else {
			t.value = measure(a) / measure(b)
		}
		ts = append(ts, t)
	}
	atLeast := func(g float64) func(float64) bool { return func(v float64) bool { return v >= g } }
	atMost := func(g float64) func(float64) bool { return func(v float64) bool { return v <= g } }

	// Issue 40: at least as fast as the naive lease alone, 1.3x under
	// contention, at most 12 messages a cycle there.
	ratio("1-client lease cycle ÷ naive serial cycle (ops/s, cap 4)", ">= 1.0", "lease/c=1/cap=4", "naive-serial/c=1/cap=4", opsPerSec, atLeast(1.0))
	ratio("64-client lease ÷ naive FIFO-queued (ops/s, cap 4)", ">= 1.3", "lease/c=64/cap=4", "naive-fifo/c=64/cap=4", opsPerSec, atLeast(1.3))
	ratio("64-client lease ÷ naive FIFO-queued (ops/s, cap 64)", ">= 2", "lease/c=64/cap=64", "naive-fifo/c=64/cap=64", opsPerSec, atLeast(2))
	m := target{what: "messages per lease cycle (64 clients, cap 4)", goal: "<= 12",
		format: func(v float64) string { return fmt.Sprintf("%.1f", v) },
		met:    func(v float64) bool { return v <= 12 }}
	if r := find(results, "lease/c=64/cap=4"); r != nil && r.Ops > 0 && r.Msgs > 0 {
		m.value = float64(r.Msgs) / float64(r.Ops)
	} else {
		m.missing = true
	}
	ts = append(ts, m)
	for _, c := range []string{"1", "64"} {
		ratio("CPU per lease cycle ÷ per naive cycle ("+c+" clients, cap 4)", "report", "lease/c="+c+"/cap=4", naiveFor(c), cpuPerOp, nil)
	}
	for _, c := range []string{"1", "64"} {
		ratio("lease cycle in the accounts layout ÷ in one account (ops/s, "+c+" clients, cap 4)", ">= 0.75",
			"lease-accounts/c="+c+"/cap=4", "lease/c="+c+"/cap=4", opsPerSec, atLeast(0.75))
	}
	g := target{what: "uncontended grant p99 (acquire, 1 client, cap 4)", goal: "< 2ms",
		format: func(v float64) string { return fmtDur(time.Duration(v)) },
		met:    func(v float64) bool { return time.Duration(v) < 2*time.Millisecond }}
	if r := find(results, "lease/c=1/cap=4"); r != nil && r.Acq != nil {
		g.value = float64(r.Acq.quantile(0.99))
	} else {
		g.missing = true
	}
	ts = append(ts, g)
	for _, v := range []string{"uncontended", "contended-2g/cap=1", "contended-2g/cap=4"} {
		ratio("pools ÷ semaphore ns/op, "+v, "<= 1.5", "sem/"+v+"/pools", "sem/"+v+"/semaphore", nsPerOp, atMost(1.5))
	}
	for _, k := range []string{"manager", "pool"} {
		ratio("grant time at 100k ÷ at 1k waiters, "+k, "<= 1.5", "waiters/"+k+"/n=100k", "waiters/"+k+"/n=1k", nsPerOp, atMost(1.5))
	}
	for _, v := range []struct {
		kind, what string
		value      func(*result) float64
	}{
		{"manager", "heap bytes per queued waiter, manager process total", func(r *result) float64 { return r.BytesPerWaiter }},
		{"manager", "heap bytes per queued waiter, manager's own allocations", func(r *result) float64 { return r.ManagerBytesPerWaiter }},
		{"pool", "heap bytes per queued waiter, pools.Pool", func(r *result) float64 { return r.BytesPerWaiter }},
	} {
		t := target{what: v.what, goal: "< 1 KiB",
			format: func(v float64) string { return fmt.Sprintf("%.0f B", v) },
			met:    func(v float64) bool { return v < 1024 }}
		// The deepest queue measured gives the best per-waiter figure.
		t.missing = true
		for _, n := range []string{"100k", "10k", "1k"} {
			if r := find(results, "waiters/"+v.kind+"/n="+n); r != nil {
				t.value, t.missing = v.value(r), false
				t.what += " (at " + n + ")"
				break
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// printTargets prints the targets. With more than one round, each value is
// the median of the rounds' values, followed by their range, and the
// verdict, the median's, says in how many rounds the goal was met.
func printTargets(w io.Writer, rounds [][]*result) {
	per := make([][]target, len(rounds))
	for k, rs := range rounds {
		per[k] = targets(rs)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "targets")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, t := range per[0] {
		var vs []float64
		metIn := 0
		for _, ts := range per {
			if ts[i].missing {
				continue
			}
			vs = append(vs, ts[i].value)
			if t.met != nil && t.met(ts[i].value) {
				metIn++
			}
		}
		value, verdict := "not run", "-"
		if len(vs) > 0 {
			v := median(vs)
			value = t.format(v)
			if len(vs) > 1 {
				value += " (" + t.format(slices.Min(vs)) + "–" + t.format(slices.Max(vs)) + ")"
			}
			verdict = "NOT met"
			if t.met == nil {
				verdict = "reported"
			} else if t.met(v) {
				verdict = "met"
			}
			if t.met != nil && len(vs) > 1 {
				verdict += fmt.Sprintf(" (in %d of %d rounds)", metIn, len(vs))
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", t.what, t.goal, value, verdict)
	}
	_ = tw.Flush()
}

// median of vs (not empty), which it sorts.
func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestBenchRuns runs the whole benchmark in -short mode with a tiny
// duration: every scenario must run and complete some operations, so the
// benchmark cannot rot unnoticed. The figures themselves are not checked.
func TestBenchRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var progress io.Writer = io.Discard
	if testing.Verbose() {
		progress = &testWriter{t}
	}
	results, err := run(ctx, []string{"-short", "-duration", "100ms"}, &out, progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	want := scenarios(true)
	if len(results) != len(want) {
		t.Fatalf("%d rows for %d scenarios", len(results), len(want))
	}
	for i, r := range results {
		if r.Name != want[i].name {
			t.Errorf("row %d is %q, want %q", i, r.Name, want[i].name)
		}
		if r.Ops <= 0 {
			t.Errorf("%s: no operations completed (errors %d, note %q)", r.Name, r.Errors, r.Note)
		}
		if !strings.Contains(out.String(), r.Name) {
			t.Errorf("%s: no row in the printed table", r.Name)
		}
	}
	if !strings.Contains(out.String(), "targets") {
		t.Error("no targets block")
	}
}

// TestDiagRuns runs the -diag scenarios briefly: each completes operations,
// and the ceiling rows are compared with the same naive baseline as the
// lease rows.
func TestDiagRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	results, err := run(ctx, []string{"-diag", "-duration", "100ms", "-scenario", `^(naive-serial/c=1/cap=4|naive-fifo/c=64/cap=4|diag/.*)$`}, &out, io.Discard)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	ratios := map[string]string{}
	for _, r := range results {
		if r.Ops <= 0 {
			t.Errorf("%s: no operations completed (errors %d, note %q)", r.Name, r.Errors, r.Note)
		}
		ratios[r.Name] = r.Ratio
	}
	for _, sc := range diagScenarios() {
		if _, ok := ratios[sc.name]; !ok {
			t.Errorf("%s did not run", sc.name)
		}
	}
	for name, want := range map[string]string{"diag/lease-memstore/c=1/cap=4": "naive-serial", "diag/lease-memstore/c=64/cap=4": "naive-fifo"} {
		if !strings.HasSuffix(ratios[name], "x "+want) {
			t.Errorf("%s: ratio %q, want one against %s", name, ratios[name], want)
		}
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if _, err := run(context.Background(), []string{"-scenario", "^nothing-matches$"}, &out, io.Discard); err == nil {
		t.Error("a -scenario that matches nothing is not an error")
	}
	if _, err := run(context.Background(), []string{"-list", "-scenario", "^lease/"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out.String()); len(got) != 6 || got[0] != "lease/c=1/cap=4" {
		t.Errorf("-list -scenario ^lease/ printed %q", got)
	}
}

// TestRounds runs two scenarios in three rounds: one row each, from the
// round of median ops/s, with the median of the rounds' ratios, and the
// target says in how many rounds it was met.
func TestRounds(t *testing.T) {
	for _, bad := range []string{"0", "101", "-1"} {
		if _, err := run(context.Background(), []string{"-rounds", bad, "-scenario", "^naive-serial/c=1/cap=4$"}, io.Discard, io.Discard); err == nil {
			t.Errorf("-rounds %s is not an error", bad)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	results, err := run(ctx, []string{"-rounds", "3", "-duration", "100ms", "-scenario", `^(naive-serial/c=1/cap=4|lease/c=1/cap=4)$`}, &out, io.Discard)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	if len(results) != 2 {
		t.Fatalf("%d rows for 2 scenarios in 3 rounds", len(results))
	}
	for _, r := range results {
		if r.Ops <= 0 || !strings.Contains(r.Note, "over 3 rounds") {
			t.Errorf("%s: ops %d, note %q", r.Name, r.Ops, r.Note)
		}
	}
	if !strings.HasSuffix(results[1].Ratio, "x naive-serial (median)") {
		t.Errorf("lease row's ratio %q, want the median against naive-serial", results[1].Ratio)
	}
	if !regexp.MustCompile(`1-client lease cycle .* (NOT )?met \(in [0-3] of 3 rounds\)`).MatchString(out.String()) {
		t.Error("the 1-client target does not say in how many of 3 rounds it was met")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

package cluster

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every test that takes a fault suite's turn is skipped without
// FAULT_SUITES, so .ci/run must name it in its FAULT_SUITES=1 run: a suite
// left out would judge nothing anywhere.
func TestCIRunsEveryFaultSuite(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	testFunc := regexp.MustCompile(`^func (Test\w+)\(t \*testing\.T\) \{$`)
	var suites []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		current := ""
		for _, line := range strings.Split(string(data), "\n") {
			if m := testFunc.FindStringSubmatch(line); m != nil {
				current = m[1]
			} else if strings.TrimSpace(line) == "faultSuiteTurn(t)" && current != "" {
				suites = append(suites, current)
			}
		}
	}
	if len(suites) < 6 {
		t.Fatalf("found %d tests taking a fault suite's turn (%v), expected at least the 6 of docs/testing.md", len(suites), suites)
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	run := regexp.MustCompile(`FAULT_SUITES=1 go test .*-run '\^\(([^)]*)\)\$' \./test/cluster/`).FindSubmatch(ci)
	if run == nil {
		t.Fatal(".ci/run has no FAULT_SUITES=1 run of ./test/cluster/ with a -run '^(A|B)$' list")
	}
	listed := strings.Split(string(run[1]), "|")
	for _, s := range suites {
		if !slices.Contains(listed, s) {
			t.Errorf("%s takes a fault suite's turn but .ci/run's FAULT_SUITES=1 run does not name it", s)
		}
	}
}

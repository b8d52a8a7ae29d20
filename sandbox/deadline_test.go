//go:build linux

package sandbox

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The supervisor kills the whole tree at the last deadline it was told,
// with no help from the process that called Run: as if the executor froze
// right after telling it (its deadlines are never extended).
func TestDeadlineKillsTreeWithoutTheExecutor(t *testing.T) {
	for _, plain := range []bool{false, true} {
		name := "default"
		if plain {
			name = "plain"
		}
		t.Run(name, func(t *testing.T) {
			if plain {
				t.Setenv(plainEnvVar, "1")
			}
			marks := []string{marker(), marker(), marker(), marker()}
			script := strings.NewReplacer("@A@", marks[0], "@B@", marks[1], "@C@", marks[2], "@D@", marks[3]).Replace(containmentScripts["escapes"])
			t.Cleanup(func() {
				for _, pid := range findProcs(marks...) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			deadline := time.Now().Add(time.Second)
			res, err := Run(context.Background(), Spec{Command: []string{"sh", "-c", script}, Deadline: func() time.Time { return deadline }}, nil)
			if err != nil {
				t.Fatal(err)
			}
			late := time.Since(deadline)
			if left := findProcs(marks...); len(left) != 0 {
				t.Fatalf("%d processes of the tree outlived the deadline: %v", len(left), left)
			}
			if late < 0 || late > containmentLimit {
				t.Fatalf("Run returned %v after the deadline, want within [0, %v]", late, containmentLimit)
			}
			if res.Signal != "killed" || !strings.Contains(strings.Join(res.Notes, "\n"), "lease deadline passed") {
				t.Fatalf("result %+v: want the worker killed at the deadline, and a note saying so", res)
			}
			t.Logf("tree dead %v after the deadline", late.Round(time.Millisecond))
		})
	}
}

// A deadline that keeps moving on lets the worker finish.
func TestDeadlineExtendedLetsTheWorkerFinish(t *testing.T) {
	res, err := Run(context.Background(), Spec{Command: []string{"sh", "-c", "sleep 1; exit 3"},
		Deadline: func() time.Time { return time.Now().Add(200 * time.Millisecond) }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Signal != "" {
		t.Fatalf("result %+v: want exit 3, not killed", res)
	}
}

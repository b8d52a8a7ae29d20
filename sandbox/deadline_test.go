//go:build linux

package sandbox

import (
	"context"
	"fmt"
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
			if late < 0 || late > deadlineMargin {
				t.Fatalf("Run returned %v after the deadline, want within [0, %v]", late, deadlineMargin)
			}
			if res.Signal != "killed" || !strings.Contains(strings.Join(res.Notes, "\n"), "lease deadline passed") {
				t.Fatalf("result %+v: want the worker killed at the deadline, and a note saying so", res)
			}
			// Lost, though Run's lost channel never closed: a thawed
			// executor says so (exit 76), not that its command died of
			// SIGKILL (137).
			if res.StoppedBy != StoppedLeaseLost {
				t.Errorf("StoppedBy = %q, want %q", res.StoppedBy, StoppedLeaseLost)
			}
			t.Logf("tree dead %v after the deadline", late.Round(time.Millisecond))
		})
	}
}

// deadlineMargin is what a deadline's kill must beat: the executor's
// deadline is TTL - TTL/10 after the holder's last renewal, and the
// manager gives the slots away no sooner than TTL after it (+ the store's
// lag), so the work must be dead within TTL/10 of the deadline: 1.5s at
// the default LEASE_TTL of 15s. The kill takes tens of milliseconds on an
// idle machine (logged); a test of 500ms failed at a load of 16 on 2
// cores (589ms), a figure the product does not rely on.
const deadlineMargin = 1500 * time.Millisecond

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

// termHandler exits 0 after a TERM handler of 1.5s; it prints "cleaned"
// once the handler is done, and "ready" once the handler is installed.
const termHandler = `trap 'sleep 1.5; echo cleaned; exit 0' TERM; echo ready; while :; do sleep 0.05; done`

// runStoppedWhenReady runs spec, whose command prints "ready" once its TERM
// trap is installed, and cancels the run (a graceful stop) only then: a
// stop sent before the shell installed its trap would end the shell at
// once, whatever the machine's load. It returns once Run does; after the
// stop it calls also (if not nil). Safe from any goroutine.
func runStoppedWhenReady(spec Spec, lost <-chan struct{}, also func()) (*Result, error) {
	var out syncBuffer
	spec.Stdout = &out
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, spec, lost)
	if !waitFor(time.Minute, func() bool { return strings.Contains(out.String(), "ready\n") }) {
		cancel()
		<-done
		return nil, fmt.Errorf("the worker never installed its TERM trap; output %q", out.String())
	}
	cancel()
	if also != nil {
		also()
	}
	o := <-done
	return o.res, o.err
}

// mustStopWhenReady is runStoppedWhenReady from the test's goroutine.
func mustStopWhenReady(t *testing.T, spec Spec, lost <-chan struct{}, also func()) *Result {
	t.Helper()
	res, err := runStoppedWhenReady(spec, lost, also)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A graceful stop (a cancel here; a timeout likewise) has its whole kill
// grace while the lease lives: the supervisor is still told each new
// deadline, so a grace longer than the deadline's lead is not cut to it.
func TestGracefulStopKeepsGettingDeadlines(t *testing.T) {
	res := mustStopWhenReady(t, Spec{Command: []string{"sh", "-c", termHandler}, KillGrace: 4 * time.Second,
		Deadline: func() time.Time { return time.Now().Add(400 * time.Millisecond) }}, nil, nil)
	notes := strings.Join(res.Notes, "\n")
	if res.StoppedBy != StoppedCancelled || res.ExitCode != 0 || !strings.Contains(string(res.StdoutTail), "cleaned") {
		t.Fatalf("result %+v (notes %q): want the TERM handler to finish within the kill grace", res, notes)
	}
	if !strings.Contains(notes, "within its 4s kill grace") || strings.Contains(notes, "lease deadline passed") {
		t.Fatalf("notes %q: want the stop within the kill grace, and no deadline kill", notes)
	}
}

// A lease lost during a graceful stop ends the grace then: the work must
// be gone before the slots can go to the next holder.
func TestLeaseLostDuringTheGraceEndsIt(t *testing.T) {
	lost := make(chan struct{})
	// Lost half a second into the 1.5 s handler.
	res := mustStopWhenReady(t, Spec{Command: []string{"sh", "-c", termHandler}, KillGrace: 4 * time.Second, LostGrace: 50 * time.Millisecond}, lost,
		func() { time.Sleep(500 * time.Millisecond); close(lost) })
	notes := strings.Join(res.Notes, "\n")
	if res.StoppedBy != StoppedCancelled || res.Signal != "killed" || strings.Contains(string(res.StdoutTail), "cleaned") || !strings.Contains(notes, "the lease was lost") {
		t.Fatalf("result %+v (notes %q): want the cancelled worker killed, its handler cut, when the lease was lost", res, notes)
	}
}

// A graceful stop sends SIGTERM once: a process in both the process group
// and the cgroup was signalled through each, and a shell whose TERM trap
// had begun ran it again (a 2s cleanup then took 4s of the kill grace, in
// about one stop in five). Eight stops at once, each trap must run once.
func TestGracefulStopSignalsOnce(t *testing.T) {
	const trapOnce = `trap 'echo trapped; sleep 1; exit 0' TERM; echo ready; while :; do sleep 0.02; done`
	type out struct {
		res *Result
		err error
	}
	results := make(chan out, 8)
	for range 8 {
		go func() {
			res, err := runStoppedWhenReady(Spec{Command: []string{"sh", "-c", trapOnce}, KillGrace: 5 * time.Second}, nil, nil)
			results <- out{res, err}
		}()
	}
	for range 8 {
		o := <-results
		if o.err != nil {
			t.Fatal(o.err)
		}
		res := o.res
		if n := strings.Count(string(res.StdoutTail), "trapped"); n != 1 {
			t.Errorf("the TERM trap ran %d times (memory limit %s, isolation %s): %q", n, res.MemoryLimit, res.Isolation, res.StdoutTail)
		}
	}
}

//go:build linux

package sandbox

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// containmentLimit bounds the time from the executor's SIGKILL until
// nothing of its worker tree runs any more (every process is gone, or has
// SIGKILL pending: killPending). It is a bound load cannot reach, not the
// figure the product promises: the tree is dead in tens of milliseconds
// on an idle machine, and what the safety argument needs is the tree dead
// within DISCONNECT_GRACE (800 ms by default, config.DefaultDisconnectGrace)
// of the executor's death. Each run logs its time against that grace. On
// 2 cores with ten busy processes beside it, a fork bomb's hundred shells
// starve the supervisor, which then took up to about 1 s to kill them all:
// past the grace (docs/guarantees.md, section 3).
const containmentLimit = 5 * time.Second

// fastReleaseGrace is DISCONNECT_GRACE's default, logged against.
const fastReleaseGrace = 800 * time.Millisecond

// containmentScripts are worker trees that try every way out of the
// process group: background children, setsid, a double fork, SIGTERM
// ignored, and a bounded fork bomb still forking (some of it setsid) when
// the executor dies. @A@... are markers.
var containmentScripts = map[string]string{
	"escapes": `sleep @A@ & setsid sleep @B@ & (sleep @C@ &); trap "" TERM; sleep @D@`,
	// A tree of 2^6-1 shells, each with a sleep and a setsid sleep, and a
	// loop that keeps starting double-forked setsid sleeps until it has
	// made 200: still forking when the executor dies, and bounded, so
	// that a broken supervisor cannot leave an ever-growing tree behind.
	"forkbomb": `g() { if [ "$1" -gt 0 ]; then g $(($1-1)) & (setsid sleep @B@ &); g $(($1-1)) & fi; sleep @A@; }
i=0; while [ $i -lt 200 ]; do (setsid sleep @C@ &); i=$((i+1)); done &
g 5 & sleep @D@`,
	// Sixty shells busy on the CPU, one of them setsid: with its own cpu
	// group the tree weighs as one process against its supervisor; without
	// one it took the supervisor 0.9-1.4 s to kill them on an idle 2-core
	// machine.
	"busy": `i=0; while [ $i -lt 60 ]; do sh -c 'while :; do :; done' @A@ & i=$((i+1)); done
setsid sh -c 'while :; do :; done' @B@ & (sleep @C@ &); sleep @D@`,
}

// TestExecutorCrashKillsWholeTree: the executor is SIGKILLed; within
// containmentLimit no process of the worker tree runs (each is gone or
// has SIGKILL pending), and soon after none is left, with namespaces
// and cgroup as available, without Isolate, and with neither (forced).
func TestExecutorCrashKillsWholeTree(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	modes := []struct {
		name string
		env  []string
	}{
		{"default", nil},
		{"isolate", []string{executorEnv + "_ISOLATE=1"}},
		{"plain", []string{plainEnvVar + "=1", executorEnv + "_ISOLATE=1"}},
	}
	cpuGroups, why := cpuGroupsHere()
	for _, mode := range modes {
		for _, name := range []string{"escapes", "forkbomb", "busy"} {
			t.Run(mode.name+"/"+name, func(t *testing.T) {
				if name == "busy" && (mode.name == "plain" || !cpuGroups) {
					// The limit docs/guarantees.md (section 3) names: no
					// bound load cannot reach.
					t.Skipf("a busy tree starves its supervisor without a cpu group of its own (%s)", cmp.Or(why, plainEnvVar))
				}
				marks := []string{marker(), marker(), marker(), marker()}
				script := strings.NewReplacer("@A@", marks[0], "@B@", marks[1], "@C@", marks[2], "@D@", marks[3]).Replace(containmentScripts[name])
				left := func() []int { return findProcs(marks...) }
				t.Cleanup(func() {
					for _, pid := range left() {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				})
				cmd := exec.Command(exe, "-test.run=^$")
				cmd.Env = append(append(os.Environ(), executorEnv+"="+script, "TMPDIR="+t.TempDir()), mode.env...)
				var stderr syncBuffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				// Every way out is taken before the kill: the four
				// markers run (the fork bomb: with many processes).
				started := func() bool {
					for _, m := range marks {
						if len(findProcs(m)) == 0 {
							return false
						}
					}
					return name == "escapes" || len(left()) >= 60
				}
				if !waitFor(30*time.Second, started) {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatalf("worker tree never started (%d processes): %s", len(left()), stderr.String())
				}
				known := left()
				n := len(known)
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				killed := time.Now()
				_ = cmd.Wait()
				// A process with SIGKILL pending never runs its own code
				// again: it is dead to the lease, though the kernel may
				// take a while to tear it down on a loaded machine (a
				// hundred processes took 980 ms to be gone, in two copies
				// of the suite at once, load 16 on 2 cores).
				runningOf := func(pids []int) []int {
					var r []int
					for _, pid := range pids {
						if !killPending(pid) {
							r = append(r, pid)
						}
					}
					return r
				}
				running := func() []int { return runningOf(left()) }
				// The watch itself must not starve the supervisor it
				// times: it polls the processes it knows of, and scans
				// /proc for others (forked since) only once those are
				// all killed. The time is taken at the end of a scan that
				// found every process killed.
				for time.Since(killed) < containmentLimit {
					if len(runningOf(known)) != 0 {
						time.Sleep(time.Millisecond)
						continue
					}
					if known = running(); len(known) == 0 {
						break
					}
				}
				// A scan can still find one: a process that took a marker
				// (exec) or was forked as its parent got the SIGKILL, after
				// the scan before. The supervisor's next round kills it; one
				// that lives through the limit is a survivor.
				pids := running()
				for len(pids) != 0 && time.Since(killed) < containmentLimit {
					time.Sleep(5 * time.Millisecond)
					pids = running()
				}
				if len(pids) != 0 {
					for _, pid := range pids {
						st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
						cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
						t.Logf("survivor: stat %s cmdline %q", st, cl)
					}
					for len(left()) != 0 && time.Since(killed) < 5*time.Second {
						time.Sleep(5 * time.Millisecond)
					}
					t.Logf("the survivors were gone %v after the SIGKILL (or 5s passed)", time.Since(killed).Round(time.Millisecond))
					t.Fatalf("%d processes of the worker tree (%d seen before the kill) survived the executor's SIGKILL by %v: %v", len(pids), n, containmentLimit, pids[:min(len(pids), 10)])
				}
				stopped := time.Since(killed)
				if !waitFor(30*time.Second, func() bool { return len(left()) == 0 }) {
					t.Fatalf("%d processes of the worker tree killed but not gone 30s after the executor's SIGKILL: %v", len(left()), left())
				}
				within := "within"
				if stopped > fastReleaseGrace {
					within = "PAST"
				}
				t.Logf("%d processes of the worker tree, all killed %v (%s the %v grace of fast release) and gone %v after the executor's SIGKILL",
					n, stopped.Round(time.Millisecond), within, fastReleaseGrace, time.Since(killed).Round(time.Millisecond))
			})
		}
	}
}

// TestWorkerCannotForgeItsStatus: the supervisor holds the status pipe the
// worker's exit status travels on; the worker cannot reach it through
// /proc (the supervisor is non-dumpable), with or without a PID namespace.
func TestWorkerCannotForgeItsStatus(t *testing.T) {
	t.Parallel()
	for _, isolate := range []bool{false, true} {
		var out syncBuffer
		res := mustRun(t, Spec{
			Command: []string{"sh", "-c", `for fd in /proc/$PPID/fd/*; do echo "exit:0" > "$fd" && echo "wrote $fd"; done 2>/dev/null; exit 9`},
			Isolate: isolate,
			Stdout:  &out,
		})
		if res.ExitCode != 9 || res.Signal != "" {
			t.Errorf("isolate=%t: exit=%d signal=%q, want 9 (status forged?)", isolate, res.ExitCode, res.Signal)
		}
		if strings.Contains(out.String(), "wrote") {
			t.Errorf("isolate=%t: the worker wrote to its supervisor's descriptors: %s", isolate, out.String())
		}
	}
}

// TestSIGTERMReachesProcessesThatLeftTheGroup: on a stop, a descendant that
// called setsid gets SIGTERM too (from the supervisor), so it can clean up
// before the SIGKILL, also without cgroup and namespaces.
func TestSIGTERMReachesProcessesThatLeftTheGroup(t *testing.T) {
	t.Setenv(plainEnvVar, "1")
	a := marker()
	dir := t.TempDir()
	flag, ready := filepath.Join(dir, "got-term"), filepath.Join(dir, "ignoring")
	// The worker itself ignores SIGTERM, so it does not exit and leave the
	// setsid shell to the leftover cleanup; it says when it does (a signal
	// sent before would end it, and the test would show nothing).
	script := `setsid sh -c 'trap "echo got-term > ` + flag + `; exit 0" TERM; sleep ` + a + ` & wait' & trap "" TERM; : > ` + ready + `; wait`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, Spec{Command: []string{"sh", "-c", script}, KillGrace: 5 * time.Second}, nil)
	if !waitFor(10*time.Second, func() bool { _, err := os.Stat(ready); return err == nil && len(findProcs(a)) == 1 }) {
		t.Fatal("worker never started")
	}
	cancel()
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if data, err := os.ReadFile(flag); err != nil || string(data) != "got-term\n" {
		t.Fatalf("the setsid shell got no SIGTERM (%q, %v); notes %q", data, err, o.res.Notes)
	}
	if left := findProcs(a); len(left) != 0 {
		t.Fatalf("processes survived Run: %v", left)
	}
}

// TestWorkerKillingItsSupervisorDies: outside a PID namespace the worker
// can SIGKILL its supervisor (same uid); it then dies too.
func TestWorkerKillingItsSupervisorDies(t *testing.T) {
	t.Setenv(plainEnvVar, "1")
	a := marker()
	var out syncBuffer
	res := mustRun(t, Spec{
		Command: []string{"sh", "-c", `kill -9 $PPID; sleep ` + a + `; echo survived`},
		Stdout:  &out,
	})
	if left := findProcs(a); len(left) != 0 {
		t.Fatalf("the worker outlived its supervisor: %v", left)
	}
	if strings.Contains(out.String(), "survived") || res.Signal != "killed" {
		t.Fatalf("exit=%d signal=%q output %q, want killed", res.ExitCode, res.Signal, out.String())
	}
}

// killPending reports whether pid has SIGKILL pending (for the thread or
// the whole process): it will never run its own code again.
func killPending(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true // gone
	}
	for _, line := range strings.Split(string(data), "\n") {
		for _, field := range []string{"SigPnd:", "ShdPnd:"} {
			if v, ok := strings.CutPrefix(line, field); ok {
				mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err == nil && mask&(1<<(uint(syscall.SIGKILL)-1)) != 0 {
					return true
				}
			}
		}
	}
	return false
}

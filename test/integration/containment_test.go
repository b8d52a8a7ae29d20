package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// A killed executor's worker tree is dead within this long, whatever it did
// to leave the process group (issue 15, containment). It is the safety
// bound, not a speed target: fast release gives the executor's slots to
// the next holder DISCONNECT_GRACE after its connection closed, and the
// work must not outlive its lease. It takes tens of milliseconds on an idle
// machine (the test logs it); a fork bomb's 160 processes once took over
// 500 ms to reap beside the other tests, within this bound still.
const treeDeathLimit = lease.DefaultDisconnectGrace

// escapingTree is a worker that takes every way out of the process group
// and ignores SIGTERM; its four sleeps carry the markers.
func escapingTree(m [4]string) string {
	return fmt.Sprintf(`sleep %s & setsid sleep %s & (sleep %s &); trap "" TERM; sleep %s`, m[0], m[1], m[2], m[3])
}

// forkBomb is a bounded fork bomb still forking (setsid, double-forked)
// when the executor dies: a tree of 31 shells with a sleep each, and a loop
// starting 200 setsid sleeps.
func forkBomb(m [4]string) string {
	return fmt.Sprintf(`g() { if [ "$1" -gt 0 ]; then g $(($1-1)) & (setsid sleep %s &); g $(($1-1)) & fi; sleep %s; }
i=0; while [ $i -lt 200 ]; do (setsid sleep %s &); i=$((i+1)); done &
g 4 & sleep %s`, m[0], m[1], m[2], m[3])
}

func treeMarkers() [4]string {
	var m [4]string
	for i := range m {
		m[i] = fmt.Sprintf("400.%09d", rand.Int64N(1e9))
	}
	return m
}

// treeProcs lists the live processes whose argv holds one of the markers.
func treeProcs(m [4]string) []int {
	return liveProcs(func(args []string) bool {
		return len(args) > 1 && args[0] == "sleep" && slices.Contains(m[:], args[1])
	})
}

// liveProcs lists the live processes whose argv matches: not zombies, and
// not killed. A process with SIGKILL pending never runs another
// instruction of its own (the kernel ends it on its way back from the
// kernel), but on a loaded machine it can wait a while for the CPU to
// exit: a fork bomb's last sleeps, killed in time, were still listed 800 ms
// later beside three other agents' test runs (load 20-25).
func liveProcs(match func(args []string) bool) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(d + "/stat")
		if err != nil || strings.Contains(string(stat[strings.LastIndexByte(string(stat), ')')+1:]), " Z ") {
			continue // gone or a zombie
		}
		if killPending(d) {
			continue
		}
		if match(strings.Split(string(cmdline), "\x00")) {
			var pid int
			fmt.Sscan(filepath.Base(d), &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAndCheckTree SIGKILLs the executor once every marker runs (and at
// least minProcs processes), then checks that nothing of the tree is left
// treeDeathLimit later.
func killAndCheckTree(t *testing.T, executor *proc, m [4]string, minProcs int) {
	t.Helper()
	t.Cleanup(func() {
		for _, pid := range treeProcs(m) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	eventually(t, 60*time.Second, "the worker tree to start", func() bool {
		pids := treeProcs(m)
		for _, mk := range m {
			if len(treeProcs([4]string{mk, mk, mk, mk})) == 0 {
				return false
			}
		}
		return len(pids) >= minProcs
	})
	n := len(treeProcs(m))
	if err := executor.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	executor.Wait(t, 10*time.Second)
	for len(treeProcs(m)) != 0 && time.Since(killed) < treeDeathLimit {
		time.Sleep(5 * time.Millisecond)
	}
	if left := treeProcs(m); len(left) != 0 {
		t.Fatalf("%d processes of the worker tree (%d before the kill) outlived the executor's SIGKILL by %v: %v",
			len(left), n, treeDeathLimit, left[:min(len(left), 10)])
	}
	t.Logf("%d processes in the worker tree, all gone %v after the executor's SIGKILL", n, time.Since(killed).Round(time.Millisecond))
}

// plainSandbox forces the sandbox's no-namespace, no-cgroup path (a test
// setting, see sandbox), where workers cannot be confined: the executor
// runs them unconfined only when told to (EXECUTOR_UNCONFINED=1).
var plainSandbox = []string{"_SLOTLEASE_SANDBOX_TEST_PLAIN=1", "EXECUTOR_UNCONFINED=1"}

// sandboxModes are the sandbox's default path and the forced plain one,
// with the environment each adds.
var sandboxModes = []struct {
	name string
	env  []string
}{{"default", nil}, {"plain", plainSandbox}}

func TestKilledExecutorRunLeavesNoWorker(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "contain", "gpu=4", "15s")
	startManager(t, env, httpAddr)
	cases := []struct {
		name     string
		env      []string
		script   func([4]string) string
		minProcs int
	}{
		{"default", nil, escapingTree, 4},
		{"plain", plainSandbox, escapingTree, 4},
		{"default/forkbomb", nil, forkBomb, 40},
		{"plain/forkbomb", plainSandbox, forkBomb, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := treeMarkers()
			run := start(t, append(append([]string{}, env...), tc.env...), "executor", "run", "--pool", "gpu", "--", "sh", "-c", tc.script(m))
			killAndCheckTree(t, run, m, tc.minProcs)
		})
	}
}

func TestKilledExecutorServeLeavesNoJob(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "containserve", "p=2", "15s")
	startManager(t, env, httpAddr)
	for _, mode := range sandboxModes {
		t.Run(mode.name, func(t *testing.T) {
			m := treeMarkers()
			if code, out := runExecutor(t, env, "submit", "--pool", "p", "--max-attempts", "1", "--", "sh", "-c", escapingTree(m)); code != 0 {
				t.Fatalf("submit: exit %d\n%s", code, out)
			}
			serve := start(t, append(append([]string{}, env...), mode.env...), "executor", "serve", "--pools", "p")
			killAndCheckTree(t, serve, m, 4)
		})
	}
}

// killPending reports whether the process of /proc directory d has a
// SIGKILL pending, to it (SigPnd) or to its thread group (ShdPnd).
func killPending(d string) bool {
	status, err := os.ReadFile(d + "/status")
	if err != nil {
		return false
	}
	const sigkill = 1 << (9 - 1) // bit n-1 of the masks is signal n
	for _, line := range strings.Split(string(status), "\n") {
		name, mask, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && v&sigkill != 0 {
			return true
		}
	}
	return false
}

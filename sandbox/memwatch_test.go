//go:build linux

package sandbox

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/debpkg"
)

// hostModes runs f with the limits this host gives (a cgroup memory
// controller, v2 or v1, where there is one), then as on a host with no
// cgroup and no namespaces at all (RLIMIT_DATA and the memory watch).
// Not parallel: the second mode is an environment setting.
func hostModes(t *testing.T, f func(t *testing.T, plain bool)) {
	t.Run("host", func(t *testing.T) { f(t, false) })
	t.Run("no-cgroup", func(t *testing.T) {
		t.Setenv(plainEnvVar, "1")
		f(t, true)
	})
}

// Issue 41: runtimes that reserve far more address space than they use
// start under a memory limit on any host. Under RLIMIT_AS (the old
// fallback) `node -e 1` died at 512 MiB and `go version` too; a cgroup's
// memory controller never counted reservations.
func TestRuntimesStartUnderMemoryLimit(t *testing.T) {
	node := debpkg.Tool{Path: "/usr/bin/node", Pkg: "nodejs", SkipEnv: "SLOTLEASE_SKIP_TYPESCRIPT", Test: "the Node.js worker under a memory limit"}.Ensure(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the Go toolchain runs this test, so go is on PATH: %v", err)
	}
	workers := map[string][]string{
		"node": {node, "-e", "const b = Buffer.alloc(64 << 20, 1); console.log('node ok', b.length)"},
		"go":   {goBin, "version"},
	}
	if java, err := exec.LookPath("java"); err == nil {
		workers["java"] = []string{java, "-version"} // where the host has one
	}
	hostModes(t, func(t *testing.T, plain bool) {
		for name, argv := range workers {
			var out syncBuffer
			res := mustRun(t, Spec{Command: argv, MemoryBytes: 512 << 20, Timeout: time.Minute, Stdout: &out, Stderr: &out})
			t.Logf("%s: limit=%s exit=%d stoppedBy=%q peak=%d", name, res.MemoryLimit, res.ExitCode, res.StoppedBy, res.PeakMemoryBytes)
			if res.ExitCode != 0 {
				t.Errorf("%s under a 512 MiB limit (%s): exit %d, signal %q, stopped by %q:\n%s\nnotes %q", name, res.MemoryLimit, res.ExitCode, res.Signal, res.StoppedBy, out.String(), res.Notes)
			}
			if plain && (res.MemoryLimit != LimitRlimit || !hasNote(res, "RLIMIT_DATA")) {
				t.Errorf("%s with no cgroup: limit %q, notes %q: want RLIMIT_DATA", name, res.MemoryLimit, res.Notes)
			}
		}
	})
}

// A tree whose processes each stay under the limit but together hold more
// is stopped, and the run says memory stopped it: the cgroup's controller
// counts the tree, and without one the watch does.
func TestTreeOverMemoryLimitIsStopped(t *testing.T) {
	// Four dd each holding a 40 MiB buffer it filled, blocked writing to
	// a reader that never reads: 160 MiB in all, over 100 MiB, though none
	// is over it alone.
	script := "for i in 1 2 3 4; do dd if=/dev/zero bs=41943040 count=1 2>/dev/null | sleep 60 & done; wait"
	hostModes(t, func(t *testing.T, plain bool) {
		var out syncBuffer
		start := time.Now()
		res := mustRun(t, Spec{Command: []string{"sh", "-c", script}, MemoryBytes: 100 << 20, Timeout: 2 * time.Minute, Stdout: &out})
		took := time.Since(start)
		t.Logf("limit=%s exit=%d signal=%q stoppedBy=%q peak=%d after %v; notes %q", res.MemoryLimit, res.ExitCode, res.Signal, res.StoppedBy, res.PeakMemoryBytes, took, res.Notes)
		if res.StoppedBy != StoppedMemory {
			t.Fatalf("StoppedBy=%q exit=%d output %q notes %q: want memory", res.StoppedBy, res.ExitCode, out.String(), res.Notes)
		}
		if res.ExitCode == 0 || took >= time.Minute {
			t.Fatalf("exit %d after %v: the tree ran on past its limit", res.ExitCode, took)
		}
		if plain && (res.MemoryLimit != LimitRlimit || !hasNote(res, "resident memory passed the 100MiB limit") || res.PeakMemoryBytes <= 100<<20) {
			t.Fatalf("watched limit: %q, notes %q, peak %d: want the watch's stop and the tree's peak over the limit", res.MemoryLimit, res.Notes, res.PeakMemoryBytes)
		}
	})
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{700: "700B", 64 << 20: "64MiB", 3 << 29: "1.5GiB", 100 << 20: "100MiB", 123456789: "117.7MiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if !strings.HasSuffix(formatBytes(1<<50), "TiB") {
		t.Errorf("formatBytes(1<<50) = %q", formatBytes(1<<50))
	}
}

// The watch reads every 100 ms, and less often where a read of /proc is
// slow (a host of many processes), so that it stays near 2 % of a core.
func TestWatchIntervalBoundsItsCost(t *testing.T) {
	for took, want := range map[time.Duration]time.Duration{0: memWatchEvery, time.Millisecond: memWatchEvery, 2 * time.Millisecond: memWatchEvery, 10 * time.Millisecond: 500 * time.Millisecond} {
		if got := watchInterval(took); got != want {
			t.Errorf("watchInterval(%v) = %v, want %v", took, got, want)
		}
	}
	start := time.Now()
	treeResident(1)
	t.Logf("one read of this host's /proc: %v", time.Since(start))
}

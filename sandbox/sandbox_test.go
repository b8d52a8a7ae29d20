//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/raceexit"
)

const executorEnv = "SANDBOX_TEST_EXECUTOR"

func TestMain(m *testing.M) {
	Init()
	raceexit.Set() // the helper stages exit at once (raceenv_race.go)
	if v := os.Getenv(dumpEnv); v != "" {
		victim(v == "0")
	}
	if script := os.Getenv(executorEnv); script != "" {
		// A stand-in executor for TestExecutorCrash: run the worker, then
		// block until killed.
		isolate := os.Getenv(executorEnv+"_ISOLATE") == "1"
		_, err := Run(context.Background(), Spec{Command: []string{"sh", "-c", script}, Isolate: isolate}, nil)
		fmt.Fprintln(os.Stderr, "worker returned:", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for the concurrent reads the tests do.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// marker returns a unique sleep duration, used to find a worker's
// processes in /proc by an exact argv match.
func marker() string {
	return fmt.Sprintf("300.%09d", rand.Int64N(1e9))
}

// findProcs returns the live (non-zombie) processes having one of args as
// one of their argv elements, from one scan of /proc.
func findProcs(args ...string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(data) == 0 {
			continue
		}
		for _, a := range strings.Split(string(data), "\x00") {
			if slices.Contains(args, a) {
				if st, ok := readProcStat(pid); ok && st.state != 'Z' {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type outcome struct {
	res *Result
	err error
}

func runAsync(ctx context.Context, spec Spec, lost <-chan struct{}) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := Run(ctx, spec, lost)
		ch <- outcome{res, err}
	}()
	return ch
}

func mustRun(t *testing.T, spec Spec) *Result {
	t.Helper()
	res, err := Run(context.Background(), spec, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func hasNote(res *Result, sub string) bool {
	for _, n := range res.Notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

// namespacesAvailable probes, independently of the package, whether this
// process may create PID+mount namespaces (directly or via a user namespace).
func namespacesAvailable(extra uintptr) bool {
	flags := syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | extra
	try := func(attr *syscall.SysProcAttr) bool {
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = attr
		return cmd.Run() == nil
	}
	if try(&syscall.SysProcAttr{Cloneflags: flags}) {
		return true
	}
	uid, gid := os.Getuid(), os.Getgid()
	return try(&syscall.SysProcAttr{
		Cloneflags:  flags | syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
	})
}

// cgroupCaps probes what the per-run cgroup can do on this machine.
func cgroupCaps(t *testing.T) (tracking, memory, pids bool) {
	cg, _ := newCgroup(64<<20, 10)
	if cg != nil {
		tracking, memory, pids = true, cg.memory, cg.pids
		if err := cg.remove(); err != nil {
			t.Errorf("remove probe cgroup: %v", err)
		}
	}
	var mem int64
	var procs int
	if !memory {
		mem = 64 << 20
	}
	if !pids {
		procs = 10
	}
	if mem == 0 && procs == 0 {
		return tracking, memory, pids
	}
	// A cgroup v1 controller takes what v2 could not (cgroupv1_linux.go).
	if l, _ := newV1Limits(mem, procs, cgroupName()); l != nil {
		memory, pids = memory || l.memory != "", pids || l.pids != ""
		if err := l.remove(); err != nil {
			t.Errorf("remove probe cgroup: %v", err)
		}
	}
	return tracking, memory, pids
}

func TestTailBuffer(t *testing.T) {
	for _, max := range []int{1, 7, 64} {
		tb := newTailBuffer(max)
		var all []byte
		for i := 0; i < 200; i++ {
			chunk := bytes.Repeat([]byte{byte('a' + i%26)}, rand.IntN(2*max+2))
			tb.Write(chunk)
			all = append(all, chunk...)
			want := all
			if len(want) > max {
				want = want[len(want)-max:]
			}
			if got := tb.Bytes(); !bytes.Equal(got, want) {
				t.Fatalf("max=%d step %d: got %q want %q", max, i, got, want)
			}
		}
	}
	tb := newTailBuffer(0)
	tb.Write([]byte("abc"))
	if len(tb.Bytes()) != 0 {
		t.Fatal("zero-size tail buffer kept data")
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	res := mustRun(t, Spec{Command: []string{"sh", "-c", "exit 7"}})
	if res.ExitCode != 7 || res.Signal != "" || res.StoppedBy != "" {
		t.Fatalf("got exit=%d signal=%q stoppedBy=%q, want 7 \"\" \"\"", res.ExitCode, res.Signal, res.StoppedBy)
	}
	res = mustRun(t, Spec{Command: []string{"true"}})
	if res.ExitCode != 0 || res.Duration <= 0 {
		t.Fatalf("true: exit=%d duration=%v", res.ExitCode, res.Duration)
	}
	if res.MemoryLimit != LimitNone || res.Isolation != IsolationNone {
		t.Fatalf("MemoryLimit=%q Isolation=%q", res.MemoryLimit, res.Isolation)
	}
}

func TestOutputStreamedAndTailCapped(t *testing.T) {
	t.Parallel()
	mark := marker()
	var stdout, stderr syncBuffer
	lost := make(chan struct{})
	script := `i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done; echo to-stderr >&2; echo ready; exec sleep ` + mark
	done := runAsync(context.Background(), Spec{
		Command:      []string{"sh", "-c", script},
		Stdout:       &stdout,
		Stderr:       &stderr,
		CaptureBytes: 100,
		KillGrace:    200 * time.Millisecond,
	}, lost)
	// Live streaming: the worker never exits on its own (it ends in
	// sleep 300), so output seen before the lease is lost was streamed live.
	if !waitFor(10*time.Second, func() bool { return strings.Contains(stdout.String(), "ready\n") }) {
		t.Fatalf("no live output; got %d bytes", len(stdout.String()))
	}
	if !waitFor(10*time.Second, func() bool { return len(findProcs(mark)) == 1 }) {
		t.Fatal("worker not running")
	}
	close(lost)
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	full := stdout.String()
	if !strings.HasPrefix(full, "line0\nline1\n") || !strings.Contains(full, "line1999\nready\n") {
		t.Fatalf("streamed stdout incomplete (%d bytes)", len(full))
	}
	if len(o.res.StdoutTail) != 100 {
		t.Fatalf("stdout tail is %d bytes, want 100", len(o.res.StdoutTail))
	}
	if want := full[len(full)-100:]; string(o.res.StdoutTail) != want {
		t.Fatalf("stdout tail %q, want %q", o.res.StdoutTail, want)
	}
	if string(o.res.StderrTail) != "to-stderr\n" || stderr.String() != "to-stderr\n" {
		t.Fatalf("stderr tail %q streamed %q", o.res.StderrTail, stderr.String())
	}
	if o.res.StoppedBy != StoppedLeaseLost {
		t.Fatalf("StoppedBy=%q", o.res.StoppedBy)
	}
}

func TestEnvironmentIsExactlySpecEnv(t *testing.T) {
	t.Setenv("NATS_CREDS", "/secret/executor.creds")
	t.Setenv("EXECUTOR_ONLY", "x")
	var out syncBuffer
	res := mustRun(t, Spec{
		Command:     []string{"env"},
		Env:         map[string]string{"LEASE_ID": "lease-42", "LEASE_TOKEN": "tok=en"},
		Stdout:      &out,
		KeepWorkdir: true,
	})
	defer os.RemoveAll(res.Workdir)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	want := map[string]string{
		"LEASE_ID":    "lease-42",
		"LEASE_TOKEN": "tok=en",
		"PATH":        DefaultPath,
		"HOME":        res.Workdir,
	}
	if len(got) != len(want) {
		t.Fatalf("worker env %v, want exactly %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("worker env %s=%q, want %q (env %v)", k, got[k], v, got)
		}
	}
	if res.Workdir == "" {
		t.Fatal("kept workdir not reported")
	}

	// PATH and HOME from Spec.Env are used as given; PATH drives lookup.
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "myworker"), []byte("#!/bin/sh\necho \"$HOME $PATH\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out = syncBuffer{}
	mustRun(t, Spec{
		Command: []string{"myworker"},
		Env:     map[string]string{"PATH": bin + ":/usr/bin:/bin", "HOME": "/nowhere"},
		Stdout:  &out,
	})
	if got, want := out.String(), "/nowhere "+bin+":/usr/bin:/bin\n"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

// TestStopKillsEverything covers timeout, lease loss and cancellation with
// workers that fork grandchildren, ignore SIGTERM (children too), or have a
// grandchild that escapes the process group with setsid.
func TestStopKillsEverything(t *testing.T) {
	const grace = 200 * time.Millisecond
	haveNS := namespacesAvailable(0)
	scripts := map[string]string{
		"forks":       `sleep @A@ & sleep @B@ & wait`,
		"ignore-term": `trap "" TERM; sleep @A@ & sh -c 'trap "" TERM; sleep @B@' & wait`,
		"setsid":      `setsid sleep @A@ & sleep @B@ & wait`,
	}
	cases := []struct {
		trigger, script string
		isolate         bool
	}{
		{StoppedTimeout, "forks", false},
		{StoppedTimeout, "ignore-term", false},
		{StoppedTimeout, "ignore-term", true},
		{StoppedLeaseLost, "forks", false},
		{StoppedLeaseLost, "ignore-term", false},
		{StoppedLeaseLost, "setsid", false},
		{StoppedLeaseLost, "forks", true},
		{StoppedLeaseLost, "ignore-term", true},
		{StoppedLeaseLost, "setsid", true},
		{StoppedCancelled, "forks", false},
		{StoppedCancelled, "ignore-term", true},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%s/%s/isolate=%t", tc.trigger, tc.script, tc.isolate)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, b := marker(), marker()
			script := strings.NewReplacer("@A@", a, "@B@", b).Replace(scripts[tc.script])
			spec := Spec{Command: []string{"sh", "-c", script}, KillGrace: grace, Isolate: tc.isolate}
			if tc.trigger == StoppedLeaseLost {
				spec.LostGrace = grace
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			lost := make(chan struct{})
			if tc.trigger == StoppedTimeout {
				// Long enough for the worker's processes to be seen
				// first on a loaded machine, where its tree (one cpu
				// group) gets one process's share: at 1.5 s, a run beside
				// another package's tests timed out before they were.
				spec.Timeout = 5 * time.Second
			}
			start := time.Now()
			done := runAsync(ctx, spec, lost)
			running := func() bool { return len(findProcs(a)) == 1 && len(findProcs(b)) == 1 }
			if !waitFor(10*time.Second, running) {
				t.Fatalf("worker processes never appeared (a=%v b=%v)", findProcs(a), findProcs(b))
			}
			var triggered time.Time
			switch tc.trigger {
			case StoppedLeaseLost:
				triggered = time.Now()
				close(lost)
			case StoppedCancelled:
				triggered = time.Now()
				cancel()
			case StoppedTimeout:
				triggered = start.Add(spec.Timeout)
			}
			var o outcome
			select {
			case o = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return")
			}
			if o.err != nil {
				t.Fatal(o.err)
			}
			// Checked right away: nothing may outlive Run.
			leftA, leftB := findProcs(a), findProcs(b)
			if len(leftB) != 0 {
				t.Errorf("processes survived Run: %v", leftB)
			}
			// Also the setsid grandchild without cgroup or PID namespace:
			// the supervisor finds it below itself (child subreaper).
			if len(leftA) != 0 {
				t.Errorf("processes survived Run: %v (notes %q)", leftA, o.res.Notes)
			}
			res := o.res
			if res.StoppedBy != tc.trigger {
				t.Errorf("StoppedBy=%q, want %q", res.StoppedBy, tc.trigger)
			}
			elapsed := time.Since(triggered)
			switch {
			case tc.script == "ignore-term":
				// Only SIGKILL after the grace stops it.
				if res.ExitCode != -1 || res.Signal != "killed" {
					t.Errorf("exit=%d signal=%q, want killed", res.ExitCode, res.Signal)
				}
				if elapsed < grace {
					t.Errorf("Run returned %v after the stop, before KillGrace %v", elapsed, grace)
				}
			default:
				// Also under a PID namespace: the supervisor is PID 1 there,
				// not the shell.
				if res.ExitCode != -1 || res.Signal != "terminated" {
					t.Errorf("exit=%d signal=%q, want terminated (SIGTERM suffices)", res.ExitCode, res.Signal)
				}
			}
			if tc.isolate {
				wantIso := IsolationNone
				if haveNS {
					wantIso = IsolationNamespaces
				}
				if res.Isolation != wantIso {
					t.Errorf("Isolation=%q want %q (notes %q)", res.Isolation, wantIso, res.Notes)
				}
			}
		})
	}
}

func TestLeftoverProcessesAfterNormalExit(t *testing.T) {
	t.Parallel()
	a := marker()
	res := mustRun(t, Spec{
		Command:   []string{"sh", "-c", "sleep " + a + " & echo started"},
		KillGrace: 200 * time.Millisecond,
	})
	if left := findProcs(a); len(left) != 0 {
		t.Fatalf("background process survived Run: %v", left)
	}
	if res.ExitCode != 0 || res.StoppedBy != "" || !hasNote(res, "left processes behind") {
		t.Fatalf("exit=%d stoppedBy=%q notes=%q", res.ExitCode, res.StoppedBy, res.Notes)
	}
}

func TestContextCancelAndPreStartStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Spec{Command: []string{"true"}}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err=%v", err)
	}
	lost := make(chan struct{})
	close(lost)
	if _, err := Run(context.Background(), Spec{Command: []string{"true"}}, lost); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("lost lease: err=%v", err)
	}
}

func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	_, cgMemory, _ := cgroupCaps(t)
	// GNU tail buffers a newline-free stream entirely.
	hog := []string{"sh", "-c", "head -c 128M /dev/zero | tail"}
	// Control: without a limit the same worker succeeds, so a failure
	// below is due to the limit.
	if res := mustRun(t, Spec{Command: hog, Timeout: 30 * time.Second}); res.ExitCode != 0 {
		t.Fatalf("control run failed: %+v", res)
	}
	res := mustRun(t, Spec{Command: hog, MemoryBytes: 64 << 20, Timeout: 30 * time.Second})
	t.Logf("memory: limit=%s exit=%d signal=%q stoppedBy=%q peak=%d notes=%q stderr=%q",
		res.MemoryLimit, res.ExitCode, res.Signal, res.StoppedBy, res.PeakMemoryBytes, res.Notes, res.StderrTail)
	if res.ExitCode == 0 {
		t.Fatal("memory-hungry worker succeeded despite the 64 MiB limit")
	}
	if cgMemory {
		if res.MemoryLimit != LimitCgroup || res.StoppedBy != StoppedMemory {
			t.Fatalf("cgroup memory available: MemoryLimit=%q StoppedBy=%q", res.MemoryLimit, res.StoppedBy)
		}
		if res.PeakMemoryBytes <= 0 || res.PeakMemoryBytes > 80<<20 {
			t.Fatalf("PeakMemoryBytes=%d", res.PeakMemoryBytes)
		}
	} else {
		// RLIMIT_DATA fails tail's allocation, or the watch stops the
		// tree first: either way the limit held, and the run says how.
		if res.MemoryLimit != LimitRlimit || !hasNote(res, "RLIMIT_DATA") {
			t.Fatalf("rlimit fallback: MemoryLimit=%q StoppedBy=%q notes=%q", res.MemoryLimit, res.StoppedBy, res.Notes)
		}
		if res.StoppedBy != StoppedMemory && !strings.Contains(string(res.StderrTail), "memory exhausted") {
			t.Fatalf("want tail's allocation to fail or StoppedBy memory: StoppedBy=%q stderr=%q", res.StoppedBy, res.StderrTail)
		}
	}
}

func TestCPULimit(t *testing.T) {
	t.Parallel()
	res := mustRun(t, Spec{Command: []string{"sh", "-c", "while :; do :; done"}, CPUTime: time.Second, Timeout: 30 * time.Second})
	if res.StoppedBy != StoppedCPU || res.ExitCode != -1 {
		t.Fatalf("StoppedBy=%q exit=%d signal=%q", res.StoppedBy, res.ExitCode, res.Signal)
	}
	if res.Duration > 15*time.Second {
		t.Fatalf("CPU limit took %v", res.Duration)
	}
	// Ignoring SIGXCPU only buys one second: the hard limit SIGKILLs.
	res = mustRun(t, Spec{Command: []string{"sh", "-c", `trap "" XCPU; while :; do :; done`}, CPUTime: time.Second, Timeout: 30 * time.Second})
	if res.StoppedBy != StoppedCPU || res.Signal != "killed" {
		t.Fatalf("SIGXCPU ignored: StoppedBy=%q signal=%q", res.StoppedBy, res.Signal)
	}
}

func TestOpenFilesLimit(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	mustRun(t, Spec{Command: []string{"sh", "-c", "ulimit -n"}, MaxOpenFiles: 64, Stdout: &out})
	if got := strings.TrimSpace(out.String()); got != "64" {
		t.Fatalf("ulimit -n = %q, want 64", got)
	}
	// 0 = inherit: the same soft limit any os/exec child of this process gets.
	want, err := exec.Command("sh", "-c", "ulimit -n").Output()
	if err != nil {
		t.Fatal(err)
	}
	out = syncBuffer{}
	mustRun(t, Spec{Command: []string{"sh", "-c", "ulimit -n"}, Stdout: &out})
	if out.String() != string(want) {
		t.Fatalf("inherited ulimit -n = %q, want %q", out.String(), want)
	}
}

// MaxProcs bounds the worker's processes. Where a cgroup v1 pids
// controller takes it, the bound is exact: the worker alone is in that
// cgroup, so it runs MaxProcs processes and not one more. The supervisor
// and the exec stage, whose Go runtimes' threads the kernel counts, used
// to be in it too, and a run with a small MaxProcs failed to start, at
// random or always ("start the exec stage: resource temporarily
// unavailable", or the exec stage's runtime aborting). Elsewhere many
// forks are refused (a cgroup v2 pids.max, or RLIMIT_NPROC for a user
// other than root), or root is told the limit is not enforced.
func TestMaxProcs(t *testing.T) {
	t.Parallel()
	_, _, cgPids := cgroupCaps(t)
	v2, _ := newCgroup(0, 10)
	v2Pids := v2 != nil && v2.pids
	if v2 != nil {
		if err := v2.remove(); err != nil {
			t.Errorf("remove probe cgroup: %v", err)
		}
	}
	if cgPids && !v2Pids {
		// sh and n-1 sleeps: n processes.
		procs := func(n int) *Result {
			return mustRun(t, Spec{
				Command:  []string{"sh", "-c", fmt.Sprintf("i=1; while [ $i -lt %d ]; do sleep 0.5 & i=$((i+1)); done; wait", n)},
				MaxProcs: 3,
				Timeout:  20 * time.Second,
			})
		}
		if res := procs(3); res.ExitCode != 0 {
			t.Fatalf("MaxProcs 3 refused a tree of 3 processes: exit %d, stderr %q, notes %q", res.ExitCode, res.StderrTail[:min(len(res.StderrTail), 300)], res.Notes)
		}
		if res := procs(4); res.ExitCode == 0 {
			t.Fatalf("MaxProcs 3 let a tree of 4 processes run: %+v", res)
		}
		return
	}
	res := mustRun(t, Spec{
		Command:  []string{"sh", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 1 & done; wait"},
		MaxProcs: 3,
		Timeout:  20 * time.Second,
	})
	enforced := cgPids || os.Geteuid() != 0
	if enforced && res.ExitCode == 0 {
		t.Fatalf("MaxProcs not enforced: %+v", res)
	}
	if !enforced && (res.ExitCode != 0 || !hasNote(res, "NOT enforced")) {
		t.Fatalf("root without pids controller: want success and a note, got exit=%d notes=%q", res.ExitCode, res.Notes)
	}
}

func TestWorkdir(t *testing.T) {
	t.Parallel()
	script := `pwd; echo hi > f`
	var out syncBuffer
	res := mustRun(t, Spec{Command: []string{"sh", "-c", script}, Stdout: &out})
	dir := strings.TrimSpace(out.String())
	if !strings.HasPrefix(filepath.Base(dir), "slotlease-sandbox-") {
		t.Fatalf("workdir %q is not a fresh temp dir", dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("fresh workdir %s not removed: %v", dir, err)
	}
	if res.Workdir != "" {
		t.Fatalf("Workdir=%q for a removed dir", res.Workdir)
	}

	out = syncBuffer{}
	res = mustRun(t, Spec{Command: []string{"sh", "-c", script}, Stdout: &out, KeepWorkdir: true})
	dir = strings.TrimSpace(out.String())
	defer os.RemoveAll(dir)
	if res.Workdir != dir {
		t.Fatalf("Workdir=%q, worker ran in %q", res.Workdir, dir)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(data) != "hi\n" {
		t.Fatalf("kept workdir content: %q %v", data, err)
	}

	given := t.TempDir()
	out = syncBuffer{}
	res = mustRun(t, Spec{Command: []string{"sh", "-c", script}, Stdout: &out, Dir: given})
	if strings.TrimSpace(out.String()) != given || res.Workdir != given {
		t.Fatalf("Dir: ran in %q, Workdir=%q, want %q", out.String(), res.Workdir, given)
	}
	if _, err := os.Stat(filepath.Join(given, "f")); err != nil {
		t.Fatal("given Dir was not kept")
	}
	// Relative command paths resolve against the workdir.
	if err := os.WriteFile(filepath.Join(given, "run.sh"), []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if res := mustRun(t, Spec{Command: []string{"./run.sh"}, Dir: given}); res.ExitCode != 3 {
		t.Fatalf("./run.sh exit=%d", res.ExitCode)
	}
}

func TestIsolate(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	res := mustRun(t, Spec{
		Command: []string{"sh", "-c", `echo $PPID; echo $$; for p in /proc/[0-9]*; do echo $p; done`},
		Isolate: true,
		Stdout:  &out,
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if namespacesAvailable(0) {
		if res.Isolation != IsolationNamespaces {
			t.Fatalf("namespaces are available but Isolation=%q notes=%q", res.Isolation, res.Notes)
		}
		if lines[0] != "1" {
			t.Fatalf("worker's parent pid %q, want 1 (the supervisor) in its own PID namespace", lines[0])
		}
		if !hasNote(res, "/proc") {
			// Fresh /proc: only the supervisor and the worker are visible.
			if want := []string{"/proc/1", "/proc/" + lines[1]}; len(lines) != 4 || lines[2] != want[0] || lines[3] != want[1] {
				t.Fatalf("worker sees processes %q, want only %q", lines[2:], want)
			}
		}
	} else {
		if res.Isolation != IsolationNone || !hasNote(res, "isolation requested") {
			t.Fatalf("namespaces unavailable but Isolation=%q notes=%q", res.Isolation, res.Notes)
		}
		if lines[0] == "1" {
			t.Fatal("worker claims pid 1 without a PID namespace")
		}
	}
}

func TestNoNetwork(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	res, err := Run(context.Background(), Spec{
		Command:   []string{"sh", "-c", `tail -n +3 /proc/net/dev | cut -d: -f1`},
		NoNetwork: true,
		Stdout:    &out,
	}, nil)
	if !namespacesAvailable(syscall.CLONE_NEWNET) {
		// Never with the host's network: not started at all.
		if !errors.Is(err, ErrNotIsolated) || out.String() != "" {
			t.Fatalf("no network namespace here, but err %v, output %q", err, out.String())
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	ifaces := strings.Fields(out.String())
	if res.Isolation != IsolationNamespaces || len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Fatalf("Isolation=%q interfaces=%q notes=%q", res.Isolation, ifaces, res.Notes)
	}
	if hasNote(res, "bring lo up") {
		t.Fatalf("lo not up: %q", res.Notes)
	}
}

func TestBadSpec(t *testing.T) {
	// Fresh workdirs of failed runs must be removed too.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	notExec := filepath.Join(t.TempDir(), "data.txt")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	badFormat := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(badFormat, []byte("\x00\x01\x02 not an executable"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]Spec{
		"empty":          {},
		"empty argv0":    {Command: []string{""}},
		"not in PATH":    {Command: []string{"definitely-not-a-binary-3f9a"}},
		"not in Env":     {Command: []string{"sh"}, Env: map[string]string{"PATH": "/nonexistent"}},
		"absolute":       {Command: []string{"/nonexistent/bin/worker"}},
		"not executable": {Command: []string{notExec}},
		"exec format":    {Command: []string{badFormat}},
		"bad env":        {Command: []string{"true"}, Env: map[string]string{"A=B": "c"}},
		"bad dir":        {Command: []string{"true"}, Dir: "/nonexistent/dir"},
		"negative limit": {Command: []string{"true"}, MemoryBytes: -1},
	} {
		res, err := Run(context.Background(), spec, nil)
		if err == nil {
			t.Errorf("%s: no error, result %+v", name, res)
		}
		if res != nil {
			t.Errorf("%s: result with error", name)
		}
		t.Logf("%s: %v", name, err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("workdirs left behind: %v", ents)
	}
}

func TestInitRequired(t *testing.T) {
	initHookCalled.Store(false)
	defer initHookCalled.Store(true)
	if _, err := Run(context.Background(), Spec{Command: []string{"true"}}, nil); !errors.Is(err, ErrInitNotCalled) {
		t.Fatalf("err=%v, want ErrInitNotCalled", err)
	}
}

// TestExecutorCrash: when the executor dies without cleaning up (SIGKILL),
// the worker and its children die with it (the supervisor's parent-death
// signal), with or without a PID namespace; see also
// TestExecutorCrashKillsWholeTree.
//
// Not parallel: it checks that the crashed executor's cgroup exists until
// the next Run sweeps it, and parallel Runs would sweep it at any time.
func TestExecutorCrash(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	haveCgroup, _, _ := cgroupCaps(t)
	for _, isolate := range []bool{false, true} {
		a, b := marker(), marker()
		script := "exec sleep " + a
		if isolate {
			script = "sleep " + a + " & sleep " + b + " & wait"
		}
		cmd := exec.Command(exe, "-test.run=^$")
		// The crashed executor cannot remove its fresh workdir.
		cmd.Env = append(os.Environ(), executorEnv+"="+script, "TMPDIR="+t.TempDir())
		if isolate {
			cmd.Env = append(cmd.Env, executorEnv+"_ISOLATE=1")
		}
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if !waitFor(10*time.Second, func() bool { return len(findProcs(a)) == 1 }) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("worker never started: %s", stderr.String())
		}
		cmd.Process.Kill()
		cmd.Wait()
		crashed := cmd.Process.Pid
		gone := func() bool { return len(findProcs(a)) == 0 && len(findProcs(b)) == 0 }
		if !waitFor(5*time.Second, gone) {
			for _, m := range []string{a, b} {
				for _, pid := range findProcs(m) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			t.Fatalf("isolate=%t: worker survived the executor's death", isolate)
		}
		// The next Run removes the crashed executor's cgroup.
		if parent, err := cgroup2Self(); err == nil && haveCgroup {
			pattern := filepath.Join(parent, fmt.Sprintf("%s%s-%d-*", cgroupPrefix, pidNamespaceID(), crashed))
			if stale, _ := filepath.Glob(pattern); len(stale) != 1 {
				t.Logf("crashed executor's cgroup not found (%v): another executor swept it already?", stale)
				continue
			}
			cgroupCaps(t) // sweeps
			if stale, _ := filepath.Glob(pattern); len(stale) != 0 {
				t.Fatalf("stale cgroups still present after a sweep: %v", stale)
			}
		}
	}
}

// TestLeaseLossDoesNotWaitForKillGrace: once the lease is lost its slots go
// to the next holder when the record expires, so the work is stopped within
// LostGrace, however long KillGrace is, also when it ignores SIGTERM (as a
// PID 1 without a handler does).
func TestLeaseLossDoesNotWaitForKillGrace(t *testing.T) {
	const killGrace = 30 * time.Second
	for _, lostGrace := range []time.Duration{0, 100 * time.Millisecond} {
		t.Run(fmt.Sprint("LostGrace=", lostGrace), func(t *testing.T) {
			a := marker()
			spec := Spec{Command: []string{"sh", "-c", `trap "" TERM; sleep ` + a + ` & wait`}, KillGrace: killGrace, LostGrace: lostGrace}
			lost := make(chan struct{})
			done := runAsync(context.Background(), spec, lost)
			if !waitFor(10*time.Second, func() bool { return len(findProcs(a)) == 1 }) {
				t.Fatal("worker never started")
			}
			close(lost)
			var o outcome
			select {
			case o = <-done:
			case <-time.After(killGrace / 2):
				t.Fatalf("Run still waits %v after the lease was lost: it waits for KillGrace, not LostGrace", killGrace/2)
			}
			if o.err != nil {
				t.Fatal(o.err)
			}
			if left := findProcs(a); len(left) != 0 {
				t.Errorf("processes survived Run: %v", left)
			}
			if o.res.StoppedBy != StoppedLeaseLost || o.res.Signal != "killed" {
				t.Errorf("StoppedBy=%q signal=%q, want %q and killed", o.res.StoppedBy, o.res.Signal, StoppedLeaseLost)
			}
		})
	}
}

// TestLeaseLossDoesNotWaitForAStoppedSupervisor: outside a PID namespace a
// worker can stop its own supervisor (same user). After a lease loss the
// SIGKILL backstop then comes within about LostGrace, not after the
// supervisor's usual 2 s turn, so the work still ends within the holder's
// margin.
func TestLeaseLossDoesNotWaitForAStoppedSupervisor(t *testing.T) {
	t.Setenv(plainEnvVar, "1")
	const lostGrace = 100 * time.Millisecond
	a := marker()
	spec := Spec{Command: []string{"sh", "-c", `trap "" TERM; kill -STOP $PPID; sleep ` + a + ` & wait`}, KillGrace: 30 * time.Second, LostGrace: lostGrace}
	lost := make(chan struct{})
	done := runAsync(context.Background(), spec, lost)
	if !waitFor(10*time.Second, func() bool { return len(findProcs(a)) == 1 }) {
		t.Fatal("worker never started")
	}
	time.Sleep(100 * time.Millisecond) // let the worker stop its supervisor
	lostAt := time.Now()
	close(lost)
	var o outcome
	select {
	case o = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	if took := time.Since(lostAt); took >= supervisorWait {
		t.Errorf("Run returned %v after the lease loss: it waited the stopped supervisor's full turn (%v)", took.Round(time.Millisecond), supervisorWait)
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	if left := findProcs(a); len(left) != 0 {
		t.Errorf("processes survived Run: %v", left)
	}
	if o.res.StoppedBy != StoppedLeaseLost {
		t.Errorf("StoppedBy=%q, want %q", o.res.StoppedBy, StoppedLeaseLost)
	}
}

//go:build linux

package sandbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Running the started worker to its end: its output, its deadlines, and
// what the supervisor reported.
func (r *runner) execute(ctx context.Context, lost <-chan struct{}, res *Result) (err error) {
	if r.outR, r.outW, err = os.Pipe(); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	defer r.outR.Close()
	if r.errR, r.errW, err = os.Pipe(); err != nil {
		r.outW.Close()
		return fmt.Errorf("sandbox: %w", err)
	}
	defer r.errR.Close()

	if plainForced() {
		r.note(plainEnvVar + "=1: no namespaces and no cgroup (test setting)")
	} else {
		cg, notes := newCgroup(r.spec.MemoryBytes, r.spec.MaxProcs)
		r.cg = cg
		r.note(notes...)
		var mem int64
		var procs int
		if cg == nil || !cg.memory {
			mem = r.spec.MemoryBytes
		}
		if cg == nil || !cg.pids {
			procs = r.spec.MaxProcs
		}
		if mem > 0 || procs > 0 {
			r.v1, notes = newV1Limits(mem, procs, cgroupName())
			r.note(notes...)
		}
		r.cpu = newCPUGroup(cgroupName())
	}
	defer r.dropV1(nil)
	defer func() {
		if err := r.cpu.remove(); err != nil {
			r.note(fmt.Sprintf("could not remove cgroup %s: %v", r.cpu.dir, err))
		}
	}()
	defer func() {
		if r.cg != nil {
			if rmErr := r.cg.remove(); rmErr != nil {
				r.note(fmt.Sprintf("could not remove cgroup %s: %v", r.cg.path, rmErr))
			}
			r.cg = nil
		}
	}()

	// The waiter goroutine starts the worker on a locked OS thread and
	// waits for it there (see Pdeathsig in sysProcAttr).
	var wg sync.WaitGroup
	defer wg.Wait()
	startCh := make(chan error, 1)
	waitDone := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := r.start()
		startCh <- err
		if err != nil {
			return
		}
		_ = r.cmd.Wait() // a non-zero exit is read from ProcessState
		r.exitTime = time.Now()
		close(waitDone)
	}()
	err = <-startCh
	r.outW.Close()
	r.errW.Close()
	if errors.Is(err, ErrNotIsolated) {
		return err
	}
	if err != nil {
		return fmt.Errorf("sandbox: start %s: %w", r.spec.Command[0], err)
	}
	r.reportSetup(res)

	statusCh := make(chan []string, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		data, _ := io.ReadAll(r.statusR)
		r.statusR.Close()
		statusCh <- strings.Split(strings.TrimSpace(string(data)), "\n")
	}()
	readersDone := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Add(2)
	wg.Add(3)
	go func() { defer wg.Done(); defer rwg.Done(); r.pump(r.outR, r.spec.Stdout, r.outTail, "stdout") }()
	go func() { defer wg.Done(); defer rwg.Done(); r.pump(r.errR, r.spec.Stderr, r.errTail, "stderr") }()
	go func() { defer wg.Done(); rwg.Wait(); close(readersDone) }()

	stopDeadlines := make(chan struct{})
	if r.deadlineW != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.tellDeadlines(stopDeadlines) }()
	}

	// Without a cgroup's memory controller, the tree's resident memory is
	// watched (memwatch_linux.go); memOver stays nil otherwise.
	var memOver chan struct{}
	var mw *memWatch
	stopMem, memDone := make(chan struct{}), make(chan struct{})
	if r.spec.MemoryBytes > 0 && !(r.cgUsed && r.cg.memory) {
		mw, memOver = &memWatch{root: r.cmd.Process.Pid, limit: r.spec.MemoryBytes, v1: r.v1.memoryOnly()}, make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); defer close(memDone); mw.run(stopMem, memOver) }()
	} else {
		close(memDone)
	}

	var timerC <-chan time.Time
	if r.spec.Timeout > 0 {
		t := time.NewTimer(r.spec.Timeout)
		defer t.Stop()
		timerC = t.C
	}

	var status []string
	gotStatus, execFailed := false, false
	stCh := statusCh
	reason := ""
loop:
	for {
		select {
		case status = <-stCh:
			gotStatus, stCh = true, nil
			if statusError(status, r.path) != nil {
				execFailed = true
				break loop
			}
		case <-waitDone:
			break loop
		case <-ctx.Done():
			reason = StoppedCancelled
			break loop
		case <-lost:
			reason = StoppedLeaseLost
			break loop
		case <-timerC:
			reason = StoppedTimeout
			break loop
		case <-memOver:
			reason = StoppedMemory
			break loop
		}
	}
	close(stopMem)
	// While the tree is stopped the supervisor is still told every new
	// deadline: a graceful stop (a timeout, a cancel) keeps the lease and
	// has its whole kill grace, and the lease's end still bounds it.
	switch {
	case execFailed:
		r.terminate(waitDone, 0, nil)
	case reason == StoppedMemory:
		// Memory runs out for the whole host if it goes on: no grace.
		r.stopNote(mw.cause(), r.terminate(waitDone, 0, nil), 0)
	case reason == StoppedLeaseLost:
		lostGrace := min(r.grace, max(r.spec.LostGrace, 0))
		r.stopNote("the lease was lost", r.terminateWithin(waitDone, lostGrace, r.lostWait(), nil), lostGrace)
	case reason != "":
		r.stopNote(stopCause(reason, r.spec.Timeout), r.terminate(waitDone, r.grace, lost), r.grace)
	default:
		if !r.allGone(waitDone) {
			r.note("the worker exited but left processes behind; they were terminated")
			r.terminate(waitDone, r.grace, lost)
		}
	}
	close(stopDeadlines)
	if !gotStatus {
		status = <-statusCh // the helper is gone, so its status pipe is at EOF
	}
	select {
	case <-readersDone:
	case <-time.After(time.Second):
		// Only possible when a process escaped all tracking (setsid
		// without cgroup or PID namespace, after the worker killed its
		// supervisor) and still holds the pipes.
		r.note("worker output pipes are still held open by an untracked process; output capture stopped")
		_ = r.outR.SetReadDeadline(time.Now())
		_ = r.errR.SetReadDeadline(time.Now())
		<-readersDone
	}
	wg.Wait()

	for _, line := range status {
		if n, ok := strings.CutPrefix(line, "note:"); ok {
			r.note(n)
		}
	}
	if r.lent() && !slices.Contains(status, "returned:") {
		r.reclaim() // the supervisor died before it gave back (OOM, SIGKILL)
	}
	if err := statusError(status, r.path); err != nil {
		return err
	}
	<-memDone
	if reason == "" && slices.Contains(status, "deadline:") {
		// The supervisor stopped the tree at the lease deadline while
		// Run heard nothing of the loss (its caller was frozen, say):
		// lost all the same.
		reason = StoppedLeaseLost
	}
	r.collect(res, reason, status)
	if mw != nil {
		res.PeakMemoryBytes = max(res.PeakMemoryBytes, mw.peak) // the tree's, where rusage has one process's
	}
	return nil
}

// workerStatus extracts the worker's wait status reported by the supervisor.
func workerStatus(status []string) (syscall.WaitStatus, bool) {
	for _, line := range status {
		if v, ok := strings.CutPrefix(line, "exit:"); ok {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return 0, false
			}
			return syscall.WaitStatus(n), true
		}
	}
	return 0, false
}

// statusError extracts a fatal error reported by the init helper.
func statusError(status []string, path string) error {
	for _, line := range status {
		if v, ok := strings.CutPrefix(line, "execerr:"); ok {
			n, _ := strconv.Atoi(v)
			return fmt.Errorf("sandbox: %w", &exec.Error{Name: path, Err: syscall.Errno(n)})
		}
		if v, ok := strings.CutPrefix(line, "error:"); ok {
			return fmt.Errorf("sandbox: %s", v)
		}
		if v, ok := strings.CutPrefix(line, "isolation:"); ok {
			return fmt.Errorf("%w: %s", ErrNotIsolated, v)
		}
	}
	return nil
}

// reportSetup records how isolation and limits were actually applied.
func (r *runner) reportSetup(res *Result) {
	s := r.spec
	if r.nsUsed.flags != 0 {
		res.Isolation = IsolationNamespaces // also when only Hide asked for them
	}
	if s.Isolate && !r.confined {
		if r.nsUsed.flags != 0 {
			if r.nsUsed.user {
				r.note("namespaces: " + r.nsUsed.String() + " (a user namespace was needed)")
			}
		} else {
			r.note("isolation requested but namespaces are unavailable (see the start fallback note): the worker shares the executor's PID and mount namespaces")
		}
	}
	// Confined and no-network runs start only with their namespaces
	// (start), so these hold whenever Run got this far.
	res.Confined, res.Hidden = r.confined, r.confined && len(s.Hide) > 0
	if r.confined {
		res.Identity = r.id
	}
	if r.cg != nil && !r.cgUsed {
		r.note("the worker could not be placed in its cgroup; tracking by process group only")
		if err := r.cg.remove(); err != nil {
			r.note(fmt.Sprintf("could not remove cgroup %s: %v", r.cg.path, err))
		}
		r.cg = nil
	}
	if s.MemoryBytes > 0 {
		if r.cgUsed && r.cg.memory {
			res.MemoryLimit = LimitCgroup
		} else if r.v1.memoryOnly() != nil {
			res.MemoryLimit = LimitCgroup
			r.note("memory limit applied by the cgroup v1 memory controller (memory.limit_in_bytes): the kernel kills a process of the tree at the limit, and then the whole tree is stopped")
		} else {
			res.MemoryLimit = LimitRlimit
			r.note(fmt.Sprintf("no cgroup memory controller: the memory limit is RLIMIT_DATA for each process (an allocation past it fails in that process) and the whole tree's resident memory, read every %v or so (past the limit the tree is killed)", memWatchEvery))
		}
	}
	if s.MaxProcs > 0 && !(r.cgUsed && r.cg.pids) && (r.v1 == nil || r.v1.pids == "") {
		msg := "MaxProcs applied as RLIMIT_NPROC, which counts all processes of the worker's user"
		if r.id.UID != r.plan.uid {
			msg += " (an id of this run's own)"
		}
		if r.id.UID == 0 {
			msg += "; the kernel ignores RLIMIT_NPROC for root, so MaxProcs is NOT enforced"
		}
		r.note(msg)
	}
}

func (r *runner) pump(f *os.File, w io.Writer, tail *tailBuffer, name string) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			_, _ = tail.Write(buf[:n])
			if w != nil {
				r.writeMu.Lock()
				_, werr := w.Write(buf[:n])
				r.writeMu.Unlock()
				if werr != nil {
					r.note(fmt.Sprintf("%s writer failed (%v); output is still captured", name, werr))
					w = nil
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// collect fills the result from the exit status, rusage and cgroup stats.
// The worker's own wait status comes from the supervisor ("exit:" on the
// status pipe); the supervisor's is used only when it died before telling
// (SIGKILLed with the process group, OOM kill of the cgroup). The rusage is
// the supervisor's, which includes the worker it reaped.
func (r *runner) collect(res *Result, reason string, status []string) {
	ps := r.cmd.ProcessState
	ws, _ := ps.Sys().(syscall.WaitStatus)
	if w, ok := workerStatus(status); ok {
		ws = w
	}
	ru, _ := ps.SysUsage().(*syscall.Rusage)
	res.ExitCode = -1
	if ws.Exited() {
		res.ExitCode = ws.ExitStatus()
	}
	if ws.Signaled() {
		res.ExitCode = -1
		res.Signal = ws.Signal().String()
	}
	res.Duration = r.exitTime.Sub(r.startTime)
	var ooms int64
	if r.cgUsed && r.cg.memory {
		res.PeakMemoryBytes = r.cg.peak()
		ooms = r.cg.oomKills()
	} else if r.v1.memoryOnly() != nil {
		res.PeakMemoryBytes = r.v1.peak()
		ooms = r.v1.oomKills()
	}
	if res.PeakMemoryBytes == 0 && ru != nil {
		res.PeakMemoryBytes = ru.Maxrss * 1024
	}
	res.StdoutTail, res.StderrTail = r.outTail.Bytes(), r.errTail.Bytes()

	switch {
	case reason != "":
		res.StoppedBy = reason
	case ooms > 0:
		res.StoppedBy = StoppedMemory
	case ws.Signaled() && ws.Signal() == syscall.SIGXCPU:
		res.StoppedBy = StoppedCPU
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL && r.spec.CPUTime > 0 && ru != nil:
		// The hard RLIMIT_CPU (soft + 1s) kills with SIGKILL. Best effort:
		// a SIGKILL we did not send, after the soft limit was reached. The
		// rusage times can read up to ~10% low (observed under load), and
		// they also count reaped children while RLIMIT_CPU is per process.
		used := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		if used >= cpuSeconds(r.spec.CPUTime)*9/10 {
			res.StoppedBy = StoppedCPU
		}
	}
}

// deadlineEvery is how often Run reads Spec.Deadline again.
const deadlineEvery = 25 * time.Millisecond

// tellDeadlines hands the supervisor every new value of Spec.Deadline, as
// CLOCK_MONOTONIC nanoseconds, until stop closes; then it closes the pipe.
func (r *runner) tellDeadlines(stop <-chan struct{}) {
	defer r.deadlineW.Close()
	t := time.NewTicker(deadlineEvery)
	defer t.Stop()
	var last time.Time
	for {
		if d := r.spec.Deadline(); !d.Equal(last) {
			last = d
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], uint64(monotonicNow()+int64(time.Until(d))))
			if _, err := r.deadlineW.Write(b[:]); err != nil {
				return // the supervisor is gone
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

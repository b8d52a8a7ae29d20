//go:build linux

package sandbox

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The supervisor.
//
// The process Run starts (the init helper) stays between the executor and
// the worker for the worker's whole life:
//
//	executor ─ supervisor (PID 1 of the worker's PID namespace, if any)
//	             └ exec stage ─execve→ worker ─ worker's children ...
//
// It is a child subreaper, so everything the worker forks — also what
// double-forks or calls setsid() — stays below it. The executor's death
// reaches it as superviseSignal (PR_SET_PDEATHSIG with a catchable signal
// in place of the SIGKILL Run sets): it then kills the whole tree and
// exits. The executor sends the same signal when it wants the tree killed
// at once. The worker is no longer PID 1 of its namespace, so SIGTERM (sent
// by the executor to the process group) works without a handler; the
// supervisor passes SIGTERM on to the descendants that left the group.
//
// The exec stage is a second run of the helper binary (fork and exec from
// Go, then the raw execve of the worker), so that the rlimits, the dropped
// capabilities and no_new_privs apply to the worker alone and RLIMIT_DATA
// never constrains the supervisor's Go runtime.
//
// When the worker exits, the supervisor writes its wait status to the
// status pipe ("exit:<status>"), stops what the worker left behind (SIGTERM,
// KillGrace, then SIGKILL) and exits; the status pipe reaches EOF when the
// supervisor is gone.

// superviseSignal asks the supervisor to kill the whole tree at once; it is
// also its parent-death signal.
const superviseSignal = syscall.SIGUSR1

// superviseSigs receives the signals the supervisor handles. It is set up
// in init (see below) only in the supervisor process.
var superviseSigs chan os.Signal

func init() {
	if os.Getenv(initEnvVar) != initEnvValue {
		return
	}
	// Package init runs on the main thread, the one whose parent-death
	// signal Run set (SIGKILL): catch the signal first, then switch, so
	// the executor's death is never missed nor fatal before the tree is
	// killed. If the executor died before this, SIGKILL already ended us.
	superviseSigs = make(chan os.Signal, 8)
	signal.Notify(superviseSigs, superviseSignal, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(superviseSignal), 0, 0, 0)
}

type reaped struct {
	pid int
	ws  unix.WaitStatus
}

func runSupervisor() {
	// The exec stage's parent-death signal is tied to the thread that
	// forks it: keep this goroutine on it for good.
	runtime.LockOSThread()
	// Dumpable until the executor has written our user namespace's id
	// maps (identity_linux.go): a non-root executor can open our uid_map
	// only while we are. Nothing of ours is worth reading yet.
	h := readHandover()
	// Non-dumpable before the worker exists: it must not reach the status
	// pipe through /proc/<pid>/fd (to forge its exit status), nor our
	// memory or capabilities through ptrace.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	unix.CloseOnExec(statusFD)
	cfg := readInitConfig()
	cfg.UID, cfg.GID, cfg.DropGroups = h.UID, h.GID, h.DropGroups
	setupNamespaces(cfg)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		helperStatus("note", fmt.Sprintf("supervisor: PR_SET_CHILD_SUBREAPER failed (%v): a double-forked process can outlive the executor", err))
	}

	worker := startExecStage(cfg)
	reap := make(chan reaped, 16)
	go reapChildren(reap)

	var deadlines <-chan int64
	if cfg.Deadline {
		unix.CloseOnExec(deadlineFD)
		deadlines = readDeadlines()
	}
	expired := deadlineTimer()
	var status *unix.WaitStatus
	for {
		select {
		case d, ok := <-deadlines:
			if !ok {
				deadlines = nil // the executor is gone: PDEATHSIG follows
				continue
			}
			expired.set(d)
		case <-expired.c:
			if d, ok := newerDeadline(deadlines); ok {
				expired.set(d) // a later word had come, behind the one that passed
				continue
			}
			helperStatus("deadline", "") // Run: StoppedLeaseLost
			helperStatus("note", "the lease deadline passed with no newer one from the executor: the worker tree was killed")
			killTree(reap, &status, worker)
			finishSupervisor(status)
		case c, ok := <-reap:
			if !ok {
				finishSupervisor(status)
			}
			if c.pid == worker {
				ws := c.ws
				status = &ws
				helperStatus("exit", strconv.FormatUint(uint64(ws), 10))
				stopLeftovers(reap, cfg.KillGrace)
				finishSupervisor(status)
			}
		case sig := <-superviseSigs:
			switch sig {
			case superviseSignal:
				killTree(reap, &status, worker)
				finishSupervisor(status)
			case syscall.SIGTERM:
				forwardTerm()
			}
			// The supervisor stays to report the worker's status.
		}
	}
}

// forwardTerm passes a SIGTERM on to the descendants that left the process
// group (setsid, setpgid): the executor signals the group, which reaches
// the worker and everything still in it, but not them.
func forwardTerm() {
	self := unix.Getpgrp()
	for pid := range descendantStates() {
		if pgid, err := unix.Getpgid(pid); err == nil && pgid != self {
			_ = unix.Kill(pid, unix.SIGTERM)
		}
	}
}

// startExecStage forks and execs the exec stage (a new run of this binary)
// with the config on fd 3 and the status pipe on fd 4.
func startExecStage(cfg initConfig) int {
	cfg.MountProc, cfg.LoopbackUp, cfg.Confine, cfg.Hide, cfg.Lend, cfg.Writable, cfg.Binds = false, false, false, nil, nil, nil, nil
	f, err := configFile(cfg)
	if err != nil {
		helperFail("supervisor: config for the exec stage: %v", err)
	}
	files := []uintptr{0, 1, 2, f.Fd(), statusFD}
	none := ^uintptr(0) // closed in the child
	if cfg.CPUGroup {
		files = append(files, none, none, cpuGroupFD)
	}
	if cfg.PidsJoin {
		for len(files) < pidsTasksFD {
			files = append(files, none)
		}
		files = append(files, pidsTasksFD)
	}
	pid, err := syscall.ForkExec("/proc/self/exe", []string{initArgv0}, &syscall.ProcAttr{
		Env:   helperEnv(initEnvVar + "=" + initExecValue),
		Files: files,
		// If the supervisor itself is killed, the worker goes too.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	f.Close()
	if cfg.PidsJoin {
		unix.Close(pidsTasksFD) // the exec stage's now
	}
	if cfg.TreeList {
		// The supervisor keeps the file to find the tree by (a cpu group
		// the exec stage joins first thing, which the supervisor is not
		// in; or the run's cgroup v2 cgroup, which it is in too).
		unix.CloseOnExec(cpuGroupFD)
		treeProcs = cpuGroupFD
	}
	if err != nil {
		helperFail("supervisor: start the exec stage: %v", err)
	}
	return pid
}

// reapChildren waits for every child (the subreaper inherits orphans) and
// closes out when none is left.
func reapChildren(out chan<- reaped) {
	defer close(out)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return // ECHILD: the tree is empty
		}
		out <- reaped{pid: pid, ws: ws}
	}
}

// finishSupervisor gives back what was lent to the worker (its tree is
// gone) and exits with the worker's status as an exit code (Run reads the
// exact status from the status pipe).
func finishSupervisor(ws *unix.WaitStatus) {
	giveBack()
	code := 127
	switch {
	case ws == nil:
	case ws.Exited():
		code = ws.ExitStatus()
	case ws.Signaled():
		code = 128 + int(ws.Signal())
	}
	unix.Exit(code)
}

// stopLeftovers ends what the worker left behind: SIGTERM, up to grace,
// then killTree. A superviseSignal cuts the grace short.
func stopLeftovers(reap chan reaped, grace time.Duration) {
	left := descendants()
	if len(left) == 0 {
		drain(reap)
		return
	}
	helperStatus("note", "the worker exited but left processes behind; they were terminated")
	for _, pid := range left {
		_ = unix.Kill(pid, unix.SIGTERM)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	for {
		select {
		case _, ok := <-reap:
			if !ok {
				return
			}
		case sig := <-superviseSigs:
			if sig == superviseSignal {
				killTree(reap, nil, 0)
				return
			}
		case <-t.C:
			killTree(reap, nil, 0)
			return
		}
	}
}

// drain waits until the reaper found no child left, for processes that are
// exiting but not reaped yet.
func drain(reap chan reaped) {
	for range reap {
	}
}

// killTree SIGKILLs every descendant, also those that left the process group
// or session, and returns when all are reaped. A status for the worker
// reaped on the way is stored in *status (if status is not nil).
func killTree(reap chan reaped, status **unix.WaitStatus, worker int) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range reap {
			if status != nil && c.pid == worker {
				ws := c.ws
				*status = &ws
				helperStatus("exit", strconv.FormatUint(uint64(ws), 10))
			}
		}
	}()
	for round := 0; ; round++ {
		switch {
		case os.Getpid() == 1:
			// PID 1 of its own namespace: kill(-1) reaches every other
			// process of the namespace, wherever it moved.
			_ = unix.Kill(-1, unix.SIGKILL)
		case treeProcs >= 0 && round < 3 && killMembers(treeProcs):
			// Its cgroup listed the tree. Later rounds scan /proc too,
			// for an exec stage that had not joined its cpu group yet.
		default:
			freezeAndKill()
		}
		select {
		case <-done:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// freezeAndKill SIGKILLs every descendant, rescanning until a scan finds
// no new one, so a fork bomb cannot outrun the walk: a process with a
// fatal signal pending cannot fork (the kernel aborts the fork), and a
// child forked before the signal arrived is in the next scan, reparented
// to us (the subreaper) if its parent is gone. Members of our process
// group (the worker and whatever did not leave it) are killed as the scan
// reads them, without waiting for the scan to end: a fork bomb's hundreds
// of runnable shells leave a scan of /proc a small share of the CPU, and
// the first scan took 300 ms when it only listed them (the executor
// signals the same group, so nothing else is reached). A pid is killed
// once per call: one reused by a new descendant is found by the caller's
// next round.
func freezeAndKill() {
	self, group := os.Getpid(), unix.Getpgrp()
	killed := map[int]bool{}
	kill := func(pid int) bool {
		if killed[pid] {
			return false
		}
		_ = unix.Kill(pid, unix.SIGKILL)
		killed[pid] = true
		return true
	}
	for round := 0; round < 100; round++ {
		found := false
		tree := scanDescendants(func(pid int, st procStat) {
			if st.pgrp == group && pid != self && st.state != 'Z' && kill(pid) {
				found = true
			}
		})
		for pid := range tree {
			if kill(pid) {
				found = true
			}
		}
		if !found {
			return
		}
	}
}

// descendants lists the live descendants of this process.
func descendants() []int {
	var pids []int
	for pid := range descendantStates() {
		pids = append(pids, pid)
	}
	return pids
}

// descendantStates maps each live (non-zombie) descendant of this process to
// its state, from one scan of /proc (the only way that works on every
// kernel: /proc/<pid>/task/<tid>/children needs CONFIG_PROC_CHILDREN).
func descendantStates() map[int]byte { return scanDescendants(nil) }

// scanDescendants is descendantStates, calling visit (if not nil) with
// each process of the machine as the scan reads it.
func scanDescendants(visit func(pid int, st procStat)) map[int]byte {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := map[int][]int{}
	states := map[int]byte{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		st, ok := readProcStat(pid)
		if !ok {
			continue
		}
		if visit != nil {
			visit(pid, st)
		}
		children[st.ppid] = append(children[st.ppid], pid)
		states[pid] = st.state
	}
	out := map[int]byte{}
	queue := []int{os.Getpid()}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if _, seen := out[c]; seen {
				continue
			}
			queue = append(queue, c)
			if s := states[c]; s != 'Z' && s != 'X' {
				out[c] = s
			}
		}
	}
	return out
}

// readDeadlines reads the deadlines the executor writes on deadlineFD, each
// 8 bytes: CLOCK_MONOTONIC nanoseconds, big-endian. The channel closes at
// EOF or on a read error.
func readDeadlines() <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		defer close(out)
		f := os.NewFile(deadlineFD, "deadline")
		// Read whatever the pipe holds at once and keep the last value:
		// a supervisor slow to start (or starved of CPU) finds many
		// deadlines queued, and only the latest counts.
		var buf [512]byte
		have := 0
		for {
			n, err := f.Read(buf[have:])
			if err != nil {
				return
			}
			have += n
			if have < 8 {
				continue
			}
			last := (have/8 - 1) * 8
			d := int64(binary.BigEndian.Uint64(buf[last : last+8]))
			have = copy(buf[:], buf[last+8:have])
			select {
			case out <- d:
			case <-out: // keep only the latest
				out <- d
			}
		}
	}()
	return out
}

// newerDeadline takes a deadline that is waiting in c, if any, and is
// still ahead. The timer and the deadlines are both ready when a stale
// deadline passed while a fresher one was on its way; select picks either.
func newerDeadline(c <-chan int64) (int64, bool) {
	select {
	case d, ok := <-c:
		return d, ok && d > monotonicNow()
	default:
		return 0, false
	}
}

// deadline is the supervisor's dead-man timer: c fires when the last
// deadline set passes; no deadline, no firing.
type deadline struct {
	t *time.Timer
	c <-chan time.Time
}

func deadlineTimer() *deadline {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &deadline{t: t, c: t.C}
}

// set arms the timer for d, in CLOCK_MONOTONIC nanoseconds.
func (d *deadline) set(mono int64) {
	d.t.Stop()
	d.t.Reset(time.Duration(mono - monotonicNow()))
}

// monotonicNow is CLOCK_MONOTONIC in nanoseconds, the clock the executor
// and the supervisor share (no time namespace is used).
func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

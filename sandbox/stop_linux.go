//go:build linux

package sandbox

import (
	"fmt"
	"syscall"
	"time"
)

// Stopping the worker's tree: SIGTERM, the kill grace, SIGKILL, and how
// it went.
func (r *runner) signalAll(sig syscall.Signal) {
	_ = syscall.Kill(-r.pgid, sig)
	if !r.cgUsed {
		return
	}
	// The cgroup also holds what left the process group. Only those: a
	// process signalled twice may take both (a shell runs its TERM trap
	// twice, and a 2s cleanup then needs 4s of the kill grace).
	for _, pid := range r.cg.procs() {
		if pg, err := syscall.Getpgid(pid); err != nil || pg != r.pgid {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// allGone reports whether the worker has exited and nothing of its process
// group or cgroup is left.
func (r *runner) allGone(waitDone <-chan struct{}) bool {
	select {
	case <-waitDone:
	default:
		return false
	}
	if pgroupAlive(r.pgid) {
		return false
	}
	return !r.cgUsed || r.cg.empty()
}

func (r *runner) waitGone(waitDone <-chan struct{}, d time.Duration) bool {
	gone, _ := r.waitGoneOr(waitDone, d, nil)
	return gone
}

// waitGoneOr is waitGone that also stops waiting when lost closes.
func (r *runner) waitGoneOr(waitDone <-chan struct{}, d time.Duration, lost <-chan struct{}) (gone, lostNow bool) {
	deadline := time.Now().Add(d)
	for {
		if r.allGone(waitDone) {
			return true, false
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, false
		}
		select {
		case <-lost:
			return false, true
		case <-time.After(min(left, 10*time.Millisecond)):
		}
	}
}

// terminate sends SIGTERM to everything, waits up to grace, then SIGKILLs
// until nothing is left. It returns only once the worker itself has exited.
func (r *runner) terminate(waitDone <-chan struct{}, grace time.Duration, lost <-chan struct{}) stopped {
	return r.terminateWithin(waitDone, grace, supervisorWait, lost)
}

// stopped is how a terminate went.
type stopped struct {
	took      time.Duration // from SIGTERM until the tree was gone
	killed    bool          // the grace ran out: SIGKILL
	lostAfter time.Duration // > 0: the lease was lost this long into the grace
}

// stopCause says why Run stopped the worker, for stopNote.
func stopCause(reason string, timeout time.Duration) string {
	switch reason {
	case StoppedTimeout:
		return fmt.Sprintf("it ran past its %v timeout", timeout)
	case StoppedCancelled:
		return "the run was cancelled"
	}
	return "stopped (" + reason + ")"
}

// stopNote tells how stopping the worker went, so that the caller's
// report says what really happened.
func (r *runner) stopNote(cause string, st stopped, grace time.Duration) {
	round := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	switch {
	case grace <= 0:
		r.note(fmt.Sprintf("%s: the worker was killed at once", cause))
	case st.lostAfter > 0:
		r.note(fmt.Sprintf("%s: SIGTERM; the lease was lost %v into the %v kill grace, so the worker was killed then", cause, round(st.lostAfter), grace))
	case st.killed:
		r.note(fmt.Sprintf("%s: SIGTERM; the worker was still running after its %v kill grace and was killed", cause, grace))
	default:
		r.note(fmt.Sprintf("%s: SIGTERM; the worker was gone %v later, within its %v kill grace", cause, round(st.took), grace))
	}
}

// supervisorWait is how long terminate lets the supervisor kill the tree
// before the SIGKILL backstop, unless a lease loss bounds it (lostWait).
const supervisorWait = 2 * time.Second

// lostWait bounds the supervisor's turn after a lease loss: the work must
// be gone within about twice LostGrace (the holder's margin), also when the
// supervisor does not answer (a worker outside a PID namespace can stop
// it: same user).
func (r *runner) lostWait() time.Duration {
	return min(supervisorWait, max(r.spec.LostGrace, 100*time.Millisecond))
}

// terminateWithin is terminate with the supervisor's turn bounded by
// supWait. If lost closes during the grace, the lease is gone: the grace
// ends then, and the supervisor's turn is bounded as after a loss.
func (r *runner) terminateWithin(waitDone <-chan struct{}, grace, supWait time.Duration, lost <-chan struct{}) (st stopped) {
	start := time.Now()
	defer func() { st.took = time.Since(start) }()
	if grace > 0 {
		r.signalAll(syscall.SIGTERM)
		gone, lostNow := r.waitGoneOr(waitDone, grace, lost)
		if gone {
			return st
		}
		if lostNow {
			st.lostAfter = max(time.Since(start), time.Nanosecond)
			supWait = min(supWait, r.lostWait())
		}
	}
	st.killed = true
	// The supervisor kills the whole tree, also what left the process
	// group or session, and reports the worker's status: give it the
	// first go, the signals below are the backstop.
	_ = r.cmd.Process.Signal(superviseSignal)
	if r.waitGone(waitDone, supWait) {
		return st
	}
	killStart := time.Now()
	for {
		// Repeated: a process that forked between two rounds is caught by
		// the next one.
		r.signalAll(syscall.SIGKILL)
		if r.cgUsed {
			r.cg.kill()
		}
		if r.waitGone(waitDone, 20*time.Millisecond) {
			return st
		}
		select {
		case <-waitDone:
			if time.Since(killStart) > 10*time.Second {
				r.note("some processes of the worker survived SIGKILL for 10s (uninterruptible sleep?)")
				return st
			}
		default:
			// The worker itself is still there: SIGKILL always wins in
			// the end, keep going.
		}
	}
}

//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// v1Limits is the worker's cgroup in each cgroup v1 hierarchy whose
// controller enforces a limit the cgroup v2 one could not (a v1 or hybrid
// host, as many CI containers and older distributions are): memory
// (memory.limit_in_bytes, and memory.memsw.limit_in_bytes so it cannot
// swap past it) and pids (pids.max). The per-run v2 cgroup, where there is
// one, still tracks and kills the tree; these only limit it. The
// supervisor is moved into the memory cgroup before it starts the worker
// (enter), so everything the worker starts is in it too. The pids cgroup
// holds the worker alone: the kernel counts threads there, and the
// supervisor's and the exec stage's Go runtimes have several, so with
// them in it a small limit refused the exec stage its fork, or the exec
// stage a thread, before the worker ran. The exec stage moves only its
// own thread into it (pidsTasksFD), as the last thing before execve,
// which leaves that thread the whole process: pids.max is the worker's
// limit exactly.
type v1Limits struct {
	memory string // the memory cgroup's directory, "" if none
	pids   string // the pids cgroup's directory, "" if none
}

// newV1Limits makes the cgroups, named name, for the limits the v2
// controllers could not take (memoryBytes, maxProcs > 0). It returns nil,
// with notes saying why, where no v1 hierarchy can take them.
func newV1Limits(memoryBytes int64, maxProcs int, name string) (*v1Limits, []string) {
	l := &v1Limits{}
	var notes []string
	if memoryBytes > 0 {
		dir, err := makeV1("memory", name)
		if err == nil {
			err = writeFile(filepath.Join(dir, "memory.limit_in_bytes"), strconv.FormatInt(memoryBytes, 10))
			if err == nil {
				// No swapping past the limit; absent without swap accounting.
				if sw := filepath.Join(dir, "memory.memsw.limit_in_bytes"); fileExists(sw) {
					if werr := writeFile(sw, strconv.FormatInt(memoryBytes, 10)); werr != nil {
						notes = append(notes, fmt.Sprintf("cannot write memory.memsw.limit_in_bytes (%v): the worker may swap beyond the memory limit", werr))
					}
				}
			} else {
				_ = os.Remove(dir)
			}
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("no cgroup v1 memory controller either: %v", err))
		} else {
			l.memory = dir
		}
	}
	if maxProcs > 0 {
		dir, err := makeV1("pids", name)
		if err == nil {
			// The worker's alone: the supervisor stays out (pidsTasksFD).
			if err = writeFile(filepath.Join(dir, "pids.max"), strconv.Itoa(maxProcs)); err != nil {
				_ = os.Remove(dir)
			}
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("no cgroup v1 pids controller either: %v", err))
		} else {
			l.pids = dir
		}
	}
	if l.memory == "" && l.pids == "" {
		return nil, notes
	}
	return l, notes
}

// makeV1 creates the cgroup name below this process's cgroup in the v1
// hierarchy of controller, after sweeping what dead executors left there.
func makeV1(controller, name string) (string, error) {
	parent, err := cgroupV1Self(controller)
	if err != nil {
		return "", err
	}
	sweepStaleCgroups(parent, pidNamespaceID())
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cannot create a cgroup under %s: %w", parent, err)
	}
	return dir, nil
}

// dirs lists the cgroups made.
func (l *v1Limits) dirs() []string {
	var out []string
	for _, d := range []string{l.memory, l.pids} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// enter moves pid (the supervisor, before it starts the worker) into the
// memory cgroup, if any.
func (l *v1Limits) enter(pid int) error {
	if l.memory == "" {
		return nil
	}
	if err := writeFile(filepath.Join(l.memory, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("cannot move the worker into cgroup %s: %w", l.memory, err)
	}
	return nil
}

// tasks opens the pids cgroup's tasks file, for the exec stage to move its
// thread into (pidsTasksFD); nil without a pids cgroup. The executor opens
// it, so the kernel checks the executor's credentials, and the exec stage
// needs no view of /sys/fs/cgroup.
func (l *v1Limits) tasks() (*os.File, error) {
	if l == nil || l.pids == "" {
		return nil, nil
	}
	f, err := os.OpenFile(filepath.Join(l.pids, "tasks"), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open cgroup %s for the worker: %w", l.pids, err)
	}
	return f, nil
}

// oomKills is the memory cgroup's oom_kill count (memory.oom_control;
// Linux 4.13+, 0 before).
func (l *v1Limits) oomKills() int64 {
	if l.memoryOnly() == nil {
		return 0
	}
	return keyedCount(filepath.Join(l.memory, "memory.oom_control"), "oom_kill")
}

// peak is memory.max_usage_in_bytes, or 0.
func (l *v1Limits) peak() int64 {
	if l.memoryOnly() == nil {
		return 0
	}
	return fileCount(filepath.Join(l.memory, "memory.max_usage_in_bytes"))
}

// remove deletes the cgroups, killing anything still in them.
func (l *v1Limits) remove() error {
	var errs []error
	for _, d := range l.dirs() {
		errs = append(errs, (&cgroup{path: d, fd: -1}).remove())
	}
	return errors.Join(errs...)
}

// cgroupV1Self returns this process's cgroup directory in the cgroup v1
// hierarchy that has controller.
func cgroupV1Self(controller string) (string, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	rel, found := "", false
	for _, line := range strings.Split(string(self), "\n") {
		// 4:memory:/docker/abc ; 2:cpu,cpuacct:/
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
			rel, found = f[2], true
			break
		}
	}
	if !found {
		return "", fmt.Errorf("no cgroup v1 %s hierarchy in /proc/self/cgroup", controller)
	}
	return mountedCgroupDir(rel, func(fstype, opts string) bool {
		return fstype == "cgroup" && slices.Contains(strings.Split(opts, ","), controller)
	}, controller)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// memoryOnly is l if it limits memory, else nil (also for a nil l).
func (l *v1Limits) memoryOnly() *v1Limits {
	if l == nil || l.memory == "" {
		return nil
	}
	return l
}

// dropV1 removes the v1 cgroups, if any; with err (they could not be
// used), it notes why.
func (r *runner) dropV1(err error) {
	if r.v1 == nil {
		return
	}
	if err != nil {
		r.note(fmt.Sprintf("%v: the limits fall back to rlimits", err))
	}
	if rmErr := r.v1.remove(); rmErr != nil {
		r.note(fmt.Sprintf("could not remove a cgroup v1 directory: %v", rmErr))
	}
	r.v1 = nil
}

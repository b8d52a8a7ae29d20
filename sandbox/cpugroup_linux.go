//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// cpuGroup is the worker's own cgroup in the cgroup v1 cpu hierarchy (a
// v1 or hybrid host where the executor may create one, as root can). The
// worker's tree is in it and its supervisor is not, so the whole tree
// weighs as one process against the supervisor, the executor and the
// lease manager: a fork bomb's busy shells cannot starve the supervisor
// that must kill them within DISCONNECT_GRACE of the executor's death,
// nor the executor's renewals. Sixty busy shells are killed in 7-55 ms;
// without the group it took 0.9-1.4 s on an idle 2-core machine
// (docs/guarantees.md, section 3).
//
// The executor opens the group's cgroup.procs and hands it down (fd
// cpuGroupFD): the exec stage writes itself into it first thing, before
// anything of the worker runs, and closes it. The file is opened by the
// executor, whose credentials the kernel checks, so neither stage needs a
// view of /sys/fs/cgroup (a confined run has none writable).
//
// The supervisor keeps its copy: the file lists the whole tree, also what
// left the process group or session (a worker that may not write the
// hierarchy cannot leave the group), so killing it takes one read of the
// file a round instead of a scan of every process on the machine
// (killMembers). Without a cpu group, the run's cgroup v2 cgroup, where
// there is one, serves as the list (Run's treeFile); the supervisor is in
// that one too, and passes itself over.
type cpuGroup struct {
	dir   string
	procs *os.File // <dir>/cgroup.procs, open for reading and writing
}

// cpuGroupFD is where the supervisor holds the cgroup.procs it lists the
// tree from, and where the exec stage finds the cpu group to join.
const cpuGroupFD = 7

// treeProcs is the supervisor's cpuGroupFD once the exec stage has been
// started, or -1: the supervisor then finds the tree by a scan of /proc.
var treeProcs = -1

// newCPUGroup makes the worker's cpu group, or returns nil where there is
// no v1 cpu hierarchy or it cannot be written (a pure cgroup v2 host, an
// executor that is not root): the worker then shares its supervisor's.
func newCPUGroup(name string) *cpuGroup {
	dir, err := makeV1("cpu", name)
	if err != nil {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_RDWR, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil
	}
	return &cpuGroup{dir: dir, procs: f}
}

// file is the cgroup.procs to hand to the supervisor; nil for a nil g.
func (g *cpuGroup) file() *os.File {
	if g == nil {
		return nil
	}
	return g.procs
}

// remove closes the file and deletes the group, killing anything still
// in it (the run is over: nothing of the worker may be).
func (g *cpuGroup) remove() error {
	if g == nil {
		return nil
	}
	g.procs.Close()
	return (&cgroup{path: g.dir, fd: -1}).remove()
}

// joinCPUGroup moves the calling process (the exec stage, before it
// becomes the worker) into the cpu group the supervisor holds on
// cpuGroupFD, and closes it so that the worker never has it. A failure
// only leaves the worker in its supervisor's group, as without one.
func joinCPUGroup() error {
	defer unix.Close(cpuGroupFD)
	_, err := unix.Write(cpuGroupFD, []byte("0"))
	return err
}

// killMembers SIGKILLs every process the file fd lists but the caller,
// reading the list again until a read finds none it has not
// killed: a process with SIGKILL pending cannot fork, and one forked
// before the signal is in the next read. The pids are those of the
// executor's PID namespace, which the supervisor shares whenever it is
// not PID 1 of its own (killTree). It reports false if the file cannot
// be read: the caller then scans /proc.
func killMembers(fd int) bool {
	self := os.Getpid()
	killed := map[int]bool{}
	var buf []byte
	for round := 0; round < 100; round++ {
		var ok bool
		if buf, ok = readAt0(fd, buf[:0]); !ok {
			return false
		}
		found := false
		for line := range strings.Lines(string(buf)) {
			pid, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil || pid == self || killed[pid] {
				continue
			}
			_ = unix.Kill(pid, unix.SIGKILL)
			killed[pid], found = true, true
		}
		if !found {
			return true
		}
	}
	return true
}

// readAt0 appends the whole of fd's file, read from offset 0, to buf.
func readAt0(fd int, buf []byte) ([]byte, bool) {
	var chunk [4096]byte
	for {
		n, err := unix.Pread(fd, chunk[:], int64(len(buf)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return buf, false
		}
		if n == 0 {
			return buf, true
		}
		buf = append(buf, chunk[:n]...)
	}
}

//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup is a per-run cgroup v2 directory below the executor's own cgroup.
// Even without any controller it tracks every descendant of the worker
// (also those that called setsid) and can kill them all via cgroup.kill.
type cgroup struct {
	path    string
	fd      int  // O_DIRECTORY fd for clone3(CLONE_INTO_CGROUP)
	memory  bool // memory.max written
	pids    bool // pids.max written
	hasKill bool // cgroup.kill present (Linux 5.14+)
}

var cgroupSeq atomic.Uint64

const cgroupPrefix = "slotlease-sandbox-"

// pidNamespaceID identifies this process's PID namespace ("" if unknown).
func pidNamespaceID() string {
	link, err := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	if err != nil {
		return ""
	}
	id := strings.TrimSuffix(strings.TrimPrefix(link, "pid:["), "]")
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		return ""
	}
	return id
}

// sweepStaleCgroups removes per-run cgroups left behind by executors that
// died without cleaning up, killing whatever still runs in them (their
// lease is gone). Names are slotlease-sandbox-<pidns>-<pid>-<n>; only
// cgroups created from our own PID namespace are considered, so that a
// pid that merely is not visible from here is never taken for a dead one.
func sweepStaleCgroups(parent, nsID string) {
	if nsID == "" {
		return
	}
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix+nsID+"-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // owner alive (or pid reused: leave it alone)
		}
		c := &cgroup{path: filepath.Join(parent, e.Name()), fd: -1}
		_, err = os.Stat(filepath.Join(c.path, "cgroup.kill"))
		c.hasKill = err == nil
		c.kill()
		_ = c.remove()
	}
}

// cgroupName is a new per-run cgroup's name:
// slotlease-sandbox-<pidns>-<pid>-<n>, which sweepStaleCgroups knows.
func cgroupName() string {
	nsID := pidNamespaceID()
	if nsID == "" {
		nsID = "0"
	}
	return fmt.Sprintf("%s%s-%d-%d", cgroupPrefix, nsID, os.Getpid(), cgroupSeq.Add(1))
}

// cgroup2Self returns this process's cgroup directory in the cgroup v2
// hierarchy.
func cgroup2Self() (dir string, err error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	rel := ""
	found := false
	for _, line := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = p, true
			break
		}
	}
	if !found {
		return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
	}
	return mountedCgroupDir(rel, func(fstype, _ string) bool { return fstype == "cgroup2" }, "cgroup2")
}

// mountedCgroupDir is where the cgroup rel (as /proc/self/cgroup names
// it) is, in the first mount whose filesystem type and super options
// match (what names the hierarchy in errors).
func mountedCgroupDir(rel string, match func(fstype, opts string) bool, what string) (string, error) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer mi.Close()
	sc := bufio.NewScanner(mi)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// 40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
		// 34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || !match(qf[0], qf[2]) {
			continue
		}
		root, mnt := unescapeMount(pf[3]), unescapeMount(pf[4])
		r := rel
		if root != "/" {
			if r != root && !strings.HasPrefix(r, root+"/") {
				continue // our cgroup is not visible in this mount
			}
			r = strings.TrimPrefix(r, root)
		}
		dir := filepath.Join(mnt, r)
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
			continue
		}
		return dir, nil
	}
	return "", fmt.Errorf("no %s filesystem mounted where this process's cgroup is visible", what)
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readWords(path string) map[string]bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	m := map[string]bool{}
	for _, w := range strings.Fields(string(data)) {
		m[w] = true
	}
	return m
}

func writeFile(path, value string) error {
	return os.WriteFile(path, []byte(value), 0)
}

// newCgroup creates the per-run cgroup and applies memory/pids limits when
// the controllers can be enabled. It returns nil (and notes saying why) when
// no cgroup can be used at all.
func newCgroup(memoryBytes int64, maxProcs int) (*cgroup, []string) {
	var notes []string
	parent, err := cgroup2Self()
	if err != nil {
		return nil, []string{fmt.Sprintf("cgroup v2 unavailable (%v): the worker's tree is tracked by process group and by its supervisor; a descendant that calls setsid() escapes only if the worker kills its supervisor (possible outside a PID namespace)", err)}
	}
	var want []string
	if memoryBytes > 0 {
		want = append(want, "memory")
	}
	if maxProcs > 0 {
		want = append(want, "pids")
	}
	if len(want) > 0 {
		avail := readWords(filepath.Join(parent, "cgroup.controllers"))
		enabled := readWords(filepath.Join(parent, "cgroup.subtree_control"))
		for _, c := range want {
			switch {
			case enabled[c]:
			case !avail[c]:
				notes = append(notes, fmt.Sprintf("cgroup v2 controller %q is not available in %s (cgroup v1 hierarchy or not delegated)", c, parent))
			default:
				if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+"+c); err != nil {
					hint := ""
					if errors.Is(err, syscall.EBUSY) {
						hint = "; the executor's cgroup has processes of its own (no-internal-process rule): run the executor in a delegated cgroup whose controllers can be enabled"
					}
					notes = append(notes, fmt.Sprintf("cannot enable cgroup v2 controller %q in %s: %v%s", c, parent, err, hint))
				}
			}
		}
	}
	sweepStaleCgroups(parent, pidNamespaceID())
	path := filepath.Join(parent, cgroupName())
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, append(notes, fmt.Sprintf("cannot create a cgroup under %s (%v): the worker's tree is tracked by process group and by its supervisor; a descendant that calls setsid() escapes only if the worker kills its supervisor (possible outside a PID namespace)", parent, err))
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(path)
		return nil, append(notes, fmt.Sprintf("cannot open cgroup %s (%v): tracking by process group only", path, err))
	}
	cg := &cgroup{path: path, fd: fd}
	_, err = os.Stat(filepath.Join(path, "cgroup.kill"))
	cg.hasKill = err == nil
	ctrl := readWords(filepath.Join(path, "cgroup.controllers"))
	if memoryBytes > 0 && ctrl["memory"] {
		if err := writeFile(filepath.Join(path, "memory.max"), strconv.FormatInt(memoryBytes, 10)); err != nil {
			notes = append(notes, fmt.Sprintf("cannot write memory.max: %v", err))
		} else {
			cg.memory = true
			if _, err := os.Stat(filepath.Join(path, "memory.swap.max")); err == nil {
				if err := writeFile(filepath.Join(path, "memory.swap.max"), "0"); err != nil {
					notes = append(notes, fmt.Sprintf("cannot write memory.swap.max=0 (%v): the worker may swap beyond the memory limit", err))
				}
			}
			// On OOM kill the whole cgroup, not just the biggest process.
			if _, err := os.Stat(filepath.Join(path, "memory.oom.group")); err == nil {
				_ = writeFile(filepath.Join(path, "memory.oom.group"), "1")
			}
		}
	}
	if maxProcs > 0 && ctrl["pids"] {
		// +1: the supervisor lives in the cgroup too, for the worker's whole life.
		if err := writeFile(filepath.Join(path, "pids.max"), strconv.Itoa(maxProcs+1)); err != nil {
			notes = append(notes, fmt.Sprintf("cannot write pids.max: %v", err))
		} else {
			cg.pids = true
		}
	}
	return cg, notes
}

// procs lists the pids in the cgroup (as seen from the executor).
func (c *cgroup) procs() []int {
	data, err := os.ReadFile(filepath.Join(c.path, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range bytes.Fields(data) {
		if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (c *cgroup) empty() bool { return len(c.procs()) == 0 }

// signal sends sig to every process in the cgroup.
func (c *cgroup) signal(sig syscall.Signal) {
	for _, pid := range c.procs() {
		_ = syscall.Kill(pid, sig)
	}
}

// kill SIGKILLs every process in the cgroup, atomically with cgroup.kill
// when the kernel has it.
func (c *cgroup) kill() {
	if c.hasKill {
		if err := writeFile(filepath.Join(c.path, "cgroup.kill"), "1"); err == nil {
			return
		}
	}
	c.signal(syscall.SIGKILL)
}

// oomKills returns the oom_kill counter of memory.events.
func (c *cgroup) oomKills() int64 {
	return keyedCount(filepath.Join(c.path, "memory.events"), "oom_kill")
}

// peak returns memory.peak, or 0.
func (c *cgroup) peak() int64 { return fileCount(filepath.Join(c.path, "memory.peak")) }

// keyedCount reads the value of key in a cgroup file of "key value"
// lines (memory.events, memory.oom_control), or 0.
func keyedCount(path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// fileCount reads a cgroup file holding one number, or 0.
func fileCount(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// remove deletes the cgroup, killing anything still in it.
func (c *cgroup) remove() error {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	var err error
	for i := 0; i < 200; i++ {
		if err = unix.Rmdir(c.path); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		c.kill()
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

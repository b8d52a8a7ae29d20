//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Where no cgroup's memory controller enforces Spec.MemoryBytes (a cgroup
// v1 host, a controller not delegated), the limit is two things:
//
//   - RLIMIT_DATA on the worker and each process it starts: what one
//     process may map writable and private (its heap, anonymous mmaps).
//     Unlike RLIMIT_AS it does not count what a runtime only reserves
//     (PROT_NONE), so Go, Node.js and Java start under it; an allocation
//     past it fails inside that process.
//   - the memory watch below: the resident memory of the whole tree
//     (anonymous and shared memory, not the page cache of files it reads),
//     read every memWatchEvery (less often on a host whose /proc is large:
//     run); past the limit, the tree is stopped and
//     Result.StoppedBy says "memory". A tree can pass the limit by at most
//     what it allocates in one interval before it is stopped.

// memWatchEvery is how often the watch reads the tree's resident memory.
const memWatchEvery = 100 * time.Millisecond

// memWatch reads the resident memory of the descendants of root (the
// supervisor, a child subreaper: everything the worker starts stays below
// it; the supervisor's own memory is not the worker's).
//
// Where a cgroup v1 memory controller limits the tree (v1 set), the kernel
// kills one process of it at the limit: the watch then only notices that
// kill, and the tree is stopped as a cgroup v2 memory.oom.group would.
type memWatch struct {
	root  int
	limit int64
	v1    *v1Limits // the memory cgroup, if one limits the tree
	peak  int64     // the most seen; read after the watch ended
}

// run reads the tree every memWatchEvery until stop closes, and closes
// over (once) when the tree's resident memory exceeds the limit.
//
// A read scans /proc: on a host with many processes it costs more, and the
// watch then reads less often, so that it never takes more than about 2 %
// of a core (watchInterval).
func (w *memWatch) run(stop <-chan struct{}, over chan<- struct{}) {
	t := time.NewTimer(memWatchEvery)
	defer t.Stop()
	for {
		start := time.Now()
		if w.overLimit() {
			close(over)
			return
		}
		t.Reset(watchInterval(time.Since(start)))
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// watchInterval is the wait after a read that took took: memWatchEvery, or
// 50 times the read where that is longer.
func watchInterval(took time.Duration) time.Duration { return max(memWatchEvery, 50*took) }

// overLimit reads the tree (or its memory cgroup) once.
func (w *memWatch) overLimit() bool {
	if w.v1 != nil {
		return w.v1.oomKills() > 0
	}
	n := treeResident(w.root)
	w.peak = max(w.peak, n)
	return n > w.limit
}

// cause says why the watch stopped the tree, for the run's notes.
func (w *memWatch) cause() string {
	if w.v1 != nil {
		return fmt.Sprintf("the kernel killed a process of the tree at its %s memory limit (cgroup v1)", formatBytes(w.limit))
	}
	return fmt.Sprintf("the tree's resident memory passed the %s limit", formatBytes(w.limit))
}

// treeResident sums the resident anonymous and shared memory of root's
// descendants, found by their parent links in /proc: the supervisor is not
// dumpable, so its /proc/<pid>/task/*/children cannot be read without
// CAP_SYS_PTRACE, but every process's stat can. Processes that end while
// it reads are skipped.
func treeResident(root int) int64 {
	d, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	kids := map[int][]int{}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok {
			kids[st.ppid] = append(kids[st.ppid], pid)
		}
	}
	var total int64
	todo := kids[root]
	for len(todo) > 0 {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		total += residentBytes(pid)
		todo = append(todo, kids[pid]...)
	}
	return total
}

// residentBytes is pid's RssAnon plus RssShmem (0 if it is gone).
func residentBytes(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	var total int64
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Bytes()
		var rest []byte
		var ok bool
		if rest, ok = bytes.CutPrefix(line, []byte("RssAnon:")); !ok {
			if rest, ok = bytes.CutPrefix(line, []byte("RssShmem:")); !ok {
				continue
			}
		}
		f := strings.Fields(string(rest)) // "1234 kB"
		if len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				total += kb << 10
			}
		}
	}
	return total
}

// formatBytes writes n as a person would: 512MiB, 1.5GiB, 700B.
func formatBytes(n int64) string {
	const unit = 1 << 10
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	v, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= unit
		suffix = s
		if v < unit {
			break
		}
	}
	return strconv.FormatFloat(v, 'g', 4, 64) + suffix
}

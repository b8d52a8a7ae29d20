package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Prefixes of the temporary directories slotlease makes in os.TempDir():
// a worker's fresh working directory, CheckConfine's probe, and a job's
// command channel (package jobs, with its socket).
const (
	TempWorkdir = "slotlease-sandbox-"
	TempProbe   = "slotlease-probe-"
	TempJob     = "slotlease-job-"
)

// MkdirTemp makes a fresh directory in os.TempDir() named
// <prefix><pidns>-<pid>-<random>: the PID namespace and pid of the process
// that owns it (in base 36, to keep a unix socket's path in it below the
// kernel's 108 bytes), so that SweepTemp can tell, after a crash, that its
// owner is gone. A directory is removed by its owner when done; one left by an
// owner that died (SIGKILL, an OOM kill, a power loss of a process but not
// of the disk) is removed by the next process of the same user that sweeps.
func MkdirTemp(prefix string) (string, error) {
	ns := ownerNS()
	if ns == "" {
		ns = "x" // unknown: SweepTemp never takes it for stale
	}
	return os.MkdirTemp("", fmt.Sprintf("%s%s-%s-", prefix, ns, strconv.FormatInt(int64(os.Getpid()), 36)))
}

// ownerNS is this process's PID namespace id in base 36, "" if unknown.
func ownerNS() string {
	n, err := strconv.ParseUint(pidNamespaceID(), 10, 64)
	if err != nil {
		return ""
	}
	return strconv.FormatUint(n, 36)
}

// SweepTemp removes the directories MkdirTemp made with prefix in
// os.TempDir() whose owner process is gone: made in this PID namespace (so
// a pid that is merely not visible from here is never taken for a dead
// one), owned by this user, not a symbolic link, and whose pid no process
// has. A pid in use again by another process keeps its directory until
// that process ends too. Errors are ignored: it is a clean-up, and what it
// cannot remove (files a worker made and kept, after its supervisor died
// too) stays as it was. It returns what it removed.
func SweepTemp(prefix string) []string {
	ns := ownerNS()
	if ns == "" {
		return nil
	}
	dir := os.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix+ns+"-")
		if !ok || !e.IsDir() { // e.IsDir is false for a symbolic link
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid64, err := strconv.ParseInt(pidStr, 36, 32)
		pid := int(pid64)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() || alive(pid) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(path)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue // another user's
		}
		if os.RemoveAll(path) == nil {
			removed = append(removed, path)
		}
	}
	return removed
}

// alive reports whether a process has pid (also one of another user).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// sweepOnce sweeps the sandbox's own directories once per process, at the
// first Run or CheckConfine: "the next run" after a crash cleans up.
var sweepOnce sync.Once

func sweepSandboxTemp() {
	sweepOnce.Do(func() {
		SweepTemp(TempWorkdir)
		SweepTemp(TempProbe)
	})
}

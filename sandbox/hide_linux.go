//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Hiding paths from the worker (Spec.Hide).
//
// Run resolves each path (symlinks followed: the mount lands on the real
// file or directory) and runs the worker confined (confine_linux.go): in
// new mount and PID namespaces, where the supervisor mounts a fresh /proc
// (so /proc/<pid>/root, cwd and environ of processes outside the worker's
// PID namespace cannot be used to walk around the hiding), an empty
// read-only tmpfs over each hidden directory and /dev/null over each
// hidden file. The worker runs without any capability, so it can neither
// unmount them nor, from a nested user namespace of its own, separate
// them (the kernel locks mounts inherited from a more privileged
// namespace).

// hiddenPath is one resolved entry of Spec.Hide.
type hiddenPath struct {
	Path string `json:"path"`
	Dir  bool   `json:"dir"`
}

// resolveHide checks and resolves spec.Hide. Paths that do not exist are
// skipped: there is nothing to read there. A hidden path that is, or
// contains, the worker's directory or its command is an error: the worker
// could not run.
func resolveHide(hide []string, workdir, command string) ([]hiddenPath, error) {
	var out []hiddenPath
	seen := map[string]bool{}
	for _, p := range hide {
		if p == "" {
			continue
		}
		if strings.IndexByte(p, 0) >= 0 {
			return nil, errors.New("sandbox: hidden path contains NUL")
		}
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("sandbox: hidden path %q is not absolute", p)
		}
		real, err := filepath.EvalSymlinks(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sandbox: hidden path %q: %w", p, err)
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		fi, err := os.Stat(real)
		if err != nil {
			return nil, fmt.Errorf("sandbox: hidden path %q: %w", p, err)
		}
		if real == "/" || real == "/proc" || strings.HasPrefix(real, "/proc/") {
			return nil, fmt.Errorf("sandbox: hidden path %q: cannot hide %s", p, real)
		}
		for what, q := range map[string]string{"working directory": workdir, "command": command} {
			if rq, err := filepath.EvalSymlinks(q); err == nil && within(rq, real) {
				return nil, fmt.Errorf("sandbox: hidden path %q contains the worker's %s %s", p, what, q)
			}
		}
		out = append(out, hiddenPath{Path: real, Dir: fi.IsDir()})
	}
	// A path inside a hidden directory is hidden with it; mounting over it
	// after the directory was covered would fail (it is no longer there).
	return slices.DeleteFunc(out, func(h hiddenPath) bool {
		return slices.ContainsFunc(out, func(d hiddenPath) bool { return d.Dir && d.Path != h.Path && within(h.Path, d.Path) })
	}), nil
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// hidePaths runs in the init helper, in the worker's new mount namespace,
// after the mounts were made private. Any failure is fatal: the worker must
// not run with a path exposed that it was promised would be hidden.
func hidePaths(paths []hiddenPath) error {
	for _, h := range paths {
		if _, err := os.Lstat(h.Path); errors.Is(err, os.ErrNotExist) {
			continue // under a mask (confine_linux.go): out of sight already
		}
		var err error
		if h.Dir {
			err = unix.Mount("slotlease-hidden", h.Path, "tmpfs",
				unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555")
		} else {
			// Reads give EOF, writes go nowhere: the real file is
			// neither readable nor changeable.
			err = unix.Mount("/dev/null", h.Path, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("hide %s: %v", h.Path, err)
		}
	}
	return nil
}

// dropPrivileges runs in the init helper just before exec: no capability
// survives into the worker (bounding, ambient, inheritable, permitted and
// effective sets emptied), no_new_privs stops set-uid binaries and file
// capabilities from giving any back, and a confined worker gets its own
// ids (switchIDs), after the bounding set is emptied (which needs
// CAP_SETPCAP, gone once a uid 0 switches to another).
func dropPrivileges(cfg initConfig) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %v", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %v", err)
	}
	havePerm := data[0].Permitted|data[1].Permitted != 0
	for c := 0; c <= 63; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil && havePerm {
			return fmt.Errorf("drop capability %d from the bounding set: %v", c, err)
		}
		// Without any permitted capability (an unprivileged helper
		// outside a user namespace) the bounding set cannot be changed,
		// and need not be: with no_new_privs nothing can be gained.
	}
	if err := switchIDs(cfg.UID, cfg.GID, cfg.DropGroups); err != nil {
		return err
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %v", err)
	}
	return nil
}

// DisableDumping marks the calling process non-dumpable
// (PR_SET_DUMPABLE 0): processes of the same user without CAP_SYS_PTRACE,
// workers among them, can then neither ptrace it nor read its
// /proc/<pid>/environ, mem, fd or root, and it writes no core dump. The
// lease manager and the executor call it first thing in main. The flag is
// reset by execve, so the workers they start are not affected.
func DisableDumping() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

func hiddenList(hs []hiddenPath) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.Path)
	}
	return strings.Join(s, ", ")
}

// closeExtraFDs runs in the init helper just before exec: every descriptor
// from 3 up becomes close-on-exec, so that nothing the executor opened
// without O_CLOEXEC (Go never does, a cgo library might) reaches the worker.
func closeExtraFDs() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Kernels before 5.11.
	var lim unix.Rlimit
	n := 1 << 16
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(n) {
		n = int(lim.Cur)
	}
	for fd := 3; fd < n; fd++ {
		unix.CloseOnExec(fd)
	}
}

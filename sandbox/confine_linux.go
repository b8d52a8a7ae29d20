//go:build linux

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Confinement: what the supervisor sets up for a confined run, in the
// worker's new mount namespace, before the exec stage starts.
//
//  1. Every mount becomes private, so nothing propagates back.
//  2. The working directory and Spec.Lend are lent to the worker, when its
//     ids are not the supervisor's: every file in them owned by the
//     supervisor's uid (gid) becomes the worker's (symlinks not followed,
//     other filesystems and hidden paths not entered). finishSupervisor
//     gives them back the same way once the worker's tree is gone, and
//     says so ("returned:"); Run gives them back itself when it did not
//     (reclaim).
//  3. Every mount becomes read-only (mount_setattr with AT_RECURSIVE).
//  4. The working directory, Spec.Lend and Spec.Writable are bound onto
//     themselves, writable; Spec.Binds are bound, read-only. A directory
//     on the way to one of them (or to the command) that the worker's
//     ids may not enter is masked: an empty tmpfs with only those mounted
//     in, at the same paths (maskedDirs).
//  5. /dev/shm gets a tmpfs of its own (POSIX shared memory and
//     semaphores work, and go with the run).
//  6. A fresh /proc for the PID namespace, then the hidden paths.
//
// The worker has no capability in this namespace or any above it, so it
// can neither remount nor unmount; a user namespace of its own gets a copy
// of these mounts that the kernel locks (read-only stays read-only, no
// mount can be taken off what it covers).

// The lent paths and ids, kept for finishSupervisor.
var lent struct {
	paths                    []string
	skip                     []string
	fromUID, toUID           int
	fromGID, toGID           int
	active, returnedReported bool
}

// isolationFail reports what confinement could not set up and exits: Run
// then returns an error matching ErrNotIsolated.
func isolationFail(err error) {
	giveBack()
	helperStatus("isolation", err.Error())
	unix.Exit(127)
}

// confine sets up a confined run's mount namespace; see above.
func confine(cfg initConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := lend(cfg); err != nil {
		return err
	}
	if err := readOnlyAll(); err != nil {
		return fmt.Errorf("make the filesystem read-only: %w", err)
	}
	// Everything the worker needs is opened now, before a mask may cover
	// it, and mounted from these handles.
	var needs []need
	defer func() {
		for _, n := range needs {
			unix.Close(n.fd)
		}
	}()
	add := func(src, at string, writable bool) error {
		fd, err := unix.Open(src, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", src, err)
		}
		if writable {
			// Run resolved these; a symlink that appeared since (a job
			// that swapped a directory of a writable path for a link to
			// the user's files, say) must not make another place
			// writable. What was opened is what counts.
			if got, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err != nil || got != src {
				unix.Close(fd)
				return fmt.Errorf("%s is reached through a symlink now (it leads to %s)", src, got)
			}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fmt.Errorf("stat %s: %w", src, err)
		}
		needs = append(needs, need{at: at, fd: fd, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR, writable: writable})
		return nil
	}
	for _, p := range append(slices.Clip(cfg.Lend), cfg.Writable...) {
		if err := add(p, p, true); err != nil {
			return err
		}
	}
	for _, b := range cfg.Binds {
		if err := add(b.Source, b.Target, false); err != nil {
			return err
		}
	}
	command, err := filepath.EvalSymlinks(cfg.Path)
	if err != nil {
		return fmt.Errorf("the command: %w", err)
	}
	masks := maskedDirs(append(needPaths(needs), command), cfg.UID, cfg.GID)
	if slices.ContainsFunc(masks, func(m string) bool { return within(command, m) }) &&
		!slices.ContainsFunc(append(slices.Clip(cfg.Lend), cfg.Writable...), func(l string) bool { return within(command, l) }) {
		if err := add(command, command, false); err != nil {
			return err
		}
	}
	for _, m := range masks {
		if err := unix.Mount("slotlease-mask", m, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k,mode=0755"); err != nil {
			return fmt.Errorf("mask %s: %w", m, err)
		}
	}
	for _, n := range needs {
		if err := n.mount(masks); err != nil {
			return err
		}
	}
	for _, m := range masks {
		if err := setReadOnly(m); err != nil {
			return fmt.Errorf("mask %s: %w", m, err)
		}
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if err := unix.Mount("slotlease-shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("mount a /dev/shm of its own: %w", err)
		}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount a fresh /proc: %w", err)
	}
	if err := hidePaths(cfg.Hide); err != nil {
		return err
	}
	// The working directory was entered before these mounts, on the
	// mount now read-only below the writable one: enter it again.
	wd, err := os.Getwd()
	if err == nil {
		err = unix.Chdir(wd)
	}
	if err != nil {
		return fmt.Errorf("enter the working directory again: %w", err)
	}
	return nil
}

// need is something the worker must reach: a lent path (writable), a
// bind's source or the command (read-only), mounted at at.
type need struct {
	at            string
	fd            int // O_PATH, opened before any mask
	dir, writable bool
}

func needPaths(ns []need) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.at
	}
	return out
}

// mount binds what n.fd holds at n.at: writable for a lent path,
// read-only otherwise. Under a mask the mount point is made first (the
// mask is an empty tmpfs); a path mounted onto itself needs none.
func (n need) mount(masks []string) error {
	if slices.ContainsFunc(masks, func(m string) bool { return within(n.at, m) }) {
		if err := mountPoint(n.at, n.dir); err != nil {
			return fmt.Errorf("a mount point for %s: %w", n.at, err)
		}
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", n.fd), n.at, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", n.at, err)
	}
	if n.writable {
		// Only that mount: what is mounted below it stays read-only.
		err := unix.MountSetattr(unix.AT_FDCWD, n.at, 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY})
		if errors.Is(err, unix.ENOSYS) {
			err = remount(n.at, false)
		}
		if err != nil {
			return fmt.Errorf("make %s writable: %w", n.at, err)
		}
		return nil
	}
	if err := setReadOnly(n.at); err != nil {
		return fmt.Errorf("make %s read-only: %w", n.at, err)
	}
	return nil
}

// mountPoint makes p (and its parents, mode 0755) in a mask's tmpfs.
func mountPoint(p string, dir bool) error {
	if _, err := os.Lstat(p); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if dir {
		return os.Mkdir(p, 0o755)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// maskedDirs are the directories, each the outermost on the way to one of
// paths, that the worker's ids may not enter (no search permission for
// them): a worker with ids of its own could not reach its working
// directory below one (a private TMPDIR, a home of mode 0700). Each gets
// an empty tmpfs in the worker's view, with only what it needs mounted in
// at the same paths, which also keeps the rest of that directory (other
// runs' working directories, the user's files) from it.
func maskedDirs(paths []string, uid, gid int) []string {
	if uid < 0 || uid == os.Getuid() {
		return nil // the executor's own ids enter what the executor enters
	}
	var out []string
	for _, p := range paths {
		var walked string
		for _, part := range strings.Split(strings.Trim(filepath.Dir(p), "/"), "/") {
			if part == "" {
				continue
			}
			walked += "/" + part
			if slices.ContainsFunc(out, func(m string) bool { return within(walked, m) }) {
				break
			}
			var st unix.Stat_t
			if unix.Stat(walked, &st) != nil {
				break
			}
			if !searchable(st, uid, gid) {
				out = slices.DeleteFunc(out, func(m string) bool { return within(m, walked) })
				out = append(out, walked)
				break
			}
		}
	}
	return out
}

// searchable: may uid, gid search the directory st (by its mode bits;
// a worker has no supplementary group to add).
func searchable(st unix.Stat_t, uid, gid int) bool {
	switch {
	case int(st.Uid) == uid:
		return st.Mode&0o100 != 0
	case int(st.Gid) == gid:
		return st.Mode&0o010 != 0
	default:
		return st.Mode&0o001 != 0
	}
}

// setReadOnly makes the mount at p read-only.
func setReadOnly(p string) error {
	err := unix.MountSetattr(unix.AT_FDCWD, p, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
	if errors.Is(err, unix.ENOSYS) {
		err = remount(p, true)
	}
	return err
}

// lend gives the lent paths to the worker's ids, if they are not the
// supervisor's; on failure it gives back what it changed.
func lend(cfg initConfig) error {
	uid, gid := os.Getuid(), os.Getgid()
	if (cfg.UID < 0 || cfg.UID == uid) && (cfg.GID < 0 || cfg.GID == gid) {
		return nil
	}
	lent.paths, lent.fromUID, lent.toUID, lent.fromGID, lent.toGID = cfg.Lend, uid, cfg.UID, gid, cfg.GID
	for _, h := range cfg.Hide {
		lent.skip = append(lent.skip, h.Path)
	}
	for _, b := range cfg.Binds {
		lent.skip = append(lent.skip, b.Target)
	}
	lent.active = true
	for _, p := range cfg.Lend {
		if err := shiftOwners(p, lent.skip, uid, cfg.UID, gid, cfg.GID); err != nil {
			return fmt.Errorf("lend %s to uid %d gid %d: %w", p, cfg.UID, cfg.GID, err)
		}
	}
	return nil
}

// giveBack returns what lend gave the worker, once. It runs when the
// worker's tree is gone (or never started), and reports "returned:" when
// all of it is back.
func giveBack() {
	if !lent.active || lent.returnedReported {
		return
	}
	lent.returnedReported = true
	var errs []string
	for _, p := range lent.paths {
		if err := shiftOwners(p, lent.skip, lent.toUID, lent.fromUID, lent.toGID, lent.fromGID); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		helperStatus("note", "could not give back everything lent to the worker: "+strings.Join(errs, "; "))
		return
	}
	helperStatus("returned", "")
}

// shiftOwners changes every file at or below root owned by fromUID to
// toUID, and by fromGID to toGID (-1: leave that id), without following
// symlinks, entering another filesystem or a path of skip. Errors on
// single files are collected; the walk goes on.
func shiftOwners(root string, skip []string, fromUID, toUID, fromGID, toGID int) error {
	var rootDev uint64
	var errs []error
	walkErr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err)
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		for _, s := range skip {
			if within(path, s) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			errs = append(errs, &fs.PathError{Op: "lstat", Path: path, Err: err})
			return nil
		}
		if path == root {
			rootDev = st.Dev
		} else if st.Dev != rootDev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		nu, ng := -1, -1
		if toUID >= 0 && int(st.Uid) == fromUID {
			nu = toUID
		}
		if toGID >= 0 && int(st.Gid) == fromGID {
			ng = toGID
		}
		if nu < 0 && ng < 0 {
			return nil
		}
		if err := unix.Lchown(path, nu, ng); err != nil {
			errs = append(errs, &fs.PathError{Op: "lchown", Path: path, Err: err})
		}
		return nil
	})
	if walkErr != nil {
		errs = append(errs, walkErr)
	}
	if len(errs) > 3 {
		errs = append(errs[:3], fmt.Errorf("and %d more", len(errs)-3))
	}
	return errors.Join(errs...)
}

// readOnlyAll makes every mount of this namespace read-only.
func readOnlyAll() error {
	err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
	if !errors.Is(err, unix.ENOSYS) {
		return err
	}
	// Before Linux 5.12: remount each mount point, keeping the flags a
	// user namespace may not clear (nosuid, nodev, noexec, atime).
	mounts, err := mountPoints()
	if err != nil {
		return err
	}
	for _, mp := range mounts {
		if err := remount(mp, true); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EACCES) {
			return fmt.Errorf("%s: %w", mp, err)
		}
	}
	return nil
}

// remount remounts the mount at mp read-only or writable, keeping its
// other flags.
func remount(mp string, readOnly bool) error {
	var st unix.Statfs_t
	if err := unix.Statfs(mp, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND)
	for _, f := range []struct{ st, ms int64 }{
		{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if st.Flags&f.st != 0 {
			flags |= uintptr(f.ms)
		}
	}
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	return unix.Mount("", mp, "", flags, "")
}

// mountPoints lists this namespace's mount points, from /proc/self/mountinfo.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			out = append(out, unescapeMount(fields[4]))
		}
	}
	return out, sc.Err()
}

// switchIDs makes the calling thread the worker's ids: the supplementary
// groups dropped when the namespace allows it, then the gid, then the
// uid (which clears the capabilities of a uid 0). Raw syscalls on one
// locked thread: the exec stage execs from it, and the kernel gives the
// new program that thread's credentials.
func switchIDs(uid, gid int, dropGroups bool) error {
	if dropGroups {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("drop the supplementary groups: %w", e)
		}
	}
	if gid >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			return fmt.Errorf("switch to gid %d: %w", gid, e)
		}
	}
	if uid >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			return fmt.Errorf("switch to uid %d: %w", uid, e)
		}
	}
	return nil
}

package config

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The way to a secret (OpenSSH's StrictModes, its safe_path, as the model).
//
// A credentials directory of mode 0700 keeps nobody out if someone else
// may rename a directory above it: they can move it away and put one of
// their own, or a symbolic link, in its place, between a check and a use
// or for good (issue 38: another user owning a parent moved root's
// credentials directory away). So every directory on the way to a secret,
// from / down, through every symbolic link on the way (the directory each
// link lives in, and the way to its target), must be
//
//   - owned by root or by this process's user, and
//   - not writable by group or others, unless it is sticky and root's
//     (/tmp: there nobody may rename what is not theirs).
//
// This is OpenSSH's rule for the way to authorized_keys, but for two
// choices: it goes up to / (OpenSSH stops at the user's home), and it takes
// a sticky directory of root's (OpenSSH refuses any group- or
// other-writable one), so that the temp directory can hold a private
// directory (tests, TMPDIR setups). A group-writable directory is refused
// even where the group is the user's own (Debian patches OpenSSH to allow
// that; upstream does not).
//
// A key file named explicitly (NATS_NKEY, NATS_CREDS, JOBS_NATS_NKEY) is
// held to who may read it as well, as OpenSSH holds a private key (it
// refuses one its user owns that group or others may read): whoever reads
// the seed connects as its user. Others may never read it. Its group may
// only where root owns it and this process is not root: an administrator
// sharing one key with the users of a group (Kubernetes mounts a secret
// root's, mode 0440, group fsGroup, for a container that does not run as
// root). A key of this user's own that its group may read says no such
// decision (a umask of 002 or 022 makes one), so it is refused, as the
// embedded server's credentials are (CheckPrivateFile); the fix is one
// chmod.
//
// In a user namespace that does not map every id (a rootless container,
// `unshare --map-current-user`), a file whose owner the namespace does not
// map shows as the overflow uid (kernel.overflowuid, 65534): root of the
// machine looks like that there, and so does any other user it does not
// map, which cannot be told apart from inside. Such an owner counts as
// root; in the initial namespace, where every id is mapped, 65534 is a
// user like any other (nobody), and refused.

// maxSymlinks bounds the links followed on the way, as the kernel's
// MAXSYMLINKS does (40), so that a loop ends.
const maxSymlinks = 40

// UnsafePathError is a directory on the way to a secret (or a key file
// itself) that someone other than root and this user may change.
type UnsafePathError struct {
	Path    string // the secret: a credentials directory or file, the store
	Dir     string // what is refused: a directory on the way, or Path itself
	UID     int    // Dir's owner
	Mode    uint32 // Dir's permission bits, sticky bit included (07777)
	Problem string // what is wrong with Dir
	Fix     string // the command that fixes it
	// Readable: the key file Path itself may be read by someone other than
	// its owner and root (not a way for them to change it).
	Readable bool
}

func (e *UnsafePathError) Error() string {
	what := "change it"
	switch {
	case e.Readable:
		what = "read the key and connect as its user"
	case e.Dir != e.Path:
		what = "move " + e.Path + " away or swap it"
	}
	return fmt.Sprintf("%s: %s, so someone else could %s; run: %s", e.Dir, e.Problem, what, e.Fix)
}

// Unwrap makes it a configuration error (ErrInvalid), like the other
// checks of private paths.
func (e *UnsafePathError) Unwrap() error { return ErrInvalid }

// idView is how this process's user namespace shows owners.
type idView struct {
	me int
	// unmapped is the uid an owner this namespace does not map shows as,
	// or -1 in the initial namespace, which maps every id.
	unmapped int
}

func currentIDView() idView {
	v := idView{me: os.Getuid(), unmapped: -1}
	data, err := os.ReadFile("/proc/self/uid_map")
	if err != nil || slices.Equal(strings.Fields(string(data)), []string{"0", "0", "4294967295"}) {
		return v // the initial namespace, or a system without them
	}
	v.unmapped = 65534
	if b, err := os.ReadFile("/proc/sys/kernel/overflowuid"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			v.unmapped = n
		}
	}
	return v
}

// rootish: uid is root, or stands for an owner this namespace does not map.
func (v idView) rootish(uid int) bool { return uid == 0 || uid == v.unmapped }

// judgeDir applies the rule to a directory on the way to path, owned by
// uid with mode bits mode (syscall.Stat_t's Mode).
func (v idView) judgeDir(path, dir string, uid int, mode uint32) error {
	perm := mode & 0o7777
	switch {
	case !v.rootish(uid) && uid != v.me:
		return &UnsafePathError{Path: path, Dir: dir, UID: uid, Mode: perm,
			Problem: fmt.Sprintf("is owned by %s, neither root nor this user (uid %d), mode %04o", ownerName(uid), v.me, perm),
			Fix:     "chown root " + dir}
	case perm&0o022 != 0 && !(perm&syscall.S_ISVTX != 0 && v.rootish(uid)):
		return &UnsafePathError{Path: path, Dir: dir, UID: uid, Mode: perm,
			Problem: fmt.Sprintf("is writable by group or others (mode %04o, owner %s) and is not a sticky directory of root's", perm, ownerName(uid)),
			Fix:     "chmod go-w " + dir}
	}
	return nil
}

// judgeFile applies the rule to a key file itself: owned by root or this
// user, writable by neither group nor others, readable by no others, and
// by its group only if it is root's and this process is not root (the
// header above says why).
func (v idView) judgeFile(path string, uid int, mode uint32) error {
	perm := mode & 0o7777
	readers := uint32(0o044) // the read bits refused
	if v.rootish(uid) && uid != v.me {
		readers = 0o004 // root's, shared with its group by an administrator
	}
	switch {
	case !v.rootish(uid) && uid != v.me:
		return &UnsafePathError{Path: path, Dir: path, UID: uid, Mode: perm,
			Problem: fmt.Sprintf("is owned by %s, neither root nor this user (uid %d), mode %04o", ownerName(uid), v.me, perm),
			Fix:     fmt.Sprintf("chown %d %s", v.me, path)}
	case perm&0o022 != 0:
		return &UnsafePathError{Path: path, Dir: path, UID: uid, Mode: perm,
			Problem: fmt.Sprintf("is writable by group or others (mode %04o)", perm),
			Fix:     "chmod go-w " + path}
	case perm&readers != 0:
		who, fix := "its group and others", "go-r"
		switch perm & readers {
		case 0o040:
			who, fix = "its group", "g-r"
		case 0o004:
			who, fix = "others", "o-r"
		}
		problem := fmt.Sprintf("is readable by %s (mode %04o)", who, perm)
		if perm&readers&0o040 != 0 {
			problem += "; a group may share only a key file of root's, for users other than root"
		}
		return &UnsafePathError{Path: path, Dir: path, UID: uid, Mode: perm, Readable: true,
			Problem: problem, Fix: "chmod " + fix + " " + path}
	}
	return nil
}

// ownerName is "uid N (name)", or "uid N" where the user database has no
// name for it.
func ownerName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// checkWay checks every directory on the way to path, from / down, with
// judgeDir: symbolic links are followed one component at a time, as the
// kernel does, so the directory a link lives in and the way to its target
// are both checked. path's last component is not checked; if it is a
// symbolic link, follow says whether to go on to its target (a key file
// may be one: Kubernetes mounts secrets so) or to stop (a private
// directory or file must not be one, which its own check refuses). It
// returns the path reached, with no symbolic link on the way.
func checkWay(path string, follow bool) (string, error) {
	v := currentIDView()
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		// Not filepath.Join: it would take "link/.." lexically, where the
		// kernel goes to the link's target's parent.
		path = wd + string(filepath.Separator) + path
	}
	if err := judgeStat(v, path, "/"); err != nil {
		return "", err
	}
	dir, todo, links := "/", components(path), 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if name == ".." {
			dir = filepath.Dir(dir)
			continue
		}
		next := filepath.Join(dir, name)
		last := len(todo) == 0
		fi, err := os.Lstat(next)
		if err != nil {
			if last {
				return next, nil // the caller's own check says what is missing
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 && (!last || follow) {
			if links++; links > maxSymlinks {
				return "", &fs.PathError{Op: "resolve", Path: path, Err: syscall.ELOOP}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", err
			}
			if filepath.IsAbs(target) {
				dir = "/"
			}
			todo = append(components(target), todo...)
			continue
		}
		if last {
			return next, nil
		}
		if !fi.IsDir() {
			return "", &fs.PathError{Op: "resolve", Path: next, Err: syscall.ENOTDIR}
		}
		if err := judgeStat(v, path, next); err != nil {
			return "", err
		}
		dir = next
	}
	return dir, nil
}

// judgeStat applies judgeDir to the directory dir, which is no symbolic
// link.
func judgeStat(v idView, path, dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil // no owners to check (not a Unix system)
	}
	return v.judgeDir(path, dir, int(st.Uid), uint32(st.Mode))
}

// components splits a path into its names, without the empty ones and ".".
func components(p string) []string {
	var out []string
	for _, c := range strings.Split(p, string(filepath.Separator)) {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// CheckSafeFile checks a key file named explicitly (NATS_NKEY,
// NATS_CREDS, JOBS_NATS_NKEY): every directory on the way to it, symbolic
// links followed (checkWay), and the file it leads to, which must be owned
// by root or this user, writable by neither group nor others, readable by
// no others, and by its group only if root owns it and this process is not
// root (judgeFile).
func CheckSafeFile(path string) error {
	real, err := checkWay(path, true)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("%s: %w", real, unwrapPath(err))
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return currentIDView().judgeFile(real, int(st.Uid), uint32(st.Mode))
}

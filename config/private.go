package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// CheckPrivateDir checks that path is a directory (not a symbolic link)
// owned by this process's user and closed to group and others, as a
// directory holding secrets must be, and that no one else may move it
// away: every directory on the way to it is root's or this user's and
// writable by neither group nor others, unless sticky and root's
// (safepath.go). The error names the path and the fix.
func CheckPrivateDir(path string) error {
	return checkPrivate(path, true)
}

// CheckPrivateFile is CheckPrivateDir for a regular file.
func CheckPrivateFile(path string) error {
	return checkPrivate(path, false)
}

func checkPrivate(path string, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	want, fix := "a regular file", "chmod 600 "+path
	if dir {
		want, fix = "a directory", "chmod 700 "+path
	}
	switch {
	case dir && !fi.IsDir(), !dir && !fi.Mode().IsRegular():
		return reason(fmt.Sprintf("%s: is not %s (a symbolic link or special file is refused)", path, want))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return reason(fmt.Sprintf("%s: is owned by uid %d, not by this user (uid %d): refusing credentials someone else controls", path, st.Uid, os.Getuid()))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return reason(fmt.Sprintf("%s: is accessible to group or others (mode %04o); run: %s", path, perm, fix))
	}
	_, err = checkWay(path, false)
	return err
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// MakePrivateDir creates path and every missing directory between base
// and path with mode 0700, then checks each of them, from base's child down
// to path, with CheckPrivateDir; base itself (say /tmp) is not checked.
// With base empty only path is checked.
func MakePrivateDir(base, path string) error {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return err
	}
	return CheckPrivateTree(base, path)
}

// CheckPrivateTree checks with CheckPrivateDir every directory from
// base's child down to path (only path with base empty), creating none.
func CheckPrivateTree(base, path string) error {
	if base == "" {
		return CheckPrivateDir(path)
	}
	rel, err := filepath.Rel(base, path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s is not inside %s", path, base)
	}
	d := base
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		d = filepath.Join(d, part)
		if err := CheckPrivateDir(d); err != nil {
			return err
		}
	}
	return nil
}

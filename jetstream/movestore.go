package jetstream

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MoveStore carries an embedded server's store directory from old to new
// before the server starts: a rename where both are on one file system,
// else a copy (old in a tmpfs /tmp, new in the home directory) that is
// renamed into place only when complete, after which old is removed. new
// must not exist, or be an empty directory; new's parent must exist.
// Only directories and regular files are carried (all a JetStream store
// holds); anything else is an error and leaves old as it was. On any error
// old is untouched and new as it was.
func MoveStore(old, new string) error {
	if err := removeEmptyDir(new); err != nil {
		return err
	}
	err := os.Rename(old, new)
	if err == nil || !errors.Is(err, syscall.EXDEV) {
		return err
	}
	tmp := new + ".moving"
	if err := os.RemoveAll(tmp); err != nil { // a copy an earlier crash left
		return err
	}
	if err := copyTree(old, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("copying %s to %s: %w", old, tmp, err)
	}
	if err := os.Rename(tmp, new); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return os.RemoveAll(old)
}

// removeEmptyDir removes dir if it is an empty directory; a missing one
// is fine, anything else an error.
func removeEmptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case len(ents) > 0:
		return fmt.Errorf("%s exists and is not empty", dir)
	}
	return os.Remove(dir)
}

// copyTree copies the directory src to dst (which must not exist), with
// the permission bits of each directory and file; file contents are synced
// before copyTree returns.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(target, info.Mode().Perm())
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		}
		return fmt.Errorf("%s: not a directory or regular file (%v)", path, info.Mode().Type())
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

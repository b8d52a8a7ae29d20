// Package usagefile is the usage file of a run with an estimate of units
// (`executor run --units`, a job's units): the command learns its path
// from $LEASE_USAGE_FILE and may write there the units it used, a decimal
// integer, which its executor settles at release instead of the estimate.
//
// The file is the worker's, so hostile input: it lives in a fresh
// directory of mode 0700 that only the executor's user, and a confined
// worker's own identity while the run lends it (sandbox.Spec.Lend), can
// write; it is opened without following a symlink or blocking on a FIFO,
// must be a regular file with one link, at most MaxBytes are read, and
// what is wrong with it is said without its content.
package usagefile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/rules"
	"github.com/slotlease/slotlease/sandbox"
)

// Env names the usage file in the command's environment.
const Env = "LEASE_USAGE_FILE"

// MaxBytes bounds what is read of the file: a decimal up to 2^40 and a
// newline fit many times over.
const MaxBytes = 64

// File is one run's usage file.
type File struct {
	dir, path string
}

// New makes the directory of a run's usage file (mode 0700), named as
// the sandbox's working directories are, so that those of crashed
// executors are swept with them.
func New() (*File, error) {
	dir, err := sandbox.MkdirTemp(sandbox.TempWorkdir)
	if err != nil {
		return nil, fmt.Errorf("making the usage file's directory: %w", err)
	}
	return &File{dir: dir, path: filepath.Join(dir, "usage")}, nil
}

// Path is the file's path, for Env.
func (f *File) Path() string { return f.path }

// Dir is its directory: a confined worker must be lent it.
func (f *File) Dir() string { return f.dir }

// Remove removes the directory and what the command left in it.
func (f *File) Remove() { _ = os.RemoveAll(f.dir) }

// Read returns the units the command wrote, or why there are none.
func (f *File) Read() (int64, error) {
	fd, err := os.OpenFile(f.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 0, errors.New("the command wrote no usage file")
	case err != nil:
		return 0, errors.New("the usage file could not be opened (not a regular file?)")
	}
	defer fd.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(fd.Fd()), &st); err != nil {
		return 0, fmt.Errorf("the usage file: %w", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink != 1 {
		return 0, errors.New("the usage file is not a regular file of one link")
	}
	buf := make([]byte, MaxBytes+1)
	n, err := io.ReadFull(fd, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("reading the usage file: %w", err)
	}
	if n > MaxBytes {
		return 0, fmt.Errorf("the usage file holds more than %d bytes", MaxBytes)
	}
	units, err := rules.ParseBounded(string(bytes.TrimRight(buf[:n], " \t\r\n")), "the usage", 0, lease.MaxUnits)
	if err != nil {
		return 0, fmt.Errorf("the usage file does not hold a decimal integer from 0 to %d", int64(lease.MaxUnits))
	}
	return units, nil
}

// Settle releases set, settling what the command wrote, or else the
// estimate; note says which, and why.
func Settle(ctx context.Context, f *File, set *lease.LeaseSet, estimate int64, note func(string)) error {
	defer f.Remove()
	units, err := f.Read()
	if err != nil {
		note(fmt.Sprintf("%v; settling the estimate, %d units", err, estimate))
		return set.Release(ctx)
	}
	note(fmt.Sprintf("settling %d units (estimated %d)", units, estimate))
	return set.ReleaseUsage(ctx, units)
}

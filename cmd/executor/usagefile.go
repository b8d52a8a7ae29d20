package main

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

// The usage file of `executor run --units N`: the command learns its path
// from $LEASE_USAGE_FILE and may write there the units it used, a
// decimal integer; the executor settles that at release, else the
// estimate. The file is the worker's, so hostile input: it lives in a
// fresh directory of mode 0700 that only the executor's user, and a
// confined worker's own identity while the run lends it, can write; it is
// opened without following a symlink or blocking on a FIFO, must be a
// regular file with one link, and at most maxUsageBytes are read.

// UsageFileEnv names the usage file in the command's environment.
const UsageFileEnv = "LEASE_USAGE_FILE"

// maxUsageBytes bounds what is read of the usage file: a decimal up to
// 2^40 and a newline fit many times over.
const maxUsageBytes = 64

// usageFile is a run's usage file: dir is removed after the run.
type usageFile struct {
	dir, path string
	estimate  int64
}

// newUsageFile makes the directory of a run's usage file, where crashed
// executors' working directories are swept from too.
func newUsageFile() (*usageFile, error) {
	dir, err := sandbox.MkdirTemp(sandbox.TempWorkdir)
	if err != nil {
		return nil, fmt.Errorf("making the usage file's directory: %w", err)
	}
	return &usageFile{dir: dir, path: filepath.Join(dir, "usage")}, nil
}

func (u *usageFile) remove() { _ = os.RemoveAll(u.dir) }

// read returns the units the command wrote, or why there are none.
func (u *usageFile) read() (int64, error) {
	f, err := os.OpenFile(u.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 0, errors.New("the command wrote no usage file")
	case err != nil:
		return 0, errors.New("the usage file could not be opened (not a regular file?)")
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("the usage file: %w", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink != 1 {
		return 0, errors.New("the usage file is not a regular file of one link")
	}
	buf := make([]byte, maxUsageBytes+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("reading the usage file: %w", err)
	}
	if n > maxUsageBytes {
		return 0, fmt.Errorf("the usage file holds more than %d bytes", maxUsageBytes)
	}
	s := string(bytes.TrimRight(buf[:n], " \t\r\n"))
	// The content is the worker's: the error names what is wrong with
	// it, never the content itself.
	units, err := rules.ParseBounded(s, "the usage", 0, lease.MaxUnits)
	if err != nil {
		return 0, errors.New("the usage file does not hold a decimal integer from 0 to 1099511627776")
	}
	return units, nil
}

// checkUnitsFlag checks --units: 0 (none) or an estimate 1..MaxUnits.
func checkUnitsFlag(units int64) error {
	if units < 0 || units > lease.MaxUnits {
		return fmt.Errorf("--units %d: must be an integer from 1 to %d", units, int64(lease.MaxUnits))
	}
	return nil
}

// runUsage makes, for a run with --units, its usage file and names it in
// env; lend is what a confined worker is lent of it. Without --units it
// changes nothing.
func runUsage(f *runFlags, hide []string, env map[string]string) (*usageFile, []string, map[string]string, error) {
	if f.units == 0 {
		return nil, nil, env, nil
	}
	u, err := newUsageFile()
	if err != nil {
		return nil, nil, nil, err
	}
	u.estimate = f.units
	env[UsageFileEnv] = u.path
	var lend []string
	if len(hide) > 0 {
		lend = []string{u.dir} // the worker's own identity writes it
	}
	return u, lend, env, nil
}

// release releases set, settling what the command wrote in the usage
// file, or else (saying why) the estimate. A nil u is a run without
// --units: a plain release.
func (u *usageFile) release(ctx context.Context, set *lease.LeaseSet, stderr io.Writer) error {
	if u == nil {
		return set.Release(ctx)
	}
	defer u.remove()
	units, err := u.read()
	if err != nil {
		fmt.Fprintf(stderr, "executor: %v; settling the estimate, %d units\n", err, u.estimate)
		return set.Release(ctx)
	}
	fmt.Fprintf(stderr, "executor: settling %d units (estimated %d)\n", units, u.estimate)
	return set.ReleaseUsage(ctx, units)
}

package jetstream

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/slotlease/slotlease/jobs"
)

// MoveJobQueue carries an embedded server's job queue over from the
// single-account layout of earlier versions, where it lived beside the
// lease state in ManagerAccount, to ExecutorAccount (accounts.go). It runs
// before the server starts: the job stream and its two buckets are moved
// as they are on disk, from <storeDir>/jetstream/SLOTLEASE/streams/ to
// <storeDir>/jetstream/SLOTLEASE_EXECUTORS/streams/, so queued jobs, their
// consumers' progress, results and dead letters are all kept. A stream is
// moved only if the new place has none of that name; one left behind is
// an error naming both paths, never overwritten. It returns the streams
// it moved.
//
// It knows nats-server's file layout (a stream is one directory under its
// account's), which holds for the nats-server version in go.mod; the
// upgrade test in test/integration checks it.
func MoveJobQueue(storeDir, prefix string) ([]string, error) {
	from := filepath.Join(storeDir, "jetstream", ManagerAccount, "streams")
	to := filepath.Join(storeDir, "jetstream", ExecutorAccount, "streams")
	n := jobs.NamesFor(prefix)
	var moved []string
	for _, name := range []string{n.Stream, "KV_" + n.Results, "KV_" + n.Dead} {
		src, dst := filepath.Join(from, name), filepath.Join(to, name)
		if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return moved, fmt.Errorf("jetstream: moving the job queue: %w", err)
		}
		if _, err := os.Lstat(dst); err == nil {
			return moved, fmt.Errorf("jetstream: moving the job queue: both %s and %s exist; keep one (the old one is from a version before the executors' account) and start again", src, dst)
		}
		if err := os.MkdirAll(to, 0o700); err != nil {
			return moved, fmt.Errorf("jetstream: moving the job queue: %w", err)
		}
		if err := os.Rename(src, dst); err != nil {
			return moved, fmt.Errorf("jetstream: moving the job queue: %w", err)
		}
		moved = append(moved, name)
	}
	return moved, nil
}

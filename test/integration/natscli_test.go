package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// natscliVersion is the nats CLI (github.com/nats-io/natscli) the docs'
// examples run with: pinned, built from the Go module proxy (checked
// against the Go checksum database), so no test depends on what a machine
// happens to have installed.
const natscliVersion = "v0.5.0"

// natsCLI returns the directory holding the nats CLI: built once with
// `go install` into the user's cache, reused after (about 50 s the first
// time on two cores).
func natsCLI(t *testing.T) string {
	t.Helper()
	// Tests run in parallel: one builds, the others wait for it.
	natsCLIMu.Lock()
	defer natsCLIMu.Unlock()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "slotlease-test", "natscli-"+natscliVersion)
	if fi, err := os.Stat(filepath.Join(dir, "nats")); err == nil && fi.Mode().IsRegular() {
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "natscli-build-")
	if err != nil {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if tmp, err = os.MkdirTemp(filepath.Dir(dir), "natscli-build-"); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/nats-io/natscli/nats@"+natscliVersion)
	// Outside this module, whatever GOFLAGS says: the CLI's own go.mod
	// decides its dependencies.
	cmd.Dir, cmd.Env = tmp, append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the nats CLI %s: %v\n%s", natscliVersion, err, tail(out, 3000))
	}
	t.Logf("built the nats CLI %s in %s", natscliVersion, time.Since(start).Round(time.Second))
	// Renamed into place whole, so concurrent tests never see half a one.
	if err := os.Rename(tmp, dir); err != nil && !fileExists(filepath.Join(dir, "nats")) {
		t.Fatal(err)
	}
	return dir
}

// natsCLIMu makes natsCLI one build at a time.
var natsCLIMu sync.Mutex

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

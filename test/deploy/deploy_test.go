// Package deploy checks the deployable artifacts of docs/deploy.md as a
// user makes them: the release archives of scripts/release.sh, the
// systemd units of deploy/systemd (systemd-analyze), and the container
// image of scripts/image.sh (podman, FROM scratch: nothing is pulled).
package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/harness"
)

// testVersion is the version the tests stamp into what they build.
const testVersion = "v1.2.3-test.1"

// repoRoot is the checkout's root, where the scripts are.
var repoRoot = func() string {
	abs, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return abs
}()

// ports are this package's: 11000-11999 (harness.Ports).
var ports = &harness.Ports{Lo: 11000, Hi: 12000}

// The release, built once for every test of the package: scripts/release.sh
// for this machine's linux architecture, or for every target with
// RELEASE_ALL_TARGETS=1 (cross builds cost minutes on a cold cache).
var (
	releaseOnce sync.Once
	releaseDir  string // the archives and SHA256SUMS
	releaseOut  string // what the script printed
	releaseErr  error
	releaseTook time.Duration
)

// releaseTargets are the targets the package builds.
func releaseTargets() []string {
	if os.Getenv("RELEASE_ALL_TARGETS") == "1" {
		return []string{"linux/amd64", "linux/arm64", "darwin/arm64"}
	}
	return []string{"linux/" + runtime.GOARCH}
}

// release runs scripts/release.sh once and returns its output directory.
func release(t *testing.T) string {
	t.Helper()
	releaseOnce.Do(func() {
		dir, err := os.MkdirTemp("", "slotlease-release-")
		if err != nil {
			releaseErr = err
			return
		}
		start := time.Now()
		cmd := exec.Command(filepath.Join(repoRoot, "scripts", "release.sh"), testVersion, dir)
		cmd.Env = append(os.Environ(), "RELEASE_TARGETS="+strings.Join(releaseTargets(), " "))
		out, err := cmd.CombinedOutput()
		releaseDir, releaseOut, releaseErr, releaseTook = dir, string(out), err, time.Since(start)
		t.Logf("scripts/release.sh %s (%s) took %v", testVersion, strings.Join(releaseTargets(), " "), releaseTook.Round(time.Second))
	})
	if releaseErr != nil {
		t.Fatalf("scripts/release.sh %s: %v\n%s", testVersion, releaseErr, releaseOut)
	}
	return releaseDir
}

// releasedBinaries unpacks this machine's archive and returns the
// directory holding its leasemgr and executor.
func releasedBinaries(t *testing.T) string {
	t.Helper()
	name := "slotlease-" + testVersion + "-linux-" + runtime.GOARCH
	dir := t.TempDir()
	out, err := exec.Command("tar", "-xzf", filepath.Join(release(t), name+".tar.gz"), "-C", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("unpacking %s: %v\n%s", name, err, out)
	}
	return filepath.Join(dir, name)
}

// run runs a command to its end and returns its output (stdout and
// stderr) and exit code; a command that cannot start fails the test.
func run(t *testing.T, env []string, name string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if env != nil {
		cmd.Env = env
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("%s %q: %v", name, args, err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if releaseDir != "" {
		os.RemoveAll(releaseDir)
	}
	os.Exit(code)
}

// lockedBuffer is a buffer a running program writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

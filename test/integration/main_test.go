// Package integration runs the real binaries, leasemgr and executor,
// against real embedded nats-servers, the way a user would.
package integration

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/sandbox"
	"github.com/slotlease/slotlease/test/asuser"
	"github.com/slotlease/slotlease/test/harness"
	"github.com/slotlease/slotlease/test/raceexit"
)

var binDir string

// defaultTimeout is go test's own per-package timeout; packageTimeout is
// this package's, used in its place.
const defaultTimeout, packageTimeout = 10 * time.Minute, 30 * time.Minute

func TestMain(m *testing.M) {
	sandbox.Init() // jobs served in process run in the sandbox, which re-executes the test binary
	// This package runs the real binaries for 6-8 minutes under -race on
	// two cores beside the other packages of `go test ./...`, too close to
	// go test's default 10m, whose expiry kills the whole package: the
	// README's plain `go test -race ./...` gets 30m here. A timeout asked
	// for on the command line, other than the default, is kept.
	flag.Parse()
	if t := flag.Lookup("test.timeout"); t != nil && t.Value.String() == defaultTimeout.String() {
		_ = flag.Set("test.timeout", packageTimeout.String())
	}
	// Most tests wait on the binaries they start, each with its own server
	// and ports (freePort): four at once (docs/testing.md).
	harness.DefaultParallel("4")
	raceexit.Set() // -race binaries (raceBinariesEnv) and their sandbox stages exit at once
	dir, err := os.MkdirTemp("", "slotlease-bin-")
	if err == nil {
		// The binaries run as ordinary users too (asuser).
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", append(append([]string{"build"}, binariesRace()...), "-o", dir, "../../cmd/leasemgr", "../../cmd/executor", "./goholder")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// raceBinariesEnv set to 1 builds the binaries the tests run with -race.
// The race detector costs them about 350 CPU-seconds of the package's
// run, which on two cores made it 330 s instead of 170: the README's
// command builds them without it (the tests themselves still run with
// -race), and .ci/run runs the package again with them, so that the code
// only the binaries run (cmd/leasemgr, cmd/executor) is checked for races
// before a change lands (docs/testing.md).
const raceBinariesEnv = "SLOTLEASE_RACE_BINARIES"

func binariesRace() []string {
	if os.Getenv(raceBinariesEnv) == "1" {
		return []string{"-race"}
	}
	return nil
}

// proc is a running binary with its output captured.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output returns what the process printed so far, stdout and stderr merged.
func (p *proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Wait waits for the process to exit and returns its exit code.
func (p *proc) Wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v; output:\n%s", p.cmd.Args, timeout, p.Output())
	}
	return p.cmd.ProcessState.ExitCode()
}

// start runs a binary from binDir with env added to a minimal environment.
func start(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), raceexit.Env()}, env...)
	return launch(t, cmd)
}

// startAs is start as the ordinary user u (asuser), or as the test's own
// user if u is nil.
func startAs(t *testing.T, u *asuser.User, env []string, name string, args ...string) *proc {
	t.Helper()
	if u == nil {
		return start(t, env, name, args...)
	}
	return launch(t, u.Command(env, filepath.Join(binDir, name), args...))
}

// launch starts cmd with its output captured; the test's cleanup kills it
// if it still runs.
func launch(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{}), cmd: cmd}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", strings.Join(p.cmd.Args, " "), p.Output())
		}
	})
	return p
}

// openTempDir is a fresh directory anyone may enter and read (t.TempDir's
// are private): for scripts and programs a confined worker, with ids of
// its own, must read.
func openTempDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// sharedDir is a fresh directory any worker may write (mode 1777): give
// it to executor run or submit with --writable, for what a worker leaves
// for the test.
func sharedDir(t *testing.T) string {
	t.Helper()
	d := openTempDir(t)
	if err := os.Chmod(d, 0o1777); err != nil {
		t.Fatal(err)
	}
	return d
}

// ports are this package's: 20000-25999 (test/cluster has 26000-31999).
var ports = &harness.Ports{Lo: 20000, Hi: 26000}

// freePort returns a loopback port nobody listens on right now and that
// no other test of this package was given (harness.Ports).
func freePort(t *testing.T) int {
	t.Helper()
	p, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

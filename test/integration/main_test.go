// Package integration runs the real binaries, leasemgr and executor,
// against real embedded nats-servers, the way a user would.
package integration

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/sandbox"
)

var binDir string

func TestMain(m *testing.M) {
	sandbox.Init() // jobs served in process run in the sandbox, which re-executes the test binary
	dir, err := os.MkdirTemp("", "slotlease-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-race", "-o", dir, "../../cmd/leasemgr", "../../cmd/executor", "./goholder")
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
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(binDir, name), args...)
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
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

// freePort returns a loopback port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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

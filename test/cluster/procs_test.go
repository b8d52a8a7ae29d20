package cluster

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/harness"
	"github.com/slotlease/slotlease/test/raceexit"
)

// buildBinaries builds leasemgr and executor, with the race detector as the
// integration tests do, into a temporary directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-race", "-o", dir, "../../cmd/leasemgr", "../../cmd/executor")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the binaries: %v\n%s", err, out)
	}
	return dir
}

// rangePort is a port for a real process of this package's range
// (harness.Ports: 26000-31999), never handed out before.
func rangePort(t *testing.T) int {
	t.Helper()
	p, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// process is a real binary the test runs, freezes and stops.
type process struct {
	name        string
	cmd         *exec.Cmd
	out, errOut harness.SyncBuffer
	done        chan struct{}
}

// startProcess runs bin/name with env; the test's end kills it if it still
// runs, and waits for it.
func startProcess(t *testing.T, label, bin, name string, env []string, args ...string) *process {
	t.Helper()
	p, err := launch(t, label, bin, name, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// launch is startProcess for goroutines other than the test's.
func launch(t *testing.T, label, bin, name string, env []string, args ...string) (*process, error) {
	p := &process{name: label, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(bin, name), args...)
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), raceexit.Env()}, env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // a frozen process cannot die
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p, nil
}

func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// exited reports the exit code once the process has ended.
func (p *process) exited() (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	default:
		return 0, false
	}
}

// readyz returns the status of a leasemgr's /readyz, 0 if it does not answer.
func readyz(addr string) int { return httpStatus("http://" + addr + "/readyz") }

// httpStatus returns the status of a GET of url, 0 if it does not answer.
func httpStatus(url string) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// pollReady sleeps for d, polling addr's /readyz, and returns how long after
// since it first answered 200 (-1 if it did not within d).
func pollReady(addr string, since time.Time, d time.Duration) time.Duration {
	end := time.Now().Add(d)
	took := time.Duration(-1)
	for time.Now().Before(end) {
		if took < 0 && readyz(addr) == 200 {
			took = time.Since(since)
		}
		time.Sleep(min(50*time.Millisecond, time.Until(end)))
	}
	return took
}

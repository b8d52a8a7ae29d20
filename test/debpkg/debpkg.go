// Package debpkg gives tests the programs they need from Debian packages,
// installed with apt-get (as root) when they are missing, so that the
// README's test command runs every test on a fresh Debian machine.
package debpkg

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Tool is a program a test needs from a Debian package. If the install
// fails the test fails; SkipEnv=1 skips the test instead, on a machine that
// cannot have the package.
type Tool struct {
	Path    string // where the package puts the program, e.g. /usr/bin/chromium
	Pkg     string // the Debian package
	SkipEnv string // the variable that skips the test when set to 1
	Test    string // what needs it, for messages: "the browser test"
}

// Ensure returns the program's path: Path, else the same name on PATH,
// else Path after installing Pkg.
func (d Tool) Ensure(tb testing.TB) string {
	tb.Helper()
	if os.Getenv(d.SkipEnv) == "1" {
		tb.Skipf("%s=1: skipping %s", d.SkipEnv, d.Test)
	}
	if _, err := os.Stat(d.Path); err == nil {
		return d.Path
	}
	if p, err := exec.LookPath(filepath.Base(d.Path)); err == nil {
		return p
	}
	// One apt-get at a time, across this machine's test processes too
	// (tests and packages run in parallel): apt-get refuses to start while
	// another holds dpkg's lock. The one that waited may find the program
	// there already.
	unlock := lockInstalls(tb)
	defer unlock()
	if _, err := os.Stat(d.Path); err == nil {
		return d.Path
	}
	tb.Logf("%s is missing: installing Debian's %s package", d.Path, d.Pkg)
	start := time.Now()
	for _, args := range [][]string{{"update"}, {"install", "-y", d.Pkg}} {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			tb.Fatalf("%s needs Debian's %s at %s, and `apt-get %v` failed: %v\n%s\n"+
				"Install it (apt-get install %s), or set %s=1 to skip this test.",
				d.Test, d.Pkg, d.Path, args, err, tail(out, 2000), d.Pkg, d.SkipEnv)
		}
	}
	if _, err := os.Stat(d.Path); err != nil {
		tb.Fatalf("apt-get installed %s, but %v", d.Pkg, err)
	}
	tb.Logf("installed %s in %v", d.Pkg, time.Since(start).Round(time.Second))
	return d.Path
}

// installs serialises this process's installs; lockFile, all processes'.
var installs sync.Mutex

const lockFile = "/tmp/slotlease-debpkg.lock"

// lockInstalls takes the install lock and returns what releases it.
func lockInstalls(tb testing.TB) (unlock func()) {
	tb.Helper()
	installs.Lock()
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		installs.Unlock()
		tb.Fatalf("install lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		installs.Unlock()
		tb.Fatalf("install lock: %v", err)
	}
	return func() {
		f.Close() // releases the flock
		installs.Unlock()
	}
}

// tail is the last n bytes of b.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

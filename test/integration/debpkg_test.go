package integration

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// debianTool is a program a test needs from a Debian package, installed by
// the test with apt-get (as root) when it is missing, so `go test ./...` on
// a fresh Debian machine runs the test. If the install fails the test
// fails; skipEnv=1 skips the test instead, on a machine that cannot have
// the package.
type debianTool struct {
	path    string // where the package puts the program, e.g. /usr/bin/chromium
	pkg     string // the Debian package
	skipEnv string // the variable that skips the test when set to 1
	test    string // what needs it, for messages: "the browser test"
}

// ensure returns the tool's path, installing its package if it is missing.
func (d debianTool) ensure(t *testing.T) string {
	t.Helper()
	if os.Getenv(d.skipEnv) == "1" {
		t.Skipf("%s=1: skipping %s", d.skipEnv, d.test)
	}
	if _, err := os.Stat(d.path); err == nil {
		return d.path
	}
	t.Logf("%s is missing: installing Debian's %s package", d.path, d.pkg)
	start := time.Now()
	for _, args := range [][]string{{"update"}, {"install", "-y", d.pkg}} {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s needs Debian's %s at %s, and `apt-get %v` failed: %v\n%s\n"+
				"Install it (apt-get install %s), or set %s=1 to skip this test.",
				d.test, d.pkg, d.path, args, err, tail(out, 2000), d.pkg, d.skipEnv)
		}
	}
	if _, err := os.Stat(d.path); err != nil {
		t.Fatalf("apt-get installed %s, but %v", d.pkg, err)
	}
	t.Logf("installed %s in %v", d.pkg, time.Since(start).Round(time.Second))
	return d.path
}

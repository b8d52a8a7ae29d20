// Package typescript runs the TypeScript client's own checks from the
// README's test command: npm ci from the committed lock file, the build,
// the type check, and its suite (node's test runner) against real
// leasemgr and executor binaries built here.
package typescript

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/debpkg"
)

// nodeMajorMin is the oldest Node.js the package supports (package.json
// "engines").
const nodeMajorMin = 20

func TestTypeScriptClient(t *testing.T) {
	// Debian's nodejs (20 on Debian 13) and npm, installed if missing.
	node := debpkg.Tool{Path: "/usr/bin/node", Pkg: "nodejs", SkipEnv: "SLOTLEASE_SKIP_TYPESCRIPT", Test: "the TypeScript client's tests"}.Ensure(t)
	npm := debpkg.Tool{Path: "/usr/bin/npm", Pkg: "npm", SkipEnv: "SLOTLEASE_SKIP_TYPESCRIPT", Test: "the TypeScript client's tests"}.Ensure(t)
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	m := regexp.MustCompile(`^v(\d+)\.`).FindSubmatch(bytes.TrimSpace(out))
	if m == nil {
		t.Fatalf("node --version said %q", out)
	}
	if major, _ := strconv.Atoi(string(m[1])); major < nodeMajorMin {
		t.Fatalf("node %s (%s) is too old: the TypeScript client needs Node.js %d or later; install a newer one, or set SLOTLEASE_SKIP_TYPESCRIPT=1 to skip its tests", bytes.TrimSpace(out), node, nodeMajorMin)
	}

	bin := t.TempDir()
	run(t, 5*time.Minute, "", "go", "build", "-o", bin, "../../cmd/leasemgr", "../../cmd/executor")
	run(t, 5*time.Minute, "", npm, "ci", "--no-audit", "--no-fund")
	run(t, 2*time.Minute, "", npm, "run", "build")
	run(t, 2*time.Minute, "", npm, "run", "typecheck")
	start := time.Now()
	suite := run(t, 3*time.Minute, bin, npm, "test")
	took := time.Since(start)
	// The figures the suite prints (kill to grant, ...), for go test -v.
	for _, line := range strings.Split(suite, "\n") {
		if strings.HasPrefix(line, "# # ") || strings.HasPrefix(line, "# \\# ") {
			t.Log(strings.TrimPrefix(strings.TrimPrefix(line, "# \\# "), "# # "))
		}
	}
	t.Logf("the TypeScript suite took %v", took.Round(100*time.Millisecond))
}

// run runs a command in this directory and fails the test with its output
// if it fails. With binDir, the suite finds leasemgr and executor there.
func run(t *testing.T, timeout time.Duration, binDir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "NO_UPDATE_NOTIFIER=1", "npm_config_update_notifier=false")
	if binDir != "" {
		cmd.Env = append(cmd.Env, "SLOTLEASE_BIN_DIR="+binDir)
	}
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return fmt.Sprint(string(out))
}

// Package typescript runs the TypeScript client's own checks from the
// README's test command: npm ci from the committed lock file, the build
// (by npm pack, whose prepack builds both forms, ESM and CommonJS), the
// type check, its suite (node's test runner) against real leasemgr and
// executor binaries built here, and the packed tarball installed and used
// as a user would (npm run test:pack). lameduck_test.go runs the built
// client against a real NATS cluster whose server stops in lame duck mode.
package typescript

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/debpkg"
)

// nodeMajorMin is the oldest Node.js the package supports (package.json
// "engines").
const nodeMajorMin = 20

func TestTypeScriptClient(t *testing.T) {
	_, npm := built(t)

	bin := t.TempDir()
	binEnv := []string{"SLOTLEASE_BIN_DIR=" + bin}
	run(t, 5*time.Minute, nil, "go", "build", "-o", bin, "../../cmd/leasemgr", "../../cmd/executor")
	packDir := t.TempDir()
	run(t, 3*time.Minute, nil, npm, "pack", "--pack-destination", packDir)
	tgz := filepath.Join(packDir, "slotlease-client-"+packageVersion(t)+".tgz")
	if _, err := os.Stat(tgz); err != nil {
		t.Fatalf("npm pack wrote no %s: %v", tgz, err)
	}
	run(t, 2*time.Minute, nil, npm, "run", "typecheck")
	start := time.Now()
	suite := run(t, 3*time.Minute, binEnv, npm, "test")
	took := time.Since(start)
	// The figures the suite prints (kill to grant, ...), for go test -v.
	logFigures(t, suite)
	t.Logf("the TypeScript suite took %v", took.Round(100*time.Millisecond))

	start = time.Now()
	pack := run(t, 5*time.Minute, append(binEnv, "SLOTLEASE_PACKED_TGZ="+tgz), npm, "run", "test:pack")
	logFigures(t, pack)
	t.Logf("the packed package's test took %v", time.Since(start).Round(100*time.Millisecond))
}

// npmBuild is npm ci and the build (dist/), run once per test binary for
// every test that needs the built client: two builds must not run in this
// directory at once, and one is enough.
var npmBuild struct {
	once sync.Once
	err  error
}

// built returns node and npm, installed if missing, once npm ci and the
// build have run (npmBuild).
func built(t *testing.T) (node, npm string) {
	t.Helper()
	// Debian's nodejs (20 on Debian 13) and npm, installed if missing.
	node = debpkg.Tool{Path: "/usr/bin/node", Pkg: "nodejs", SkipEnv: "SLOTLEASE_SKIP_TYPESCRIPT", Test: "the TypeScript client's tests"}.Ensure(t)
	npm = debpkg.Tool{Path: "/usr/bin/npm", Pkg: "npm", SkipEnv: "SLOTLEASE_SKIP_TYPESCRIPT", Test: "the TypeScript client's tests"}.Ensure(t)
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
	npmBuild.once.Do(func() {
		if _, npmBuild.err = runErr(5*time.Minute, nil, npm, "ci", "--no-audit", "--no-fund"); npmBuild.err == nil {
			_, npmBuild.err = runErr(3*time.Minute, nil, npm, "run", "build")
		}
	})
	if npmBuild.err != nil {
		t.Fatal(npmBuild.err)
	}
	return node, npm
}

// packageVersion is package.json's version, which names npm pack's tarball.
func packageVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("package.json")
	if err != nil {
		t.Fatal(err)
	}
	var p struct{ Version string }
	if err := json.Unmarshal(b, &p); err != nil || p.Version == "" {
		t.Fatalf("package.json: no version (%v)", err)
	}
	return p.Version
}

// logFigures logs the lines a node test prints starting with "# ".
func logFigures(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "# # ") || strings.HasPrefix(line, "# \\# ") {
			t.Log(strings.TrimPrefix(strings.TrimPrefix(line, "# \\# "), "# # "))
		}
	}
}

// run runs a command in this directory with env added to the test's own
// and fails the test with its output if it fails.
func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(timeout, env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runErr is run that returns the failure instead.
func runErr(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "NO_UPDATE_NOTIFIER=1", "npm_config_update_notifier=false")
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/debpkg"
)

// axeLock is the directory whose package.json and committed
// package-lock.json pin the axe-core the accessibility checks run, so a new
// release's rules do not change a test's verdict unasked, and npm checks
// what it fetches against the lock's integrity hash.
const axeLock = "testdata/axe"

// npmTool is Debian's npm, which installs axe-core from the npm registry.
var npmTool = debpkg.Tool{Path: "/usr/bin/npm", Pkg: "npm", SkipEnv: "SLOTLEASE_SKIP_BROWSER", Test: "the accessibility check"}

// axeSource returns axe-core's axe.min.js, installed once with `npm ci`
// from axeLock into the user's cache (keyed by the lock's hash) and read
// from there after.
func axeSource(t *testing.T) string {
	t.Helper()
	// Tests run in parallel: one runs npm ci, the others wait for it.
	axeMu.Lock()
	defer axeMu.Unlock()
	pkg, err := os.ReadFile(filepath.Join(axeLock, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(filepath.Join(axeLock, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256(append(pkg, lock...))
	dir := filepath.Join(cache, "slotlease-test", "axe-"+hex.EncodeToString(sum[:8]))
	js := filepath.Join(dir, "node_modules", "axe-core", "axe.min.js")
	if b, err := os.ReadFile(js); err == nil && len(b) > 0 {
		return string(b)
	}
	npm := npmTool.Ensure(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s (axe-core from %s): %v\n%s\nSet SLOTLEASE_SKIP_BROWSER=1 to skip the browser tests.", dir, axeLock, err, tail(out, 2000))
	}
	b, err := os.ReadFile(js)
	if err != nil || len(b) == 0 {
		t.Fatalf("npm ci installed no axe-core: %v", err)
	}
	return string(b)
}

// axeMu makes axeSource one install at a time.
var axeMu sync.Mutex

// axeViolation is one rule axe-core found broken, with where.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// axeCheck runs axe-core on the page as it is now and fails the test for
// every serious or critical violation, naming the rule and the elements.
func axeCheck(t *testing.T, p *cdpPage, where string) {
	t.Helper()
	if p.eval(t, `typeof window.axe`) != "object" {
		p.eval(t, axeSource(t))
	}
	s, _ := p.evalAwait(t, `axe.run(document, {resultTypes: ['violations']}).then((r) => JSON.stringify(r.violations.map((v) => ({
	  id: v.id, impact: v.impact, help: v.help,
	  nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ') + ': ' + (n.failureSummary || '').replace(/\s+/g, ' ')),
	}))))`).(string)
	var vs []axeViolation
	if err := json.Unmarshal([]byte(s), &vs); err != nil {
		t.Fatalf("axe-core's result %q: %v", s, err)
	}
	for _, v := range vs {
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Errorf("%s: axe-core: %s (%s, %s):\n  %s", where, v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "\n  "))
		} else {
			t.Logf("%s: axe-core, %s: %s (%s)", where, v.Impact, v.ID, v.Help)
		}
	}
}

// evalAwait is eval of an expression whose value is a promise: its
// settled value (axe.run takes seconds, so a longer wait than eval's).
func (p *cdpPage) evalAwait(t *testing.T, expr string) any {
	t.Helper()
	return p.evaluate(t, expr, true, 60*time.Second)
}

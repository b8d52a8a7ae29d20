package integration

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// axeVersion is the axe-core release the accessibility checks run: pinned,
// so a new release's rules do not change a test's verdict unasked.
const axeVersion = "4.14.1"

// npmTool is Debian's npm, which fetches axe-core from the npm registry.
var npmTool = debianTool{path: "/usr/bin/npm", pkg: "npm", skipEnv: "SLOTLEASE_SKIP_BROWSER", test: "the accessibility check"}

// axeSource returns axe-core's axe.min.js: from the user's cache, else
// fetched once with `npm pack axe-core@<axeVersion>` (npm checks the
// package's integrity against the registry) and kept in the cache.
func axeSource(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	path := filepath.Join(cache, "slotlease-test", "axe-core-"+axeVersion+".min.js")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return string(b)
	}
	npm := npmTool.ensure(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "pack", "axe-core@"+axeVersion, "--pack-destination", dir)
	cmd.Env = append(os.Environ(), "HOME="+dir, "npm_config_update_notifier=false", "npm_config_fund=false")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm pack axe-core@%s: %v\n%s\nSet SLOTLEASE_SKIP_BROWSER=1 to skip the browser tests.", axeVersion, err, tail(out, 2000))
	}
	src, err := untarFile(filepath.Join(dir, "axe-core-"+axeVersion+".tgz"), "package/axe.min.js")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// untarFile returns the file name of the gzipped tar archive at path.
func untarFile(path, name string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, errors.New(path + " has no " + name)
		}
		if err != nil {
			return nil, err
		}
		if h.Name == name {
			return io.ReadAll(io.LimitReader(tr, 16<<20))
		}
	}
}

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
// settled value.
func (p *cdpPage) evalAwait(t *testing.T, expr string) any {
	t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception *struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.b.send(ctx, p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
		t.Fatal(err)
	}
	if e := r.ExceptionDetails; e != nil {
		msg := e.Text
		if e.Exception != nil {
			msg = e.Exception.Description
		}
		t.Fatalf("evaluating in the page: %s", msg)
	}
	return r.Result.Value
}

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// leasemgr layout as an operator runs it: bad flags are usage errors
// (exit 2) that name the flag and write nothing; a good run lists what it
// wrote and how to start it. test/cluster's TestLayoutClusterFastRelease
// runs the cluster it writes.
func TestLayoutCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		says string
	}{
		{nil, "--out: required"},
		{[]string{"--out", filepath.Join(dir, "a"), "--servers", "2", "--hosts", "h1,h2,h3"}, "--hosts names 3 hosts, --servers says 2"},
		{[]string{"--out", filepath.Join(dir, "b"), "--servers", "0x"}, `invalid argument "0x" for "--servers"`},
		{[]string{"--out", filepath.Join(dir, "c"), "--hosts", "h1:4222"}, "without a port"},
		{[]string{"--out", filepath.Join(dir, "d"), "--executors", "a,a"}, `"a" is named twice`},
		{[]string{"--out", filepath.Join(dir, "e"), "--client-port", "70000"}, "--client-port 70000"},
		{[]string{"--out", filepath.Join(dir, "f"), "extra"}, "layout takes no arguments"},
	} {
		out, errOut, code := runHelp(t, "leasemgr", append([]string{"layout"}, c.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.says) {
			t.Errorf("leasemgr layout %q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.says)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("refused runs wrote %v", entries)
	}

	out := filepath.Join(dir, "layout")
	stdout, errOut, code := runHelp(t, "leasemgr", "layout", "--out", out, "--executors", "box1,box2")
	if code != 0 || errOut != "" {
		t.Fatalf("leasemgr layout: exit %d, stderr %q", code, errOut)
	}
	for _, f := range []string{"nats/nats-0.conf", "nats/nats-2.conf", "creds/executor-box2.nk", "leasemgr.env", "executor-box1.env", "executor.env", "reader.env"} {
		if !strings.Contains(stdout, "  "+f+"\n") {
			t.Errorf("the listing lacks %s:\n%s", f, stdout)
		}
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stdout, "nats-server -c "+out+"/nats/nats-I.conf") {
		t.Errorf("no next steps:\n%s", stdout)
	}
	// A second run refuses the directory, naming --force.
	if _, errOut, code := runHelp(t, "leasemgr", "layout", "--out", out); code != 2 || !strings.Contains(errOut, "is not empty") || !strings.Contains(errOut, "--force") {
		t.Errorf("a second run: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := runHelp(t, "leasemgr", "layout", "--out", out, "--force"); code != 0 {
		t.Errorf("--force: exit %d, stderr %q", code, errOut)
	}
}

package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/test/debpkg"
)

// unit is a unit file's [Service] settings: every value of each key, in
// order.
type unit map[string][]string

func (u unit) one(key string) string {
	if v := u[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u, section := unit{}, ""
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			u[k] = append(u[k], v)
		}
	}
	return u
}

// The units of deploy/systemd pass systemd-analyze verify without a word
// and its security review within their exposure budgets, are hardened as
// docs/deploy.md says, read what `leasemgr layout --creds-dir .` writes
// (the environment file, and each seed it names as a credential the unit
// loads), and give leasemgr the descriptors and the time its embedded
// server and a graceful stop need.
func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	analyze := debpkg.Tool{Path: "/usr/bin/systemd-analyze", Pkg: "systemd", SkipEnv: "SLOTLEASE_SKIP_SYSTEMD", Test: "the systemd units' test"}.Ensure(t)
	bin := releasedBinaries(t)

	// verify needs ExecStart's program where it says; the copies name
	// the released binaries in place of /usr/local/bin.
	dir := t.TempDir()
	names := []string{"leasemgr.service", "executor-serve.service"}
	units := map[string]unit{}
	var copies []string
	for _, name := range names {
		src := filepath.Join(repoRoot, "deploy", "systemd", name)
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "ExecStart=/usr/local/bin/") {
			t.Fatalf("%s: ExecStart is not in /usr/local/bin, where docs/deploy.md installs the binaries", name)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/", bin+"/")), 0o644); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, p)
		units[name] = parseUnit(t, src)
	}
	if out, code := run(t, nil, analyze, append([]string{"verify", "--man=no"}, copies...)...); code != 0 || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: exit %d, want 0 and no word:\n%s", code, out)
	}
	// Exposure levels as systemd-analyze security shows them (x10):
	// leasemgr needs nothing but its sockets and its state directory;
	// the executor makes namespaces for its workers, so keeps the right to.
	for i, budget := range []int{20, 75} {
		out, code := run(t, nil, analyze, "security", "--offline=yes", "--threshold="+strconv.Itoa(budget), copies[i])
		if code != 0 {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			t.Errorf("systemd-analyze security %s: exit %d, over the budget %d.%d:\n%s", names[i], code, budget/10, budget%10, strings.Join(lines[max(0, len(lines)-3):], "\n"))
		}
	}

	lm, ex := units["leasemgr.service"], units["executor-serve.service"]
	for name, u := range units {
		for k, want := range map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
			"DynamicUser": "yes", "Restart": "on-failure", "KillSignal": "SIGTERM", "KillMode": "mixed", "UMask": "0077"} {
			if got := u.one(k); got != want {
				t.Errorf("%s: %s=%q, want %q", name, k, got, want)
			}
		}
	}
	if lm.one("StateDirectory") != "slotlease" || lm.one("StateDirectoryMode") != "0700" {
		t.Errorf("leasemgr.service: StateDirectory=%q mode %q, want slotlease, 0700", lm.one("StateDirectory"), lm.one("StateDirectoryMode"))
	}
	if ex.one("Delegate") != "yes" || ex["RestrictNamespaces"] != nil || ex["SystemCallFilter"] != nil {
		t.Errorf("executor-serve.service: Delegate=%q, RestrictNamespaces=%q, SystemCallFilter=%q: the sandbox needs a delegated cgroup and namespaces",
			ex.one("Delegate"), ex["RestrictNamespaces"], ex["SystemCallFilter"])
	}
	for _, k := range []string{"PrivateDevices", "DeviceAllow", "DevicePolicy", "ProtectClock"} {
		if ex[k] != nil {
			t.Errorf("executor-serve.service: %s=%q: a device policy would close the devices jobs hold slots of (GPUs)", k, ex[k])
		}
	}
	if lm.one("User") == ex.one("User") {
		t.Errorf("both units run as %q: the executor's workers could then be leasemgr's user", lm.one("User"))
	}
	stop := func(u unit) time.Duration {
		s, err := strconv.Atoi(u.one("TimeoutStopSec"))
		if err != nil {
			t.Fatalf("TimeoutStopSec=%q: %v", u.one("TimeoutStopSec"), err)
		}
		return time.Duration(s) * time.Second
	}
	if d := stop(lm); d <= jetstream.LameDuckDuration {
		t.Errorf("leasemgr.service: TimeoutStopSec=%v, not above a lame-duck stop (%v)", d, jetstream.LameDuckDuration)
	}
	if d := stop(ex); d <= jobs.DefaultGrace+5*time.Second {
		t.Errorf("executor-serve.service: TimeoutStopSec=%v, not above serve's --grace (%v) and --kill-grace (5s)", d, jobs.DefaultGrace)
	}

	// What leasemgr layout writes is what the units read.
	layout := filepath.Join(t.TempDir(), "layout")
	if out, code := run(t, []string{"HOME=" + t.TempDir()}, filepath.Join(bin, "leasemgr"), "layout", "--out", layout, "--creds-dir", "."); code != 0 {
		t.Fatalf("leasemgr layout --creds-dir .: exit %d\n%s", code, out)
	}
	for _, c := range []struct {
		unit unit
		name string
		env  string
		keys []string
	}{
		{lm, "leasemgr.service", "leasemgr.env", []string{"NATS_NKEY", "JOBS_NATS_NKEY"}},
		{ex, "executor-serve.service", "executor.env", []string{"NATS_NKEY"}},
	} {
		if got, want := c.unit.one("EnvironmentFile"), "-/etc/slotlease/"+c.env; got != want {
			t.Errorf("%s: EnvironmentFile=%q, want %q", c.name, got, want)
		}
		env := readEnv(t, filepath.Join(layout, c.env))
		var loaded []string
		for _, k := range c.keys {
			seed := env[k]
			want := seed + ":/etc/slotlease/creds/" + seed
			if seed == "" || strings.Contains(seed, "/") || !slices.Contains(c.unit["LoadCredential"], want) {
				t.Errorf("%s: %s=%q in %s, and LoadCredential=%q: want LoadCredential=%s", c.name, k, seed, c.env, c.unit["LoadCredential"], want)
			}
			if _, err := os.Stat(filepath.Join(layout, "creds", seed)); err != nil {
				t.Errorf("%s names %s, which leasemgr layout did not write: %v", c.env, seed, err)
			}
			loaded = append(loaded, want)
		}
		if extra := slices.DeleteFunc(slices.Clone(c.unit["LoadCredential"]), func(s string) bool { return slices.Contains(loaded, s) }); len(extra) > 0 {
			t.Errorf("%s loads credentials %q that %s does not name", c.name, extra, c.env)
		}
	}

	checkDescriptorsAndStop(t, bin, lm.one("LimitNOFILE"), stop(lm))
}

// readEnv reads an environment file of plain VAR=value lines.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			env[k] = strings.Trim(v, "'")
		}
	}
	return env
}

// checkDescriptorsAndStop runs the released leasemgr with its embedded
// server and the unit's StateDirectory, and checks that the unit's
// descriptor limit leaves the embedded server its default connections
// (what leasemgr keeps for itself is read from its log: a test may not
// raise its own limit to the unit's), and that SIGTERM stops it cleanly
// well within the unit's TimeoutStopSec.
func checkDescriptorsAndStop(t *testing.T, bin, nofile string, timeout time.Duration) {
	t.Helper()
	limit, err := strconv.Atoi(nofile)
	if err != nil {
		t.Fatalf("LimitNOFILE=%q: %v", nofile, err)
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports.Take(t))
	env := []string{"HOME=" + t.TempDir(), "STATE_DIRECTORY=" + state, "NODE_ID=unit", "HTTP_ADDR=" + httpAddr,
		fmt.Sprintf("NATS_LISTEN=127.0.0.1:%d", ports.Take(t))}
	cmd := exec.Command(filepath.Join(bin, "leasemgr"), "run")
	cmd.Env = env
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if o, code := run(t, env, filepath.Join(bin, "leasemgr"), "health", "--ready"); code == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("leasemgr not ready within 2 minutes (%s):\n%s", o, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	m := regexp.MustCompile(`msg="embedded NATS server limits" descriptors=(\d+) max_connections=(\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("leasemgr logs no embedded server limits:\n%s", out.String())
	}
	descriptors, _ := strconv.Atoi(m[1])
	maxConns, _ := strconv.Atoi(m[2])
	reserved := descriptors - maxConns
	got, limits, err := jetstream.ConnectionLimits(limit, reserved, jetstream.AccountLimits{})
	if err != nil || limits.ExecutorConnections != config.DefaultExecutorsMaxConnections || limits.ReaderConnections != config.DefaultReadersMaxConnections {
		t.Errorf("LimitNOFILE=%d, less the %d leasemgr keeps, gives the embedded server %d connections: executors %d, readers %d (%v); want the defaults %d and %d",
			limit, reserved, got, limits.ExecutorConnections, limits.ReaderConnections, err, config.DefaultExecutorsMaxConnections, config.DefaultReadersMaxConnections)
	}
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		if waitErr != nil {
			t.Errorf("leasemgr after SIGTERM: %v\n%s", waitErr, out.String())
		}
		t.Logf("leasemgr stopped %v after SIGTERM (TimeoutStopSec=%v)", time.Since(start).Round(time.Millisecond), timeout)
	case <-time.After(timeout):
		t.Errorf("leasemgr did not stop within TimeoutStopSec=%v of SIGTERM:\n%s", timeout, out.String())
	}
}

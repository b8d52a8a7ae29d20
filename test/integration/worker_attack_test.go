package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// attackSetup is a host with secrets where a worker could look for them:
// fake credential files (holding marker) in the slotlease config dir of
// HOME, in NATS_AUTH_DIR and in the default store dir of TMPDIR, and
// marker in the environment of leasemgr and the executor.
type attackSetup struct {
	marker, home, tmp, authDir, workdir string
	hidden                              []string
}

func newAttackSetup(t *testing.T) *attackSetup {
	t.Helper()
	s := &attackSetup{
		marker: fmt.Sprintf("slotlease-fake-secret-%016x", rand.Uint64()),
		home:   t.TempDir(), tmp: t.TempDir(), authDir: t.TempDir(), workdir: t.TempDir(),
	}
	// A credentials directory must be private, or leasemgr refuses it.
	if err := os.Chmod(s.authDir, 0o700); err != nil {
		t.Fatal(err)
	}
	s.hidden = []string{filepath.Join(s.home, ".config", "slotlease"), s.authDir, filepath.Join(s.tmp, "leasemgr")}
	for _, f := range []string{
		// Names the real credential files will not have: leasemgr and
		// the executor must not take these for theirs.
		filepath.Join(s.hidden[0], "planted", "planted-secret"),
		filepath.Join(s.authDir, "planted-secret"),
		filepath.Join(s.hidden[2], "planted-secret"),
	} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(s.marker+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// env is what both leasemgr and the executor get: defaults everywhere but
// the test's own directories and ports. No NATS_STORE_DIR: the store is
// the default one under TMPDIR.
func (s *attackSetup) env(natsPort int, httpAddr string) []string {
	return []string{
		"HOME=" + s.home, "TMPDIR=" + s.tmp, "NATS_AUTH_DIR=" + s.authDir,
		"NODE_ID=atk", "POOL_CAPACITIES=gpu=1",
		fmt.Sprintf("NATS_LISTEN=127.0.0.1:%d", natsPort), "HTTP_ADDR=" + httpAddr,
		"SLOTLEASE_TEST_SECRET=" + s.marker,
	}
}

// attackEnv is the attacker's environment; pidFile will hold the pids of
// the processes it attacks by pid.
func (s *attackSetup) attackEnv(natsPort int, pidFile string) map[string]string {
	return map[string]string{
		"ATTACK_MARKER":  s.marker,
		"ATTACK_HIDDEN":  strings.Join(s.hidden, ":"),
		"ATTACK_ROOTS":   strings.Join([]string{s.home, s.tmp, s.authDir}, ":"),
		"ATTACK_PIDFILE": pidFile,
		"ATTACK_NATS":    fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		"ATTACK_PREFIX":  "lease",
	}
}

func buildAttacker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "attacker")
	out, err := exec.Command("go", "build", "-o", bin, "./attacker").CombinedOutput()
	if err != nil {
		t.Fatalf("building the attacker: %v\n%s", err, out)
	}
	return bin
}

// attackReport checks that the attacker ran to the end and returns what it
// found.
func attackReport(t *testing.T, out string) []string {
	t.Helper()
	if !strings.Contains(out, "attacker: done,") {
		t.Fatalf("the attacker did not finish:\n%s", out)
	}
	var found []string
	for _, line := range strings.Split(out, "\n") {
		if f, ok := strings.CutPrefix(line, "FOUND: "); ok {
			found = append(found, f)
		}
	}
	return found
}

// Issue 13, point 3: worker code run by `executor run` with default flags
// holds nothing that changes a lease. The attacker looks for credentials
// in its environment, descriptors, the files of HOME, the config dir,
// NATS_AUTH_DIR, the temp and store dirs, other processes' environ and
// root (the executor's and leasemgr's by pid), then connects to NATS
// anonymously and with anything it found and tries to purge its own lease
// record and publish a forged event. Every attempt must fail.
func TestWorkerCannotReachSecrets(t *testing.T) {
	attacker := buildAttacker(t)
	s := newAttackSetup(t)
	natsPort := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := s.env(natsPort, httpAddr)
	m := startManager(t, env, httpAddr)

	// Control: the same program as a plain process of the user finds the
	// planted secrets, so the checks below can fail.
	pidFile := filepath.Join(t.TempDir(), "pids")
	if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", m.cmd.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := exec.Command(attacker)
	ctl.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range s.attackEnv(natsPort, pidFile) {
		ctl.Env = append(ctl.Env, k+"="+v)
	}
	ctlOut, _ := ctl.CombinedOutput()
	ctlFound := strings.Join(attackReport(t, string(ctlOut)), "\n")
	for _, h := range s.hidden {
		if !strings.Contains(ctlFound, "read hidden file "+h) {
			t.Errorf("control: a plain process could not read the planted file under %s; the test proves nothing:\n%s", h, ctlOut)
		}
	}

	args := []string{"run", "--pool", "gpu", "--dir", s.workdir}
	for k, v := range s.attackEnv(natsPort, filepath.Join(s.workdir, "pids")) {
		args = append(args, "--env", k+"="+v)
	}
	run := start(t, env, "executor", append(args, "--", attacker)...)
	pids := fmt.Sprintf("%d %d\n", run.cmd.Process.Pid, m.cmd.Process.Pid)
	tmp := filepath.Join(s.workdir, "pids.tmp")
	if err := os.WriteFile(tmp, []byte(pids), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.workdir, "pids")); err != nil {
		t.Fatal(err)
	}
	code := run.Wait(t, 3*time.Minute)
	out := run.Output()
	if code != 0 {
		t.Fatalf("executor run exited %d:\n%s", code, out)
	}
	if strings.Contains(out, "warning: workers can read") {
		t.Errorf("the executor could not hide the secrets:\n%s", out)
	}
	checkAttack(t, out)
}

// checkAttack fails the test for every attempt of the attacker that
// worked, naming it.
func checkAttack(t *testing.T, out string) {
	t.Helper()
	found := attackReport(t, out)
	for _, f := range found {
		t.Errorf("the worker succeeded: %s", f)
	}
	if len(found) > 0 {
		t.Logf("attacker output:\n%s", out)
	}
}

// The same attacker as a job under `executor serve` with default flags.
func TestJobCannotReachSecrets(t *testing.T) {
	attacker := buildAttacker(t)
	s := newAttackSetup(t)
	natsPort := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := s.env(natsPort, httpAddr)
	m := startManager(t, env, httpAddr)

	report := filepath.Join(s.workdir, "report")
	args := []string{"submit", "--pool", "gpu", "--env", "ATTACK_REPORT=" + report}
	for k, v := range s.attackEnv(natsPort, filepath.Join(s.workdir, "pids")) {
		args = append(args, "--env", k+"="+v)
	}
	if code, out := runExecutor(t, env, append(args, "--", attacker)...); code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	serve := start(t, env, "executor", "serve", "--pools", "gpu")
	pids := fmt.Sprintf("%d %d\n", serve.cmd.Process.Pid, m.cmd.Process.Pid)
	if err := os.WriteFile(filepath.Join(s.workdir, "pids.tmp"), []byte(pids), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(s.workdir, "pids.tmp"), filepath.Join(s.workdir, "pids")); err != nil {
		t.Fatal(err)
	}
	var out []byte
	eventually(t, 3*time.Minute, "the attacker job's report", func() bool {
		out, _ = os.ReadFile(report)
		return len(out) > 0
	})
	if strings.Contains(serve.Output(), "warning: workers can read") {
		t.Errorf("the executor could not hide the secrets:\n%s", serve.Output())
	}
	checkAttack(t, string(out))
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	serve.Wait(t, 30*time.Second)
}

// Where the machine allows no mount namespace (here: uid 0 of a user
// namespace without capabilities, in which no further user namespace may
// be created), the executor says once, before asking for slots, which
// secret paths the worker can read, and runs it anyway.
func TestExecutorWarnsWhenSecretsCannotBeHidden(t *testing.T) {
	s := newAttackSetup(t)
	natsPort := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := s.env(natsPort, httpAddr)
	startManager(t, env, httpAddr)

	exe := filepath.Join(binDir, "executor")
	script := `echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all "$@"`
	cmd := exec.Command("unshare", "-Ur", "sh", "-c", script, "sh", exe, "run", "--pool", "gpu", "--", "cat", filepath.Join(s.hidden[0], "planted", "planted-secret"))
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	if err != nil {
		t.Fatalf("executor run without namespaces: %v\n%s", err, out)
	}
	if !strings.Contains(out, s.marker) {
		t.Fatalf("the worker could not read the secret, so namespaces were available after all; the test proves nothing:\n%s", out)
	}
	warning := "executor: warning: workers can read "
	if n := strings.Count(out, warning); n != 1 {
		t.Fatalf("%d warnings, want exactly one:\n%s", n, out)
	}
	line := out[strings.Index(out, warning):]
	line = line[:strings.IndexByte(line, '\n')]
	for _, h := range s.hidden {
		if !strings.Contains(line, h) {
			t.Errorf("the warning does not name %s: %s", h, line)
		}
	}
	if strings.Index(out, warning) > strings.Index(out, "granted") {
		t.Errorf("the warning came after the grant, not at start:\n%s", out)
	}
}

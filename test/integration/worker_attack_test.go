package integration

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/asuser"
	"github.com/slotlease/slotlease/test/raceexit"
)

// attackSetup is a host with secrets where a worker could look for them:
// fake credential files (holding marker) in the slotlease config dir of
// HOME, in NATS_AUTH_DIR, in the default store dir of HOME's state dir and
// in the old one of TMPDIR, and
// marker in the environment of leasemgr and the executor; and files and
// directories the worker must not change: a file of root's (when the test
// is root), a file of the stack's user that anyone may write, and the
// stack's HOME, TMPDIR and NATS_AUTH_DIR. The whole stack runs as u, or
// as the test's own user if u is nil.
type attackSetup struct {
	u                                   *asuser.User
	marker, home, tmp, authDir, workdir string
	hidden                              []string
	writeTargets                        []string
}

func newAttackSetup(t *testing.T, u *asuser.User) *attackSetup {
	t.Helper()
	// Short: the command channel's socket path below TMPDIR must fit
	// in sun_path (108 bytes), and subtests' TempDirs are long.
	base, err := os.MkdirTemp("", "atk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &attackSetup{
		u:      u,
		marker: fmt.Sprintf("slotlease-fake-secret-%016x", rand.Uint64()),
		home:   filepath.Join(base, "home"), tmp: filepath.Join(base, "tmp"),
		authDir: filepath.Join(base, "auth"), workdir: filepath.Join(base, "work"),
	}
	uid, gid := os.Getuid(), os.Getgid()
	if u != nil {
		uid, gid = u.UID, u.GID
	}
	// Private, the stack's user's: leasemgr refuses a credentials
	// directory that is not.
	for _, d := range []string{s.home, s.tmp, s.authDir, s.workdir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s.hidden = []string{filepath.Join(s.home, ".config", "slotlease"), s.authDir, filepath.Join(s.tmp, "leasemgr"),
		filepath.Join(s.home, ".local", "state", "slotlease")}
	for _, f := range []string{
		// Names the real credential files will not have: leasemgr and
		// the executor must not take these for theirs.
		filepath.Join(s.hidden[0], "planted", "planted-secret"),
		filepath.Join(s.authDir, "planted-secret"),
		filepath.Join(s.hidden[2], "planted-secret"),
		filepath.Join(s.hidden[3], "planted-secret"),
	} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(s.marker+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	userFile := filepath.Join(s.home, "anyone-may-write")
	if err := os.WriteFile(userFile, []byte("the user's\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(userFile, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(base, func(p string, _ fs.DirEntry, err error) error {
		if err != nil || p == base {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
	s.writeTargets = []string{userFile, s.home, s.tmp, s.authDir, "/tmp"}
	if os.Geteuid() == 0 {
		// What a worker of a root executor replaced in issue 29: a file
		// of root's (the executor's binary, /etc/passwd).
		rootDir := openTempDir(t)
		rootFile := filepath.Join(rootDir, "root-owned")
		if err := os.WriteFile(rootFile, []byte("root's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.writeTargets = append(s.writeTargets, rootFile, rootDir)
	}
	return s
}

// env is what both leasemgr and the executor get: defaults everywhere but
// the test's own directories and ports. No NATS_STORE_DIR: the store is
// the default one in HOME's state directory.
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
	uid := os.Getuid()
	if s.u != nil {
		uid = s.u.UID
	}
	env := map[string]string{
		"ATTACK_MARKER":       s.marker,
		"ATTACK_HIDDEN":       strings.Join(s.hidden, ":"),
		"ATTACK_ROOTS":        strings.Join([]string{s.home, s.tmp, s.authDir}, ":"),
		"ATTACK_PIDFILE":      pidFile,
		"ATTACK_NATS":         fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		"ATTACK_PREFIX":       "lease",
		"ATTACK_WRITE":        strings.Join(s.writeTargets, ":"),
		"ATTACK_EXECUTOR_UID": strconv.Itoa(uid),
	}
	if s.ownUIDExpected() {
		env["ATTACK_OWN_UID_EXPECTED"] = "1"
	}
	return env
}

// ownUIDExpected: the stack's user has no subordinate ids, so its workers
// keep its uid (the executor says so at start).
func (s *attackSetup) ownUIDExpected() bool {
	return s.u != nil && s.u.Kind == asuser.Plain || s.u == nil && os.Geteuid() != 0 && !asuser.HasSubordinate()
}

// stacks are who the attack tests start the whole stack as: root (when
// the test is root), an ordinary user without subordinate ids and one
// with them (as root, users dropped to; as an ordinary user, itself).
func stacks(t *testing.T) map[string]func(t *testing.T) *asuser.User {
	out := map[string]func(t *testing.T) *asuser.User{}
	if os.Geteuid() != 0 {
		out["as this user"] = func(*testing.T) *asuser.User { return nil }
		return out
	}
	out["as root"] = func(*testing.T) *asuser.User { return nil }
	out["as a user without subordinate ids"] = func(t *testing.T) *asuser.User { return asuser.New(t, asuser.Plain, 42201, 0) }
	out["as a user with subordinate ids"] = func(t *testing.T) *asuser.User { return asuser.New(t, asuser.Subordinate, 42202, 4220000) }
	return out
}

// startManagerAs is startManager as u.
func startManagerAs(t *testing.T, u *asuser.User, env []string, httpAddr string) *proc {
	t.Helper()
	m := startAs(t, u, env, "leasemgr")
	eventually(t, 20*time.Second, "leasemgr to be ready", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return m
}

func buildAttacker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(openTempDir(t), "attacker") // the stack may run as an ordinary user
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

// Issue 13, point 3, and issue 29: worker code run by `executor run` with
// default flags holds nothing that changes a lease, whoever runs the
// stack. The attacker looks for credentials in its environment,
// descriptors, the files of HOME, the config dir, NATS_AUTH_DIR, the temp
// and store dirs, other processes' environ and root (the executor's and
// leasemgr's by pid, which it must not even see or signal), then connects
// to NATS anonymously and with anything it found and tries to purge its
// own lease record and publish a forged event; it tries to write outside
// its working directory (a file of the user's anyone may write, a file of
// root's, HOME, TMPDIR, /tmp), and says who it runs as (never root, never
// the executor's user but where the user has no subordinate ids). Every
// attempt must fail. As root, and as users without and with subordinate
// ids.
func TestWorkerCannotReachSecrets(t *testing.T) {
	t.Parallel()
	attacker := buildAttacker(t)
	for name, user := range stacks(t) {
		t.Run(name, func(t *testing.T) { workerAttack(t, user(t), attacker) })
	}
}

func workerAttack(t *testing.T, u *asuser.User, attacker string) {
	s := newAttackSetup(t, u)
	natsPort := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := s.env(natsPort, httpAddr)
	m := startManagerAs(t, u, env, httpAddr)

	// Control: the same program as a plain process of the user finds the
	// planted secrets and changes the files, so the checks below can
	// fail.
	pidFile := filepath.Join(t.TempDir(), "pids")
	if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", m.cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	var ctlEnv []string
	for k, v := range s.attackEnv(natsPort, pidFile) {
		ctlEnv = append(ctlEnv, k+"="+v)
	}
	ctl := exec.Command(attacker)
	ctl.Env = append([]string{"PATH=" + os.Getenv("PATH"), raceexit.Env()}, ctlEnv...)
	if u != nil {
		ctl = u.Command(ctlEnv, attacker)
	}
	ctlOut, _ := ctl.CombinedOutput()
	ctlFound := strings.Join(attackReport(t, string(ctlOut)), "\n")
	for _, h := range s.hidden {
		if !strings.Contains(ctlFound, "read hidden file "+h) {
			t.Errorf("control: a plain process could not read the planted file under %s; the test proves nothing:\n%s", h, ctlOut)
		}
	}
	for _, w := range []string{"write " + s.writeTargets[0], "create a file in " + s.home} {
		if !strings.Contains(ctlFound, w) {
			t.Errorf("control: a plain process could not %s; the test proves nothing:\n%s", w, ctlOut)
		}
	}

	args := []string{"run", "--pool", "gpu", "--dir", s.workdir}
	for k, v := range s.attackEnv(natsPort, filepath.Join(s.workdir, "pids")) {
		args = append(args, "--env", k+"="+v)
	}
	run := startAs(t, u, env, "executor", append(args, "--", attacker)...)
	pids := fmt.Sprintf("%d %d\n", run.cmd.Process.Pid, m.cmd.Process.Pid)
	tmp := filepath.Join(s.workdir, "pids.tmp")
	if err := os.WriteFile(tmp, []byte(pids), 0o644); err != nil {
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
	checkStartNote(t, s, out)
	checkAttack(t, out)
	if testing.Verbose() {
		t.Logf("attacker output:\n%s", out)
	}
}

// checkStartNote: the executor says at start that its workers keep its
// uid exactly where they do, and never warns that it cannot hide.
func checkStartNote(t *testing.T, s *attackSetup, out string) {
	t.Helper()
	if strings.Contains(out, "warning: workers can read") || strings.Contains(out, "cannot confine") {
		t.Errorf("the executor could not confine the worker:\n%s", out)
	}
	if note := strings.Contains(out, "workers run as this user"); note != s.ownUIDExpected() {
		t.Errorf("the executor's note that workers keep its uid: %v, want %v:\n%s", note, s.ownUIDExpected(), out)
	}
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

// The same attacker as a job under `executor serve` with default flags,
// whoever runs the stack. Its report goes to a directory its spec makes
// writable (mode 1777, so the worker's ids may write there).
func TestJobCannotReachSecrets(t *testing.T) {
	t.Parallel()
	attacker := buildAttacker(t)
	for name, user := range stacks(t) {
		t.Run(name, func(t *testing.T) { jobAttack(t, user(t), attacker) })
	}
}

func jobAttack(t *testing.T, u *asuser.User, attacker string) {
	s := newAttackSetup(t, u)
	natsPort := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := s.env(natsPort, httpAddr)
	m := startManagerAs(t, u, env, httpAddr)

	out := openTempDir(t)
	if err := os.Chmod(out, 0o1777); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(out, "report")
	args := []string{"submit", "--pool", "gpu", "--writable", out, "--env", "ATTACK_REPORT=" + report}
	for k, v := range s.attackEnv(natsPort, filepath.Join(out, "pids")) {
		args = append(args, "--env", k+"="+v)
	}
	if code := startAs(t, u, env, "executor", append(args, "--", attacker)...).Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("submit: exit %d", code)
	}
	serve := startAs(t, u, env, "executor", "serve", "--pools", "gpu")
	pids := fmt.Sprintf("%d %d\n", serve.cmd.Process.Pid, m.cmd.Process.Pid)
	if err := os.WriteFile(filepath.Join(out, "pids.tmp"), []byte(pids), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(out, "pids.tmp"), filepath.Join(out, "pids")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	eventually(t, 3*time.Minute, "the attacker job's report", func() bool {
		got, _ = os.ReadFile(report)
		return len(got) > 0
	})
	checkStartNote(t, s, serve.Output())
	checkAttack(t, string(got))
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	serve.Wait(t, 30*time.Second)
}

// Where the machine allows no namespace at all (here: uid 0 of a user
// namespace without capabilities, in which no further user namespace may
// be created), `executor run` and `executor serve` refuse to start, before
// asking for slots, naming the step that failed and the opt-out; with
// EXECUTOR_UNCONFINED=1 the executor says once which secret paths the
// worker can read, and runs it.
func TestExecutorRefusesWhereWorkersCannotBeConfined(t *testing.T) {
	t.Parallel()
	s := newAttackSetup(t, nil)
	natsPort := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := s.env(natsPort, httpAddr)
	startManager(t, env, httpAddr)

	exe := filepath.Join(binDir, "executor")
	script := `echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all "$@"`
	noNamespaces := func(extra []string, args ...string) (string, int) {
		cmd := exec.Command("unshare", append([]string{"-Ur", "sh", "-c", script, "sh", exe}, args...)...)
		cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH"), raceexit.Env()}, env...), extra...)
		outb, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("executor %s without namespaces: %v\n%s", args[0], err, outb)
		}
		return string(outb), cmd.ProcessState.ExitCode()
	}
	secret := filepath.Join(s.hidden[0], "planted", "planted-secret")
	for _, args := range [][]string{{"run", "--pool", "gpu", "--", "cat", secret}, {"serve", "--pools", "gpu"}} {
		out, code := noNamespaces(nil, args...)
		if code != 71 || !strings.Contains(out, "this machine cannot confine workers") || !strings.Contains(out, "EXECUTOR_UNCONFINED=1") ||
			!strings.Contains(out, "namespaces user+pid+mount+ipc:") {
			t.Fatalf("executor %s without namespaces: exit %d, want 71 with a refusal naming the step that failed and the opt-out:\n%s", args[0], code, out)
		}
		if strings.Contains(out, s.marker) || strings.Contains(out, "granted") || strings.Contains(out, "serving jobs") {
			t.Fatalf("executor %s without namespaces ran, or asked for slots, before refusing:\n%s", args[0], out)
		}
	}
	if out, code := noNamespaces([]string{"EXECUTOR_UNCONFINED=yes"}, "run", "--pool", "gpu", "--", "true"); code != 2 || !strings.Contains(out, `EXECUTOR_UNCONFINED="yes"`) {
		t.Fatalf("EXECUTOR_UNCONFINED=yes: exit %d, want 2 naming it:\n%s", code, out)
	}

	out, code := noNamespaces([]string{"EXECUTOR_UNCONFINED=1"}, "run", "--pool", "gpu", "--", "cat", secret)
	if code != 0 {
		t.Fatalf("executor run with EXECUTOR_UNCONFINED=1: exit %d\n%s", code, out)
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

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/test/asuser"
	"github.com/slotlease/slotlease/test/raceexit"
)

// holderScript holds mount namespaces (in user namespaces of its own: no
// capability needed) until none is left, submits a follow-up job that
// tries to read a secret, and keeps holding them until $OUT/release.
const holderScript = `i=0
while [ $i -lt 200 ] && unshare -U -m true 2>"$OUT/why-no-more"; do
	unshare -U -m sleep 600 &
	i=$((i + 1))
done
echo "$i" > "$OUT/held"
executor submit --pool gpu --max-attempts 20 --writable "$OUT" --env OUT="$OUT" --env SECRET="$SECRET" -- \
	sh -c 'cat "$SECRET" > "$OUT/leaked" 2>&1; echo ran > "$OUT/follow-up-ran"' > "$OUT/follow-up-id"
while [ ! -e "$OUT/release" ]; do sleep 0.1; done`

// Issue 29, point 3: the per-user namespace limits are shared by every
// process of the user, so a job can use them up to make its executor's
// next start fail. The follow-up job it submits is then refused — its
// attempts fail and are retried, it is never run unconfined — and once
// namespaces are free again it runs, confined. Shown with `executor serve`
// below a user namespace of its own (as an ordinary user) whose
// max_mnt_namespaces is lowered to 30 after its start-up check passed.
func TestJobsRefusedWhenNamespacesRunOut(t *testing.T) {
	t.Parallel()
	var u *asuser.User
	if os.Geteuid() == 0 {
		u = asuser.New(t, asuser.Plain, 42203, 0)
	}
	s := newAttackSetup(t, u)
	natsPort := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := append(s.env(natsPort, httpAddr), "POOL_CAPACITIES=gpu=2")
	startManagerAs(t, u, env, httpAddr)

	ns := newLimitedNS(t, u)
	serve := launch(t, ns.command(env, filepath.Join(binDir, "executor"),
		"serve", "--pools", "gpu", "--poll", "100ms", "--backoff", "200ms", "--max-backoff", "1s"))
	eventually(t, 30*time.Second, "executor serve to start", func() bool { return strings.Contains(serve.Output(), "serving jobs") })
	ns.lower(t, 30)

	out := sharedDir(t)
	secret := filepath.Join(s.hidden[0], "planted", "planted-secret")
	submit := command(u, env, filepath.Join(binDir, "executor"), "submit", "--pool", "gpu", "--max-attempts", "20", "--writable", out,
		"--env", "OUT="+out, "--env", "SECRET="+secret, "--", "sh", "-c", holderScript)
	if b, err := submit.CombinedOutput(); err != nil {
		t.Fatalf("submit: %v\n%s", err, b)
	}
	var followUp string
	eventually(t, 60*time.Second, "the job to hold the namespaces and submit its follow-up", func() bool {
		b, _ := os.ReadFile(filepath.Join(out, "follow-up-id"))
		followUp = strings.TrimSpace(string(b))
		return followUp != ""
	})
	held, _ := os.ReadFile(filepath.Join(out, "held"))
	why, _ := os.ReadFile(filepath.Join(out, "why-no-more"))
	t.Logf("the job holds %s mount namespaces, then: %s", strings.TrimSpace(string(held)), strings.TrimSpace(string(why)))

	q := jobQueue(t, env)
	ran := func() bool {
		_, err := os.Stat(filepath.Join(out, "follow-up-ran"))
		return err == nil
	}
	eventually(t, 30*time.Second, "an attempt of the follow-up to be refused (or to run)", func() bool {
		r := record(q, followUp)
		return ran() || r.Attempts >= 1 && strings.Contains(r.Error, "could not be isolated")
	})
	if ran() {
		leaked, _ := os.ReadFile(filepath.Join(out, "leaked"))
		t.Fatalf("the follow-up ran while no namespace could be had; it read: %q", leaked)
	}
	refused := record(q, followUp)
	t.Logf("follow-up after %d attempt(s): %s: %s", refused.Attempts, refused.State, refused.Error)

	// The holder ends, its namespaces with it: the follow-up's next
	// attempt runs, confined.
	if err := os.WriteFile(filepath.Join(out, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the follow-up to succeed", func() bool { return record(q, followUp).State == jobs.StateSucceeded })
	if b, err := os.ReadFile(filepath.Join(out, "follow-up-ran")); err != nil || strings.TrimSpace(string(b)) != "ran" {
		t.Fatalf("the follow-up succeeded but did not run: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "leaked")); strings.Contains(string(b), s.marker) {
		t.Fatalf("the follow-up read the secret: %s", b)
	}
}

// The same for `executor run`: its start-up check passed, then, while it
// waits for its slot, the namespaces run out: it exits 71 with a clear
// error, and the command never ran.
func TestExecutorRunRefusedWhenNamespacesRunOut(t *testing.T) {
	t.Parallel()
	var u *asuser.User
	if os.Geteuid() == 0 {
		u = asuser.New(t, asuser.Plain, 42204, 0)
	}
	s := newAttackSetup(t, u)
	natsPort := freePort(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := s.env(natsPort, httpAddr)
	startManagerAs(t, u, env, httpAddr)
	out := sharedDir(t)
	exe := filepath.Join(binDir, "executor")
	holder := launch(t, command(u, env, exe, "run", "--pool", "gpu", "--writable", out, "--env", "OUT="+out, "--",
		"sh", "-c", `while [ ! -e "$OUT/release" ]; do sleep 0.1; done`))
	eventually(t, 30*time.Second, "the holder's grant", func() bool { return strings.Contains(holder.Output(), "granted") })

	secret := filepath.Join(s.hidden[0], "planted", "planted-secret")
	ns := newLimitedNS(t, u)
	run := launch(t, ns.command(env, exe, "run", "--pool", "gpu", "--", "cat", secret))
	eventually(t, 30*time.Second, "the run to wait for its slot", func() bool { return strings.Contains(run.Output(), "position 1 in queue") })
	ns.lower(t, 0)
	if err := os.WriteFile(filepath.Join(out, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code := run.Wait(t, 60*time.Second)
	o := run.Output()
	if code != 71 || !strings.Contains(o, "could not be isolated") || !strings.Contains(o, "limit of namespaces") {
		t.Fatalf("executor run without namespaces left: exit %d, want 71 saying the worker could not be isolated for a namespace limit:\n%s", code, o)
	}
	if strings.Contains(o, s.marker) {
		t.Fatalf("the command ran and read the secret:\n%s", o)
	}
	if !strings.Contains(o, "granted") {
		t.Fatalf("the run was refused before it had its slot, so the test shows nothing about a run's attempt:\n%s", o)
	}
}

// limitedNS is where the executors of these tests run: a user namespace
// of the stack's user (B), below one of that user (A) that an anchor
// process holds and whose uid 0 is the user. A's namespace limits bind
// every namespace made below it, and the test lowers them from A's root;
// in B the executor is the user's own uid, not uid 0, which would give
// its workers no ids but 0 and so be refused (issue 38).
type limitedNS struct {
	u        *asuser.User
	anchor   string // pid of a process in A
	uid, gid int    // the stack's user's
}

func newLimitedNS(t *testing.T, u *asuser.User) *limitedNS {
	t.Helper()
	ns := &limitedNS{u: u, uid: os.Getuid(), gid: os.Getgid()}
	if u != nil {
		ns.uid, ns.gid = u.UID, u.GID
	}
	anchor := launch(t, command(u, nil, "unshare", "-U", "-r", "sleep", "3600"))
	ns.anchor = strconv.Itoa(anchor.cmd.Process.Pid)
	// The anchor has its namespace once it runs sleep: the wrapper,
	// setpriv and unshare exec it in turn.
	eventually(t, 20*time.Second, "the anchor's user namespace", func() bool {
		b, _ := os.ReadFile("/proc/" + ns.anchor + "/comm")
		return strings.TrimSpace(string(b)) == "sleep"
	})
	return ns
}

// command runs prog in a new namespace B below A, as the user's own ids.
func (ns *limitedNS) command(env []string, prog string, args ...string) *exec.Cmd {
	argv := []string{"-U", "--preserve-credentials", "-t", ns.anchor,
		"unshare", "-U", "--map-user=" + strconv.Itoa(ns.uid), "--map-group=" + strconv.Itoa(ns.gid), prog}
	return command(ns.u, env, "nsenter", append(argv, args...)...)
}

// lower sets A's max_mnt_namespaces to n.
func (ns *limitedNS) lower(t *testing.T, n int) {
	t.Helper()
	cmd := command(ns.u, nil, "nsenter", "-U", "--preserve-credentials", "-t", ns.anchor,
		"sh", "-c", fmt.Sprintf("echo %d > /proc/sys/user/max_mnt_namespaces", n))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("setting max_mnt_namespaces to %d above the executor: %v\n%s", n, err, out)
	}
}

// command runs prog as u (or as the test's user if u is nil) with env.
func command(u *asuser.User, env []string, prog string, args ...string) *exec.Cmd {
	if u != nil {
		return u.Command(env, prog, args...)
	}
	cmd := exec.Command(prog, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), raceexit.Env()}, env...)
	return cmd
}

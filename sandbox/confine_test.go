//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/test/asuser"
)

// asUserEnv marks a run of this test binary, as another user, of one test.
const asUserEnv = "SANDBOX_TEST_AS_USER"

// Users the tests drop to when they run as root: unused uids, and
// subordinate ids clear of every range the sandbox itself uses.
const (
	plainUID       = 42101
	subordinateUID = 42102
	subStart       = 4210000
)

// alsoAsUsers runs the test named name again, as an ordinary user without
// subordinate ids and as one with them, when this test process is root
// (not already such a run); an ordinary test process runs it as itself
// only.
func alsoAsUsers(t *testing.T, name string, env ...string) {
	if os.Getenv(asUserEnv) != "" || os.Geteuid() != 0 {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		name            string
		kind, uid, from int
	}{{"user without subordinate ids", asuser.Plain, plainUID, 0}, {"user with subordinate ids", asuser.Subordinate, subordinateUID, subStart}} {
		t.Run(k.name, func(t *testing.T) {
			u := asuser.New(t, k.kind, k.uid, k.from)
			cmd := u.Command(append([]string{asUserEnv + "=1"}, env...), u.Executable(t, exe), "-test.run", "^"+name+"$", "-test.v", "-test.count=1")
			out, err := cmd.CombinedOutput()
			switch {
			case err == nil && strings.Contains(string(out), "--- SKIP: "+name):
				t.Skipf("as uid %d:\n%s", u.UID, out)
			case err != nil || !strings.Contains(string(out), "--- PASS: "+name):
				t.Fatalf("as uid %d: %v\n%s", u.UID, err, out)
			}
			t.Logf("as uid %d:\n%s", u.UID, out)
		})
	}
}

// A confined worker runs as ids of its own where any can be had (root's
// range, or the user's subordinate ids; else, and said so, the user's
// own), in its own PID and IPC namespaces, and writes nothing but its
// working directory and its Writable path: not a file of the executor's
// user that anyone may write, not /tmp. What it made in its working
// directory is the executor's again after the run. As root, and as
// ordinary users with and without subordinate ids.
func TestConfinedWorker(t *testing.T) {
	alsoAsUsers(t, "TestConfinedWorker")
	c := requireConfine(t)
	victim := openDir(t)
	own := filepath.Join(victim, "executor-owned")
	if err := os.WriteFile(own, []byte("original"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(own, 0o666); err != nil { // past the umask: anyone may write it
		t.Fatal(err)
	}
	shared, work := openDir(t), openDir(t)
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	// The refused writes print nothing: a redirection's error goes to the
	// stderr of the command's group, and stderr comes through a pipe of
	// its own, so a line of it could land between the ids (it did, on a
	// loaded machine, and the gid read as 0).
	script := `id -u; id -g
echo x > ./made && echo wrote-workdir
mkdir sub && echo x > sub/f && chmod 700 sub
echo x > "$SHARED/made" && echo wrote-writable
{ echo evil > "$OWN"; } 2>/dev/null && echo WROTE-OWN
{ echo evil > /tmp/confine-test-$$; } 2>/dev/null && echo WROTE-TMP
mkdir "$VICTIM/new" 2>/dev/null && echo WROTE-VICTIM
[ -e /proc/$EXECUTOR/status ] && echo SEES-THE-EXECUTOR
echo "ipc $(readlink /proc/self/ns/ipc)"`
	res, out := runSh(t, Spec{Confine: true, Dir: work, Writable: []string{shared},
		Env: map[string]string{"SHARED": shared, "OWN": own, "VICTIM": victim, "EXECUTOR": strconv.Itoa(os.Getpid())}}, script)
	lines := strings.Split(out, "\n")
	uid, _ := strconv.Atoi(lines[0])
	gid, _ := strconv.Atoi(lines[1])
	if !res.Confined || res.Identity.UID != uid || res.Identity.GID != gid || res.Identity.Kind != c.Identity {
		t.Fatalf("the worker ran as %d:%d; Result says Confined=%v, %v; CheckConfine said %+v\n%s", uid, gid, res.Confined, res.Identity, c, out)
	}
	if c.Identity == IdentityExecutor {
		if uid != os.Geteuid() || c.Why == "" {
			t.Errorf("identity %q: the worker ran as uid %d, want the executor's %d, and a reason (%q)", c.Identity, uid, os.Geteuid(), c.Why)
		}
	} else if uid == os.Geteuid() || gid == os.Getegid() || uid == 0 || gid == 0 {
		t.Errorf("identity %q: the worker ran as %d:%d; want ids neither the executor's (%d:%d) nor root's", c.Identity, uid, gid, os.Geteuid(), os.Getegid())
	}
	for _, want := range []string{"wrote-workdir", "wrote-writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the worker's output:\n%s", want, out)
		}
	}
	if strings.Contains(out, "WROTE") || strings.Contains(out, "SEES") {
		t.Errorf("the worker wrote outside its working directory and writable path, or saw the executor:\n%s", out)
	}
	if data, _ := os.ReadFile(own); string(data) != "original" {
		t.Errorf("the executor's file holds %q", data)
	}
	if self, _ := os.Readlink("/proc/self/ns/ipc"); strings.Contains(out, "ipc "+self) {
		t.Errorf("the worker shares the executor's IPC namespace %s", self)
	}
	for _, f := range []string{"made", "sub", "sub/f"} {
		if st := ownerOf(t, filepath.Join(work, f)); st != [2]int{os.Geteuid(), os.Getegid()} {
			t.Errorf("%s in the working directory belongs to %v after the run, want the executor's %d:%d", f, st, os.Geteuid(), os.Getegid())
		}
	}
	if st := ownerOf(t, filepath.Join(shared, "made")); st != [2]int{uid, gid} {
		t.Errorf("the file the worker made in its writable path belongs to %v, want the worker's %d:%d (writable paths are not lent)", st, uid, gid)
	}
}

func ownerOf(t *testing.T, p string) [2]int {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return [2]int{int(st.Uid), int(st.Gid)}
}

// Confined and no-network runs never start without their namespaces: with
// none to be had, Run returns ErrNotIsolated and the command never ran,
// and CheckConfine says so.
func TestConfineFailsClosed(t *testing.T) {
	t.Setenv(plainEnvVar, "1")
	marker := filepath.Join(t.TempDir(), "ran")
	for _, spec := range []Spec{{Hide: []string{t.TempDir()}}, {Confine: true}, {NoNetwork: true}} {
		spec.Command = []string{"sh", "-c", "touch " + marker}
		if _, err := Run(context.Background(), spec, nil); !errors.Is(err, ErrNotIsolated) {
			t.Fatalf("confine=%v hide=%v no-network=%v without namespaces: err %v, want ErrNotIsolated", spec.Confine, spec.Hide, spec.NoNetwork, err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("confine=%v hide=%v no-network=%v: the command ran without its namespaces", spec.Confine, spec.Hide, spec.NoNetwork)
		}
	}
	if _, err := CheckConfine(); !errors.Is(err, ErrNotIsolated) {
		t.Fatalf("CheckConfine without namespaces: %v, want ErrNotIsolated", err)
	}
	// Isolate alone still falls back, and says so.
	res := mustRun(t, Spec{Command: []string{"true"}, Isolate: true})
	if res.Isolation != IsolationNone || !hasNote(res, "isolation requested") {
		t.Fatalf("Isolate without namespaces: Isolation=%q notes %q", res.Isolation, res.Notes)
	}
}

// exhaustEnv makes this test binary the inside of
// TestConfineRefusedWhenNamespacesRunOut: uid 4242 of a user namespace of
// its own that maps only that uid, with the capabilities it has there
// (unshare --keep-caps), so that it may lower that namespace's limits. Not
// uid 0: the only ids its workers could get there are its own, and a
// worker never runs as uid 0 (TestConfineRefusesRootOnlyNamespace).
const exhaustEnv = "SANDBOX_TEST_EXHAUST"

// A worker (or anything of the same user) can use up the per-user
// namespace limits, which every process of the user shares. Then the next
// confined run is refused, never run unhidden; once namespaces are free
// again, runs work. Shown in a user namespace of its own whose
// max_mnt_namespaces and max_pid_namespaces are lowered to 0 after the
// start-up check passed; as root and as an ordinary user.
func TestConfineRefusedWhenNamespacesRunOut(t *testing.T) {
	if os.Getenv(exhaustEnv) == "" {
		alsoAsUsers(t, "TestConfineRefusedWhenNamespacesRunOut")
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("unshare", "-U", "--map-user=4242", "--map-group=4242", "--keep-caps",
			exe, "-test.run", "^TestConfineRefusedWhenNamespacesRunOut$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), exhaustEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("in a user namespace of its own: %v\n%s", err, out)
		}
		return
	}
	requireConfine(t)
	dir := openDir(t)
	for _, limit := range []string{"max_mnt_namespaces", "max_pid_namespaces"} {
		file := "/proc/sys/user/" + limit
		old, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(dir, limit)
		spec := Spec{Hide: []string{t.TempDir()}, Writable: []string{dir}, Command: []string{"sh", "-c", "touch " + marker}}
		if err := os.WriteFile(file, []byte("0"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = Run(context.Background(), spec, nil)
		if rerr := os.WriteFile(file, old, 0o644); rerr != nil {
			t.Fatal(rerr)
		}
		if !errors.Is(err, ErrNotIsolated) {
			t.Fatalf("%s 0: err %v, want ErrNotIsolated", limit, err)
		}
		if _, serr := os.Stat(marker); serr == nil {
			t.Fatalf("%s 0: the command ran", limit)
		}
		t.Logf("%s 0: %v", limit, err)
		// The limit back: the same run works, so the limit refused it.
		if _, err := Run(context.Background(), spec, nil); err != nil {
			t.Fatalf("%s restored: %v", limit, err)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("%s restored: the command did not run: %v", limit, err)
		}
	}
}

// When the supervisor dies before it could give back what it lent the
// worker (killed with the worker's cgroup on an OOM, say), Run gives it
// back itself: a kept working directory is the executor's again.
func TestReclaimAfterTheSupervisorDied(t *testing.T) {
	alsoAsUsers(t, "TestReclaimAfterTheSupervisorDied")
	c := requireConfine(t)
	if c.Identity == IdentityExecutor {
		t.Skip("workers have the executor's own ids here: nothing is lent")
	}
	work := openDir(t)
	var out syncBuffer
	ch := runAsync(context.Background(), Spec{Hide: []string{t.TempDir()}, Dir: work, KillGrace: 100 * time.Millisecond, Stdout: &out, Stderr: &out,
		Command: []string{"sh", "-c", "touch made && mkdir sub && touch sub/f && chmod 700 sub && echo ready && exec sleep 300"}}, nil)
	if !waitFor(20*time.Second, func() bool { return strings.Contains(out.String(), "ready") }) {
		t.Fatalf("the worker did not get ready: %q", out.String())
	}
	sup := supervisorOf(os.Getpid())
	if sup == 0 {
		t.Fatal("no supervisor found among this process's children")
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o := <-ch
	if o.err != nil {
		t.Fatal(o.err)
	}
	if !hasNote(o.res, "the executor gave back what was lent") {
		t.Errorf("no note of the give-back: %q", o.res.Notes)
	}
	for _, f := range []string{"made", "sub", "sub/f"} {
		if st := ownerOf(t, filepath.Join(work, f)); st != [2]int{os.Geteuid(), os.Getegid()} {
			t.Errorf("%s belongs to %v after the run, want the executor's %d:%d", f, st, os.Geteuid(), os.Getegid())
		}
	}
}

// supervisorOf finds a sandbox supervisor among parent's children.
func supervisorOf(parent int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readProcStat(pid)
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if ok && st.ppid == parent && strings.HasPrefix(string(cmdline), initArgv0) {
			return pid
		}
	}
	return 0
}

// A writable path is taken only by its real name: one that leads
// elsewhere through a symlink (which a job could have made in its own
// writable directory, to have a follow-up write the user's files) is
// refused, and the command does not run.
func TestWritableThroughASymlinkRefused(t *testing.T) {
	requireConfine(t)
	shared, victim := openDir(t), openDir(t)
	link := filepath.Join(shared, "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(victim, "written")
	_, err := Run(context.Background(), Spec{Confine: true, Writable: []string{link}, Command: []string{"sh", "-c", "touch " + marker}}, nil)
	if err == nil || !strings.Contains(err.Error(), "through a symlink") {
		t.Fatalf("writable path through a symlink: err %v, want a refusal naming the symlink", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran")
	}
	// By its real name the same directory is writable.
	if err := os.Chmod(victim, 0o1777); err != nil {
		t.Fatal(err)
	}
	if res, out := runSh(t, Spec{Confine: true, Writable: []string{victim}}, "touch "+marker+" && echo wrote"); !strings.Contains(out, "wrote") {
		t.Fatalf("by its real name: %q, notes %q", out, res.Notes)
	}
}

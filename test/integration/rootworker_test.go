package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slotlease/slotlease/test/raceexit"
)

// Issue 38: a worker never runs as uid 0 or gid 0, whatever the
// namespace maps. Where the executor's user namespace maps only uid 0 (a
// container whose uid_map is "0 0 1", an executor whose only mappable id
// is 0; here `unshare -r`), its workers could have no other id, so
// `executor run` and `executor serve` refuse at start, exit 71, naming
// what is missing, though namespaces work there; EXECUTOR_UNCONFINED=1
// changes nothing (an unconfined worker would keep uid 0). The stack runs
// as root (uid_map "0 0 1") and as ordinary users without and with
// subordinate ids (uid 0 of their namespace is theirs).
func TestExecutorRefusesWorkersAsRoot(t *testing.T) {
	t.Parallel()
	for name, who := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			u := who(t)
			s := newAttackSetup(t, u)
			natsPort := freePort(t)
			httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			env := s.env(natsPort, httpAddr)
			startManagerAs(t, u, env, httpAddr)
			exe := filepath.Join(binDir, "executor")
			secret := filepath.Join(s.hidden[0], "planted", "planted-secret")
			for _, extra := range []string{"EXECUTOR_UNCONFINED=0", "EXECUTOR_UNCONFINED=1"} {
				for _, args := range [][]string{{"run", "--pool", "gpu", "--", "cat", secret}, {"serve", "--pools", "gpu"}} {
					cmd := command(u, append(env[:len(env):len(env)], extra), "unshare", append([]string{"-U", "-r", exe}, args...)...)
					out := refusal(t, cmd)
					for _, want := range []string{"a worker never runs as uid 0 or gid 0", "the executor runs as uid 0", "maps no ids but the executor's own", "uid_map", "nothing was run"} {
						if !strings.Contains(out, want) {
							t.Errorf("executor %s (%s) in a namespace mapping only uid 0: no %q in:\n%s", args[0], extra, want, out)
						}
					}
					if strings.Contains(out, s.marker) || strings.Contains(out, "granted") || strings.Contains(out, "serving jobs") {
						t.Fatalf("executor %s (%s) ran, or asked for slots, before refusing:\n%s", args[0], extra, out)
					}
				}
			}
		})
	}
}

// The same for gid 0, on the host's own namespace: an executor of an
// ordinary uid whose gid is 0, or that is in group 0, without
// subordinate ids, would give its workers that group (a worker without
// ids of its own keeps the executor's groups). Root drops to such ids
// with setpriv; an ordinary test user cannot, so the case is root's.
func TestExecutorRefusesWorkersWithGroupZero(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("an ordinary user cannot take gid 0: sandbox's TestWorkerIDChoice covers the choice")
	}
	const uid = "42207" // unused, no entry in the user database, no subordinate ids
	home := openTempDir(t)
	exe := filepath.Join(binDir, "executor")
	for _, c := range []struct{ name, says string }{
		{"--regid=0", "runs with gid 0"},
		{"--groups=0", "is in group 0"},
	} {
		ids := []string{"--reuid=" + uid, "--regid=" + uid, "--clear-groups"}
		if c.name == "--regid=0" {
			ids[1] = "--regid=0"
		} else {
			ids[2] = "--groups=0"
		}
		cmd := exec.Command("setpriv", append(ids, exe, "run", "--pool", "gpu", "--", "true")...)
		// No credentials to find (the executor refuses before it
		// connects): HOME is no one's.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), raceexit.Env(), "HOME=" + home, "NATS_AUTH_DIR=" + filepath.Join(home, "none"), "NATS_LISTEN=127.0.0.1:1"}
		out := refusal(t, cmd)
		if !strings.Contains(out, "a worker never runs as uid 0 or gid 0") || !strings.Contains(out, c.says) {
			t.Errorf("executor run as uid %s %s: want a refusal saying %q:\n%s", uid, c.name, c.says, out)
		}
	}
}

// refusal runs cmd, which must exit 71, and returns its output.
func refusal(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	outb, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, outb)
	}
	if code := cmd.ProcessState.ExitCode(); code != 71 {
		t.Fatalf("%s: exit %d, want 71 (workers cannot be confined):\n%s", strings.Join(cmd.Args, " "), code, outb)
	}
	return string(outb)
}

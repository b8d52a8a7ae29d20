//go:build linux

package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuGroupsHere reports whether this host lets the executor give the
// worker a cgroup v1 cpu group of its own (a v1 or hybrid host, as root),
// and if not, why.
func cpuGroupsHere() (bool, string) {
	g := newCPUGroup(cgroupName())
	if g == nil {
		_, err := cgroupV1Self("cpu")
		if err == nil {
			return false, "the cgroup v1 cpu hierarchy cannot be written here (not root?)"
		}
		return false, err.Error()
	}
	_ = g.remove()
	return true, ""
}

// TestWorkerHasItsOwnCPUGroup: where the host allows it, the worker's
// tree runs in a cpu cgroup of its own below the executor's, and its
// supervisor stays in the executor's, with namespaces or without; the
// group is gone after the run.
func TestWorkerHasItsOwnCPUGroup(t *testing.T) {
	if ok, why := cpuGroupsHere(); !ok {
		t.Skipf("no cpu group for the worker on this host: %s", why)
	}
	dir, err := cgroupV1Self("cpu")
	if err != nil {
		t.Fatal(err)
	}
	const cpuLine = `s/^[0-9]*:\([^:]*,\)*cpu\(,[^:]*\)*://p` // the cpu hierarchy's line of /proc/*/cgroup
	mine, err := exec.Command("sed", "-n", cpuLine, "/proc/self/cgroup").Output()
	if err != nil {
		t.Fatal(err)
	}
	executor := path.Clean(strings.TrimSpace(string(mine))) // sed's parent is this test: its group
	for _, isolate := range []bool{false, true} {
		// The worker reads its own cpu group and its supervisor's (its
		// parent; in a PID namespace, PID 1).
		var out syncBuffer
		res := mustRun(t, Spec{
			Command: []string{"sh", "-c", `sed -n '` + cpuLine + `' /proc/self/cgroup /proc/$PPID/cgroup`},
			Isolate: isolate,
			Stdout:  &out,
		})
		groups := strings.Fields(out.String())
		if res.ExitCode != 0 || len(groups) != 2 {
			t.Fatalf("isolate=%t: exit %d, want two cpu cgroups, read %q; notes %q", isolate, res.ExitCode, out.String(), res.Notes)
		}
		worker, supervisor := path.Clean(groups[0]), path.Clean(groups[1])
		if path.Dir(worker) != executor || !strings.HasPrefix(path.Base(worker), cgroupPrefix) {
			t.Errorf("isolate=%t: the worker's cpu cgroup is %q, want one of its own below the executor's %q", isolate, worker, executor)
		} else if left := filepath.Join(dir, path.Base(worker)); dirExists(left) {
			t.Errorf("isolate=%t: the worker's cpu cgroup %s is left after the run", isolate, left)
		}
		if supervisor != executor {
			t.Errorf("isolate=%t: the supervisor's cpu cgroup is %q, want the executor's %q", isolate, supervisor, executor)
		}
	}
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// TestKillMembersKillsWhatTheGroupLists: the supervisor's kill by a
// cgroup's list (a cpu group of the tree's own, or the run's cgroup v2
// cgroup) SIGKILLs every process the group holds, whatever its process
// group or session, and reads the list from a descriptor alone.
func TestKillMembersKillsWhatTheGroupLists(t *testing.T) {
	kinds := 0
	if g := newCPUGroup(cgroupName()); g != nil {
		kinds++
		t.Run("cgroup v1 cpu group", func(t *testing.T) {
			defer g.remove()
			killListed(t, g.procs, func(pid int) error {
				return writeFile(filepath.Join(g.dir, "cgroup.procs"), strconv.Itoa(pid))
			})
		})
	}
	if cg, notes := newCgroup(0, 0); cg != nil {
		kinds++
		t.Run("cgroup v2", func(t *testing.T) {
			defer cg.remove()
			f, err := os.Open(filepath.Join(cg.path, "cgroup.procs"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			killListed(t, f, func(pid int) error {
				return writeFile(filepath.Join(cg.path, "cgroup.procs"), strconv.Itoa(pid))
			})
		})
	} else {
		t.Logf("no cgroup v2 cgroup here: %q", notes)
	}
	if kinds == 0 {
		t.Skip("no cgroup the executor may make here (not root?)")
	}
}

// killListed puts three sleeps (one of them setsid) into a group with
// enter, kills what procs lists, and checks each died of SIGKILL.
func killListed(t *testing.T, procs *os.File, enter func(pid int) error) {
	var cmds []*exec.Cmd
	for i, setsid := range []bool{false, false, true} {
		c := exec.Command("sleep", marker())
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		if err := enter(c.Process.Pid); err != nil {
			t.Fatalf("sleep %d: cannot enter the group: %v", i, err)
		}
		cmds = append(cmds, c)
	}
	if !killMembers(int(procs.Fd())) {
		t.Fatal("killMembers could not read the group's list")
	}
	for i, c := range cmds {
		dead := func() bool {
			st, ok := readProcStat(c.Process.Pid)
			return !ok || st.state == 'Z' || killPending(c.Process.Pid)
		}
		if !waitFor(10*time.Second, dead) {
			t.Errorf("sleep %d: not killed", i)
			continue
		}
		err := c.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("sleep %d: ended with %v, want killed by SIGKILL", i, err)
		}
	}
}

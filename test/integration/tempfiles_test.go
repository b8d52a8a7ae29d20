package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/sandbox"
)

// tempEntries lists the entries of dir whose names start with prefix.
func tempEntries(t *testing.T, dir, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// A crashed executor leaves its temporary directories (the worker's
// working directory; a served job's command channel, with its socket)
// behind, and the next run of the user removes them (issue 31).
func TestCrashLeavesNoTempFiles(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "tmpfiles", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	tmp := openTempDir(t) // the worker, with ids of its own, enters its working directory in it
	env = append(env, "TMPDIR="+tmp)

	t.Run("run", func(t *testing.T) {
		run := start(t, env, "executor", "run", "--pool", "gpu", "--", "sleep", "60")
		eventually(t, 20*time.Second, "the run's working directory", func() bool {
			return strings.Contains(run.Output(), "granted") && len(tempEntries(t, tmp, sandbox.TempWorkdir)) == 1
		})
		left := tempEntries(t, tmp, sandbox.TempWorkdir)[0]
		_ = run.cmd.Process.Signal(syscall.SIGKILL)
		run.Wait(t, 10*time.Second)
		if _, err := os.Stat(filepath.Join(tmp, left)); err != nil {
			t.Fatalf("the killed executor's working directory is gone before any next run (%v): the test shows nothing", err)
		}
		if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--", "true"); code != 0 {
			t.Fatalf("the next run: exit %d\n%s", code, out)
		}
		if got := tempEntries(t, tmp, sandbox.TempWorkdir); len(got) != 0 {
			t.Errorf("after the next run, %s still holds %q", tmp, got)
		}
	})

	t.Run("serve", func(t *testing.T) {
		if code, out := runExecutor(t, env, "submit", "--pool", "gpu", "--max-attempts", "1", "--", "sleep", "60"); code != 0 {
			t.Fatalf("submit: exit %d\n%s", code, out)
		}
		serve := start(t, env, "executor", "serve", "--pools", "gpu")
		// The directory comes first, its socket a moment after.
		var left string
		eventually(t, 30*time.Second, "the job's command channel and its socket", func() bool {
			got := tempEntries(t, tmp, sandbox.TempJob)
			if len(got) != 1 {
				return false
			}
			left = got[0]
			_, err := os.Stat(filepath.Join(tmp, left, "submit.sock"))
			return err == nil
		})
		_ = serve.cmd.Process.Signal(syscall.SIGKILL)
		serve.Wait(t, 10*time.Second)
		if _, err := os.Stat(filepath.Join(tmp, left)); err != nil {
			t.Fatalf("the killed executor's command channel is gone before any next serve (%v): the test shows nothing", err)
		}
		next := start(t, env, "executor", "serve", "--pools", "gpu", "--grace", "1s")
		eventually(t, 20*time.Second, "the next serve to remove the dead one's command channel", func() bool {
			_, err := os.Stat(filepath.Join(tmp, left))
			return os.IsNotExist(err)
		})
		_ = next.cmd.Process.Signal(syscall.SIGTERM)
		next.Wait(t, 30*time.Second)
		if got := tempEntries(t, tmp, "slotlease-"); len(got) != 0 {
			t.Errorf("after the serve stopped, %s still holds %q", tmp, got)
		}
	})
}

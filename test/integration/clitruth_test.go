package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The waiting executor says its queue position when it changes, not at
// every poll (every 5s) while nothing does (issue 31).
func TestWaitingLineOnlyWhenItChanges(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "waitline", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	holder := start(t, env, "executor", "run", "--pool", "gpu", "--", "sleep", "12")
	eventually(t, 20*time.Second, "the holder's grant", func() bool { return strings.Contains(holder.Output(), "granted") })
	waiter := start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
	// The holder holds the slot for 12s: the waiter polls at least twice
	// more before its grant, each answered "queued, position 1".
	if code := waiter.Wait(t, 60*time.Second); code != 0 {
		t.Fatalf("waiter: exit %d\n%s", code, waiter.Output())
	}
	if n := strings.Count(waiter.Output(), "position 1 in queue"); n != 1 {
		t.Errorf("the waiter said its unchanged position %d times, want once:\n%s", n, waiter.Output())
	}
}

// The holder of a pool removed with resize --force is told its pool was
// removed, and exits 76 (issue 31).
func TestForceRemovedPoolsHolderIsTold(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "forced", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	holder := start(t, env, "executor", "run", "--pool", "gpu", "--", "sleep", "60")
	eventually(t, 20*time.Second, "the holder's grant", func() bool { return strings.Contains(holder.Output(), "granted") })
	if code, out := runManagerCmd(t, env, "resize", "--remove", "gpu", "--force"); code != 0 {
		t.Fatalf("resize --remove gpu --force: exit %d\n%s", code, out)
	}
	if code := holder.Wait(t, 30*time.Second); code != 76 || !strings.Contains(holder.Output(), `pool "gpu" was removed from node forced`) {
		t.Fatalf("the holder exited %d, want 76 saying its pool was removed:\n%s", code, holder.Output())
	}
}

// Inside a job, the commands that need a NATS connection of their own say
// that only submit works there, instead of dialling the default address
// and asking whether leasemgr runs (issue 31).
func TestInJobCommandsSayOnlySubmitWorks(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "injob", "p=1", "15s")
	startManager(t, env, httpAddr)
	out := sharedDir(t)
	const script = `for c in "status x" "jobs" "cancel x" "wait x" "purge --pool p --confirm" "run -- true"; do
	executor $c > "$OUT/$(echo $c | cut -d' ' -f1)" 2>&1
	echo "exit $?" >> "$OUT/$(echo $c | cut -d' ' -f1)"
done
touch "$OUT/done"`
	if code, o := runExecutor(t, env, "submit", "--pool", "p", "--writable", out, "--env", "OUT="+out, "--", "sh", "-c", script); code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, o)
	}
	start(t, env, "executor", "serve", "--pools", "p")
	eventually(t, 60*time.Second, "the job to end", func() bool {
		_, err := os.Stat(filepath.Join(out, "done"))
		return err == nil
	})
	for _, c := range []string{"status", "jobs", "cancel", "wait", "purge", "run"} {
		b, err := os.ReadFile(filepath.Join(out, c))
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); !strings.Contains(s, "inside a job only `executor submit` works") || !strings.Contains(s, "exit 2") || strings.Contains(s, "is leasemgr running") {
			t.Errorf("executor %s inside a job said:\n%s", c, s)
		}
	}
}

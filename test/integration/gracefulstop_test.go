package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
)

// exitTimeout is executor run's exit code for a command stopped at
// --timeout.
const exitTimeout = 124

// termHandler starts, and on SIGTERM takes 2s to clean up, then says so
// (stdout, and $DIR/cleaned.$NAME) and exits 0.
const termHandler = `trap 'sleep 2; echo cleaned; touch "$DIR/cleaned.$NAME"; exit 0' TERM
touch "$DIR/started.$NAME"; while :; do sleep 0.05; done`

// withinGrace checks that out, an executor's report, says the command was
// stopped and was gone within its 4s kill grace, and that nothing killed
// it early.
func withinGrace(t *testing.T, what, out string) {
	t.Helper()
	if !strings.Contains(out, "within its 4s kill grace") || strings.Contains(out, "lease deadline passed") || strings.Contains(out, "was killed") {
		t.Fatalf("%s: want the command gone within its 4s kill grace, nothing killed:\n%s", what, out)
	}
}

// Every graceful stop gives the command its whole kill grace, in the
// default layout (fast release on): --timeout with --kill-grace, SIGTERM
// to `executor run`, `executor cancel` of a job, and the end of `executor
// serve --grace`. The command's TERM handler takes 2s and must finish;
// the executor's notes say it was gone within its grace.
func TestGracefulStopsHonourTheirGrace(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "grace", "gpu=2,cpu=1", "15s")
	startManager(t, env, httpAddr)
	dir := sharedDir(t)
	started := func(name string) func() bool {
		return func() bool { return exists(filepath.Join(dir, "started."+name)) }
	}
	cleaned := func(name string) bool { return exists(filepath.Join(dir, "cleaned."+name)) }

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		// The timeout must not come before the shell has installed its
		// trap: 1s did, on a machine running two copies of the suite
		// (load 16 on 2 cores), and the shell died of the SIGTERM.
		p := start(t, env, "executor", "run", "--pool", "gpu", "--timeout", "5s", "--kill-grace", "4s",
			"--writable", dir, "--env", "DIR="+dir, "--env", "NAME=timeout", "--", "sh", "-c", termHandler)
		if code := p.Wait(t, 30*time.Second); code != exitTimeout || !cleaned("timeout") {
			t.Fatalf("exit %d, cleaned %v; want %d after the handler finished:\n%s", code, cleaned("timeout"), exitTimeout, p.Output())
		}
		withinGrace(t, "--timeout 5s --kill-grace 4s", p.Output())
	})

	t.Run("sigterm", func(t *testing.T) {
		t.Parallel()
		p := start(t, env, "executor", "run", "--pool", "gpu", "--kill-grace", "4s",
			"--writable", dir, "--env", "DIR="+dir, "--env", "NAME=sigterm", "--", "sh", "-c", termHandler)
		eventually(t, 30*time.Second, "the command to start", started("sigterm"))
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.Wait(t, 30*time.Second)
		if !cleaned("sigterm") {
			t.Fatalf("the handler did not finish after SIGTERM to executor run:\n%s", p.Output())
		}
		withinGrace(t, "SIGTERM to executor run --kill-grace 4s", p.Output())
	})

	t.Run("serve", func(t *testing.T) {
		// cancel, then the end of --grace, one job at a time (cpu=1).
		submit := func(name string) string {
			code, out := runExecutor(t, env, "submit", "--pool", "cpu", "--max-attempts", "1", "--writable", dir, "--env", "DIR="+dir, "--env", "NAME="+name, "--", "sh", "-c", termHandler)
			if code != 0 {
				t.Fatalf("submit: exit %d\n%s", code, out)
			}
			return strings.TrimSpace(out)
		}
		serve := start(t, env, "executor", "serve", "--pools", "cpu", "--grace", "1s", "--kill-grace", "4s")
		q := jobQueue(t, env)

		id := submit("cancel")
		eventually(t, 30*time.Second, "the job to start", started("cancel"))
		if code, out := runExecutor(t, env, "cancel", id); code != 0 {
			t.Fatalf("cancel: exit %d\n%s", code, out)
		}
		eventually(t, 30*time.Second, "the job to be cancelled", func() bool { return record(q, id).State == jobs.StateCancelled })
		rec := record(q, id)
		if !cleaned("cancel") || !strings.Contains(rec.StdoutTail, "cleaned") {
			t.Fatalf("the cancelled job's handler did not finish: %+v", rec)
		}
		withinGrace(t, "executor cancel with --kill-grace 4s", strings.Join(rec.Notes, "\n"))

		submit("grace")
		eventually(t, 30*time.Second, "the second job to start", started("grace"))
		if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := serve.Wait(t, 30*time.Second); code != 0 {
			t.Fatalf("serve exit %d:\n%s", code, serve.Output())
		}
		if !cleaned("grace") {
			t.Fatalf("the job stopped at the end of serve's --grace did not finish its handler:\n%s", serve.Output())
		}
		withinGrace(t, "the end of executor serve --grace 1s with --kill-grace 4s", serve.Output())
	})
	if t.Failed() {
		out, _ := os.ReadDir(dir)
		t.Logf("markers: %v", out)
	}
}

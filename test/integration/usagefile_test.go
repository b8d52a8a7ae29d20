package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/test/asuser"
)

// Issue 42: `executor run --units N` reserves N units of a budget pool and
// settles what the command wrote to $LEASE_USAGE_FILE, else the estimate,
// saying why. The file is the worker's, so hostile: a symlink is not
// followed, a FIFO does not block the executor, more than 64 bytes or
// anything but a decimal are refused, and the content is never echoed. It
// lies in a directory of mode 0700 that the worker's own identity owns
// while it runs: nobody else can write there. As root (the worker gets
// ids of its own) and as an ordinary user (the worker keeps its uid).
func TestExecutorSettlesTheUsageFile(t *testing.T) {
	t.Parallel()
	asEachUser(t, 42242, "usage", "llm=4", func(t *testing.T, u *asuser.User, env []string, httpAddr string) {
		env = append(env, "POOL_BUDGETS=llm=100000/h")
		startManagerAs(t, u, env, httpAddr)
		run := func(script string) string {
			t.Helper()
			p := startAs(t, u, env, "executor", "run", "--pool", "llm", "--units", "500", "--", "sh", "-c", script)
			if code := p.Wait(t, 2*time.Minute); code != 0 {
				t.Fatalf("executor run -- sh -c %q: exit %d:\n%s", script, code, p.Output())
			}
			return p.Output()
		}
		var spent int64
		settles := func(out string, units int64, why string) {
			t.Helper()
			if !strings.Contains(out, why) {
				t.Errorf("no %q in:\n%s", why, out)
			}
			spent += units
			eventually(t, 30*time.Second, "the budget to count "+strconv.FormatInt(spent, 10)+" units spent", func() bool {
				s := httpPools(t, httpAddr)["llm"]
				return s.BudgetUsed == spent && s.BudgetReserved == 0
			})
		}

		out := run(`echo "dir $(stat -c '%a %u' "$(dirname "$LEASE_USAGE_FILE")") me $(id -u)"; echo 120 > "$LEASE_USAGE_FILE"`)
		settles(out, 120, "settling 120 units (estimated 500)")
		var mode, owner, me string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == "dir" && f[3] == "me" {
				mode, owner, me = f[1], f[2], f[4]
			}
		}
		if mode != "700" || owner != me || me == "" {
			t.Errorf("the usage file's directory: mode %q owner %q, the worker is %q; want 700, the worker's own", mode, owner, me)
		}
		const estimate = "settling the estimate, 500 units"
		settles(run(`true`), 500, "the command wrote no usage file; "+estimate)
		settles(run(`printf 'twelve' > "$LEASE_USAGE_FILE"`), 500, "the usage file does not hold a decimal integer from 0 to 1099511627776; "+estimate)
		settles(run(`echo -5 > "$LEASE_USAGE_FILE"`), 500, "does not hold a decimal integer")
		settles(run(`echo 0x10 > "$LEASE_USAGE_FILE"`), 500, "does not hold a decimal integer")
		settles(run(`head -c 100 /dev/zero | tr '\0' 1 > "$LEASE_USAGE_FILE"`), 500, "the usage file holds more than 64 bytes; "+estimate)
		settles(run(`echo 7 > "$HOME/u"; ln -s "$HOME/u" "$LEASE_USAGE_FILE"`), 500, "the usage file could not be opened (not a regular file?); "+estimate)
		settles(run(`mkfifo "$LEASE_USAGE_FILE"`), 500, "the usage file is not a regular file of one link; "+estimate)
		settles(run(`echo 0 > "$LEASE_USAGE_FILE"`), 0, "settling 0 units (estimated 500)")
		if out := run(`printf 'secret-%s' 42 > "$LEASE_USAGE_FILE"`); strings.Contains(out, "secret-42") {
			t.Errorf("the executor echoed the usage file's content:\n%s", out)
		}
		spent += 500
	})
}

// The same for jobs: `executor submit --units N` stores the estimate, and
// each attempt under `executor serve` reserves it and settles what its
// command wrote to $LEASE_USAGE_FILE, else the estimate.
func TestJobSettlesItsUsageFile(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "jobusage", "llm=2", "15s")
	env = append(env, "POOL_BUDGETS=llm=100000/h")
	startManager(t, env, httpAddr)
	if code, out := runExecutor(t, env, "submit", "--pool", "llm", "--units", "-1", "--", "true"); code != 2 || !strings.Contains(out, "--units -1: must be an integer from 1 to 1099511627776") {
		t.Fatalf("submit --units -1: exit %d, want 2 naming --units:\n%s", code, out)
	}
	var ids []string
	for _, script := range []string{`echo 70 > "$LEASE_USAGE_FILE"`, `true`} {
		code, out := runExecutor(t, env, "submit", "--pool", "llm", "--units", "300", "--", "sh", "-c", script)
		if code != 0 {
			t.Fatalf("submit --units 300: exit %d:\n%s", code, out)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	q := jobQueue(t, env)
	if u := record(q, ids[0]).Spec.Units; u != 300 {
		t.Fatalf("the stored job has units %d, want 300", u)
	}
	serve := start(t, env, "executor", "serve", "--pools", "llm")
	eventually(t, 60*time.Second, "both jobs to succeed", func() bool {
		return record(q, ids[0]).State == jobs.StateSucceeded && record(q, ids[1]).State == jobs.StateSucceeded
	})
	eventually(t, 30*time.Second, "70 + 300 units spent", func() bool {
		s := httpPools(t, httpAddr)["llm"]
		return s.BudgetUsed == 370 && s.BudgetReserved == 0
	})
	for _, want := range []string{"settling 70 units (estimated 300)", "the command wrote no usage file; settling the estimate, 300 units"} {
		eventually(t, 10*time.Second, "serve to log "+want, func() bool { return strings.Contains(serve.Output(), want) })
	}
}

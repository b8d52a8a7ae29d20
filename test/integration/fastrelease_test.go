package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// queuedIn is the number of requests queued in pool.
func queuedIn(t *testing.T, httpAddr, pool string) int {
	return httpPools(t, httpAddr)[pool].QueuedRequests
}

// With the default LEASE_TTL of 15s, the slot of an executor killed while
// holding it goes to the next waiter in about the disconnect grace (0.8s),
// for `executor run` and for a job under `executor serve` (issue 15, fast
// release); the worker tree is dead before that (containment, 500ms).
func TestKilledHoldersSlotComesBackFast(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "fastrel", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	holders := map[string]func(m [4]string) *proc{
		"run": func(m [4]string) *proc {
			return start(t, env, "executor", "run", "--pool", "gpu", "--", "sh", "-c", escapingTree(m))
		},
		"serve": func(m [4]string) *proc {
			if code, out := runExecutor(t, env, "submit", "--pool", "gpu", "--max-attempts", "1", "--", "sh", "-c", escapingTree(m)); code != 0 {
				t.Fatalf("submit: exit %d\n%s", code, out)
			}
			return start(t, env, "executor", "serve", "--pools", "gpu")
		},
	}
	for _, kind := range []string{"run", "serve"} {
		t.Run(kind, func(t *testing.T) {
			m := treeMarkers()
			holder := holders[kind](m)
			eventually(t, 30*time.Second, "the holder's worker to run", func() bool { return len(treeProcs(m)) >= 4 })
			waiter := start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
			eventually(t, 10*time.Second, "the waiter to queue", func() bool {
				return queuedIn(t, httpAddr, "gpu") == 1
			})
			if err := holder.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			if code := waiter.Wait(t, 7*time.Second); code != 0 {
				t.Fatalf("waiter exit %d:\n%s", code, waiter.Output())
			}
			t.Logf("killed %s holder's slot granted and used by the next executor %v after the SIGKILL (LEASE_TTL 15s)", kind, time.Since(killed).Round(time.Millisecond))
			if left := treeProcs(m); len(left) != 0 {
				t.Fatalf("the killed holder's worker outlived the regrant: %v", left)
			}
		})
	}
}

// An executor killed while its request is queued leaves the queue in about
// the disconnect grace: the request behind it is not held up for it.
func TestKilledQueuedExecutorLeavesTheQueue(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "fastq", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	m := treeMarkers()
	start(t, env, "executor", "run", "--pool", "gpu", "--", "sleep", m[0])
	eventually(t, 30*time.Second, "the holder's worker to run", func() bool { return len(treeProcs(m)) == 1 })
	queued := start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
	eventually(t, 10*time.Second, "the first waiter to queue", func() bool { return queuedIn(t, httpAddr, "gpu") == 1 })
	start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
	eventually(t, 10*time.Second, "the second waiter to queue", func() bool { return queuedIn(t, httpAddr, "gpu") == 2 })
	killQueued(t, queued, httpAddr, "executor")
}

// killQueued SIGKILLs p, whose request is one of two queued in pool gpu
// with LEASE_TTL 15s, and waits for the request to leave the queue.
func killQueued(t *testing.T, p *proc, httpAddr, who string) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	eventually(t, 5*time.Second, "the killed "+who+"'s request to leave the queue", func() bool {
		return queuedIn(t, httpAddr, "gpu") == 1
	})
	t.Logf("a killed queued %s's request left the queue %v after the SIGKILL", who, time.Since(killed).Round(time.Millisecond))
}

// An executor frozen while it holds a slot (SIGSTOP: it can do nothing, and
// its connection stays open, so no fast release) cannot stop its worker.
// The sandbox's supervisor does, at the lease deadline the executor last
// told it, before the manager can give the slot to anyone else (the TTL
// path): work never outlives its lease. With and without namespaces and
// cgroups.
func TestFrozenExecutorsWorkDiesByItsDeadline(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "frozen", "gpu=1", "3s")
	env = append(env, "LEADER_TTL=1s") // LEASE_TTL must be longer (config refuses it otherwise)
	startManager(t, env, httpAddr)
	for _, mode := range sandboxModes {
		t.Run(mode.name, func(t *testing.T) {
			m := treeMarkers()
			holder := start(t, append(append([]string{}, env...), mode.env...), "executor", "run", "--pool", "gpu", "--", "sh", "-c", escapingTree(m))
			eventually(t, 30*time.Second, "the holder's worker to run", func() bool { return len(treeProcs(m)) >= 4 })
			waiter := start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
			eventually(t, 10*time.Second, "the waiter to queue", func() bool { return queuedIn(t, httpAddr, "gpu") == 1 })
			if err := syscall.Kill(holder.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			frozen := time.Now()
			t.Cleanup(func() { _ = syscall.Kill(holder.cmd.Process.Pid, syscall.SIGCONT) })
			eventually(t, 5*time.Second, "the frozen executor's worker to die", func() bool { return len(treeProcs(m)) == 0 })
			dead := time.Since(frozen)
			if code := waiter.Wait(t, 15*time.Second); code != 0 {
				t.Fatalf("waiter exit %d:\n%s", code, waiter.Output())
			}
			granted := time.Since(frozen)
			t.Logf("worker of the frozen executor dead %v after SIGSTOP; the next executor done %v after it (TTL 3s)", dead.Round(time.Millisecond), granted.Round(time.Millisecond))
			if dead >= granted {
				t.Fatalf("the worker died %v after the freeze, not before the next holder ran (%v)", dead, granted)
			}
			if err := syscall.Kill(holder.cmd.Process.Pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			// The documented exit code of a lost lease, not 137: the
			// supervisor killed the tree at the deadline while the
			// executor was frozen, and the executor says why.
			if code := holder.Wait(t, 20*time.Second); code != 76 || !strings.Contains(holder.Output(), "the command was stopped") {
				t.Fatalf("the thawed executor exited %d; want 76, saying its lease was lost:\n%s", code, holder.Output())
			}
		})
	}
}

// The same for a job under `executor serve`: its worker dies at the lease
// deadline while the serving executor is frozen.
func TestFrozenServeJobDiesByItsDeadline(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "frozenserve", "gpu=1", "3s")
	env = append(env, "LEADER_TTL=1s") // LEASE_TTL must be longer (config refuses it otherwise)
	startManager(t, env, httpAddr)
	m := treeMarkers()
	if code, out := runExecutor(t, env, "submit", "--pool", "gpu", "--max-attempts", "1", "--", "sh", "-c", escapingTree(m)); code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	serve := start(t, env, "executor", "serve", "--pools", "gpu")
	eventually(t, 30*time.Second, "the job's worker to run", func() bool { return len(treeProcs(m)) >= 4 })
	waiter := start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
	eventually(t, 10*time.Second, "the waiter to queue", func() bool { return queuedIn(t, httpAddr, "gpu") == 1 })
	if err := syscall.Kill(serve.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(serve.cmd.Process.Pid, syscall.SIGCONT) })
	eventually(t, 5*time.Second, "the frozen executor's job to die", func() bool { return len(treeProcs(m)) == 0 })
	dead := time.Since(frozen)
	if code := waiter.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("waiter exit %d:\n%s", code, waiter.Output())
	}
	granted := time.Since(frozen)
	t.Logf("job of the frozen executor serve dead %v after SIGSTOP; the next executor done %v after it (TTL 3s)", dead.Round(time.Millisecond), granted.Round(time.Millisecond))
	if dead >= granted {
		t.Fatalf("the job died %v after the freeze, not before the next holder ran (%v)", dead, granted)
	}
}

// A Go program holding a slot through lease.Client (test/integration/
// goholder) gets fast release too: SIGKILLed while it holds the slot, the
// slot goes to the next waiter in about the disconnect grace, not the 15s
// TTL; SIGKILLed while it waits, its request leaves the queue and does not
// hold up the one behind it.
func TestKilledGoClientsSlotComesBackFast(t *testing.T) {
	t.Parallel()
	env, httpAddr := managerEnv(t, "fastgo", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	says := func(p *proc, what string) func() bool {
		return func() bool { return strings.Contains(p.Output(), what) }
	}

	holder := start(t, env, "goholder", "gpu")
	eventually(t, 10*time.Second, "the Go holder to hold the slot", says(holder, "goholder: holding"))
	queued := start(t, env, "goholder", "gpu")
	eventually(t, 10*time.Second, "the second Go holder to queue", says(queued, "goholder: queued"))
	waiter := start(t, env, "executor", "run", "--pool", "gpu", "--", "true")
	eventually(t, 10*time.Second, "the executor to queue behind it", func() bool { return queuedIn(t, httpAddr, "gpu") == 2 })

	killQueued(t, queued, httpAddr, "Go client")

	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	eventually(t, 7*time.Second, "the killed Go holder's slot to go to the executor", says(waiter, "executor: lease "))
	t.Logf("a killed Go holder's slot was granted to the next executor %v after the SIGKILL (LEASE_TTL 15s)", time.Since(killed).Round(time.Millisecond))
	if code := waiter.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("waiter exit %d:\n%s", code, waiter.Output())
	}
}

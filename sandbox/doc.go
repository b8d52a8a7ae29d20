// Package sandbox runs a command as isolated worker code on Linux, for as
// long as a lease is held.
//
// It stands alone: the lease-lost signal comes in as a channel and the lease
// variables as plain entries of Spec.Env.
//
// # Init hook (required)
//
// Limits are applied by re-executing the current binary as a small init
// helper (see Init), which stays as the worker's supervisor (see
// supervise_linux.go). Every binary that calls Run must call sandbox.Init()
// as the first statement of main, and test binaries as the first statement
// of TestMain:
//
//	func main() {
//		sandbox.Init() // returns at once unless this process is the helper
//		...
//	}
//
// Run returns ErrInitNotCalled otherwise.
//
// # What is isolated
//
//   - Environment: the worker gets exactly Spec.Env (plus PATH and HOME
//     defaults). Nothing of the executor's environment (NATS_CREDS...)
//     reaches it; the helper (supervisor and exec stage) runs with a single
//     marker variable and receives the worker environment through a memfd.
//   - File descriptors: only stdin (/dev/null), stdout and stderr (pipes);
//     every other descriptor is made close-on-exec before the exec.
//   - Privileges: the worker starts with no capability (bounding,
//     permitted, effective, inheritable and ambient sets empty, also for
//     root) and with no_new_privs, so set-uid binaries give nothing back.
//   - Confinement (Spec.Confine, implied by a non-empty Spec.Hide): the
//     worker runs as ids of its own where any can be had (identity_linux.go:
//     a per-run id of a range no account uses when the executor is root,
//     one of the user's subordinate ids through newuidmap/newgidmap, else
//     the executor's own uid, which Result.Identity and CheckConfine say;
//     never uid 0 or gid 0: where those are all there is, a confined run
//     starts nothing and returns a *WorkerIDsError, see noroot_linux.go),
//     in its own PID, mount and IPC namespaces (plus a user namespace when
//     the executor is not root). Every mount is read-only in its view but
//     its working directory (lent: chowned to its ids for the run and back
//     after), Spec.Lend, Spec.Writable, a /dev/shm of its own and /proc;
//     directories its ids cannot enter on the way to those or to the
//     command are masked with an empty tmpfs holding only them
//     (confine_linux.go). Each hidden directory is covered with an empty
//     read-only tmpfs and each hidden file with /dev/null; the fresh /proc
//     keeps /proc/<pid>/root of outside processes from being a way around.
//     A confined run never falls back: where its namespaces or ids cannot
//     be had, Run starts nothing and returns ErrNotIsolated.
//     DisableDumping keeps the worker out of the caller's own
//     /proc/<pid>/environ and memory.
//   - Processes: the worker is the child of its supervisor, which leads
//     the worker's process group and, where cgroup v2 is usable, lives with
//     it in its own cgroup below the executor's
//     (slotlease-sandbox-<pidns>-<pid>-<n>; a later Run removes those left by
//     a crashed executor and kills what still runs in them). With Isolate
//     (or confined) they also get their own PID namespace (the supervisor
//     is PID 1 there, the worker is not, so SIGTERM works without a
//     handler) and mount namespace with a fresh /proc. A user namespace is
//     added when the plain namespaces are not permitted; its id maps are
//     written by the executor after the supervisor's exec (a non-dumpable
//     executor's fork cannot have them written before), and the
//     supervisor waits for them on its handover pipe.
//   - Network: with NoNetwork, a new network namespace with only lo (up);
//     never without it (ErrNotIsolated).
//   - Executor death: the supervisor is a child subreaper (whatever the
//     worker forks, double-forks or setsid()s stays below it) and learns of
//     the executor's death through PR_SET_PDEATHSIG with a catchable signal
//     (SIGUSR1). It then kills the whole tree — kill(-1) as PID 1 of its
//     namespace, else every process a cgroup of the tree lists (its cpu
//     group, below, or the run's cgroup v2 cgroup), else walks of /proc
//     that SIGKILL every descendant (the members of its process group as
//     the walk reads them); each repeated until a round finds none, so a
//     fork bomb cannot outrun it — reaps, and exits:
//     in tens of milliseconds, with or without namespaces and cgroups.
//     The worker gets SIGKILL if the supervisor itself dies.
//   - CPU share: where the executor may make one (a cgroup v1 or hybrid
//     host, as root), the worker's tree runs in a cgroup v1 cpu group of
//     its own, which its supervisor is not in (cpugroup_linux.go). The
//     tree then weighs as one process against the supervisor, the
//     executor and the lease manager, however many it forks: sixty shells
//     busy on the CPU are killed in 7-55 ms, and took 0.9-1.4 s to
//     kill without it, past the fast-release grace. Elsewhere (not root,
//     cgroup v2 only) the tree shares its supervisor's share: see
//     Limitations.
//     Setting _SLOTLEASE_SANDBOX_TEST_PLAIN=1 in the executor's environment
//     forces the path without namespaces and cgroup; only tests do.
//
// Without confinement (Isolate alone, or nothing) the worker sees and can
// write the same filesystem as the executor, as the same uid; Isolate
// falls back to no namespaces where none can be had, and says so in Notes.
// CheckConfine tells in advance whether confined runs can start here, and
// names the step that fails where they cannot.
//
// # Stopping
//
// On timeout, ctx cancellation or lease loss, every process of the worker
// gets SIGTERM — by process group and, with a cgroup, each pid of the
// cgroup — then SIGKILL after KillGrace (cgroup.kill when present),
// repeated until the group and cgroup are empty. The supervisor passes the
// SIGTERM on to descendants that left the process group, and before the
// SIGKILL it is asked (SIGUSR1) to kill the whole tree, those included.
// Processes the worker leaves behind after exiting normally
// are stopped by the supervisor: SIGTERM, KillGrace, then the same kill.
// Run returns only when nothing trackable is left. The worker's exit status
// is reported by the supervisor on the status pipe ("exit:<wait status>");
// Result.Duration runs until the supervisor exits, so it includes stopping
// leftovers.
//
// # Limits and their fallbacks
//
//   - MemoryBytes: cgroup v2 memory.max (with memory.swap.max=0 and
//     memory.oom.group=1); an OOM kill is reported as StoppedBy "memory".
//     When the memory controller cannot be used (cgroup v1 / hybrid
//     hierarchy, controller not delegated, the executor's cgroup holding
//     processes itself — the cgroup v2 no-internal-process rule), a cgroup
//     v1 memory controller's memory.limit_in_bytes takes it where there is
//     one the executor may use (root; cgroupv1_linux.go): the kernel kills
//     a process at the limit, and the watch below then stops the tree
//     (StoppedBy "memory"). Else it is RLIMIT_DATA on each process (an
//     allocation past it fails inside that process) and a watch of the
//     whole tree's resident memory every memWatchEvery, which kills the
//     tree past the limit (StoppedBy "memory"; memwatch_linux.go). None
//     counts address space a runtime only reserves, so Go, Node.js and
//     Java start under it, as they did not under RLIMIT_AS.
//     Result.MemoryLimit tells which applied ("cgroup" for v2 and v1).
//   - MaxProcs: cgroup v2 pids.max, else cgroup v1 pids.max, else
//     RLIMIT_NPROC, which counts all processes of the worker's user (for a
//     confined worker with ids of its own, its own processes) and which
//     the kernel ignores for uid 0 (a Note says the limit is not enforced
//     then). The v1 cgroup holds the worker's processes alone, so the
//     bound is exact: the exec stage moves only its own thread into it,
//     last of all before execve (cgroupv1_linux.go). Every one of them
//     counts threads too, so a worker's runtime needs room for its own
//     (Node.js about 8, Go about 5 on 2 cores).
//   - CPUTime: RLIMIT_CPU, per process: SIGXCPU at the rounded-up limit,
//     SIGKILL one second later; reported as StoppedBy "cpu" (best effort for
//     the SIGKILL case). A child of the worker has its own budget.
//   - MaxOpenFiles: RLIMIT_NOFILE; 0 keeps the limit any os/exec child of the
//     executor would get.
//   - Core dumps are disabled (RLIMIT_CORE=0).
//
// Every fallback is reported in Result.Notes and in Result.MemoryLimit /
// Result.Isolation; nothing degrades silently.
//
// # Limitations
//
//   - A confined worker with ids of its own runs only commands its ids may
//     read and execute; one in a directory they cannot enter is mounted in
//     alone, so what it reads from beside it must be in the working
//     directory.
//
//   - Lending changes owners: the kernel clears set-uid and set-gid bits
//     (and file capabilities) of the executor's files in the working
//     directory when it lends them, and they stay cleared. When the
//     supervisor and the executor die together (an OOM kill of both),
//     what the worker made in a kept working directory stays the worker's:
//     root can chown it, a user with subordinate ids from a user namespace
//     mapping them (podman unshare, say).
//
//   - Two confined runs of a user whose subordinate range is smaller than
//     pid_max can get the same id (identity_linux.go).
//
//   - Without a PID namespace a worker can SIGKILL its own supervisor (same
//     uid): the worker then dies too (parent-death signal), but a descendant
//     that left the process group is no longer anyone's to kill unless a
//     cgroup holds it; Run then stops reading its output after 1s and says
//     so in Notes. Inside a PID namespace the kernel ignores SIGKILL sent to
//     PID 1 from within.
//
//   - The supervisor's Go runtime (a few MiB) stays in the worker's cgroup
//     for the worker's whole life and counts against MemoryBytes. In a
//     cgroup v2 cgroup it counts against MaxProcs too, and the kernel
//     counts its threads, and the exec stage's until it execs the worker:
//     pids.max is MaxProcs+1, which a small MaxProcs can make too few for
//     the run to start. Untested: the hosts the suite has run on have no
//     v2 pids controller. A v1 one holds the worker alone.
//
//   - cgroup limits need controllers the executor may enable: run it in a
//     delegated cgroup (e.g. a systemd unit with Delegate=yes) that holds no
//     other processes than the executor, or the memory/pids controllers
//     cannot be enabled for children. The helper's own brief Go runtime is
//     accounted to the worker's cgroup, so very small memory limits (a few
//     MiB) can kill it before the worker starts.
//
//   - Without a cpu group of its own (an executor that is not root, a
//     host with cgroup v2 alone) a tree of many busy processes can starve
//     its supervisor: killing sixty busy shells took 0.9-1.4 s on an idle
//     2-core machine with neither the cpu group nor a cgroup to list the
//     tree from (docs/guarantees.md, section 3). On cgroup v2 the cpu
//     controller would weigh the tree against its supervisor if the two
//     were in sibling cgroups; not built: the hybrid host the tests run on
//     has no v2 cpu controller to test it with.
//
//   - The /proc walk without a PID namespace signals pids found in a scan
//     a moment earlier; a pid reused in between (pid_max wrapping within
//     milliseconds) would be signalled wrongly.
//
//   - PeakMemoryBytes from rusage (no cgroup memory.peak) is the maximum RSS
//     of the largest of the supervisor, the worker and the children they
//     reaped, not of the whole tree.
//
//   - Spec.Stdout/Stderr are written from Run's goroutines; a writer that
//     blocks forever blocks the worker (pipe back-pressure) and Run.
//
//   - Pdeathsig is tied to the OS thread that forked: Run keeps that thread
//     locked until the supervisor has exited, the supervisor keeps its
//     forking thread for good, and it switches its own parent-death signal
//     in package init, on the main thread (the one Run's fork created).
package sandbox

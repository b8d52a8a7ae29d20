package sandbox

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Spec describes one run of worker code.
type Spec struct {
	// Command is the argv. Command[0] is looked up in the PATH given by Env
	// (or DefaultPath) unless it contains a slash; a relative path with a
	// slash is resolved against the working directory.
	Command []string
	// Env is the ENTIRE environment of the worker: nothing is inherited from
	// the executor. PATH defaults to DefaultPath and HOME to the workdir when
	// absent.
	Env map[string]string
	// Dir is the working directory; empty means a fresh temporary directory
	// created for this run and removed afterwards unless KeepWorkdir is set
	// (slotlease-sandbox-<pidns>-<pid>-* in base 36, which the next Run of the user
	// removes if its executor crashed, see SweepTemp; a kept one is
	// slotlease-kept-* and never removed).
	Dir         string
	KeepWorkdir bool
	// Timeout is a wall-clock limit; 0 means none.
	Timeout time.Duration
	// CPUTime is applied as RLIMIT_CPU in whole seconds, rounded up; 0 means none.
	CPUTime time.Duration
	// MemoryBytes is a memory limit: cgroup v2 memory.max where possible,
	// else RLIMIT_DATA per process and a watch of the tree's resident
	// memory; 0 means none.
	MemoryBytes int64
	// MaxProcs limits the number of processes: cgroup v2 pids.max where
	// possible, else RLIMIT_NPROC (which the kernel ignores for root and
	// which counts all processes of the user); 0 means none.
	MaxProcs int
	// MaxOpenFiles is applied as RLIMIT_NOFILE; 0 means inherit.
	MaxOpenFiles int
	// Isolate runs the worker in its own PID and mount namespace (plus a
	// user namespace when needed) where available; otherwise the run falls
	// back to no isolation and says so in Result. Confine and NoNetwork
	// never fall back.
	Isolate bool
	// Confine runs the worker confined (see the package documentation):
	// as an identity of its own (Result.Identity), in its own PID, mount
	// and IPC namespaces (and a user namespace where needed), with the
	// whole filesystem read-only but Dir and Lend, and the paths of Hide
	// hidden. It never falls back: when the namespaces or the identity
	// cannot be had, Run starts nothing and returns an error matching
	// ErrNotIsolated. CheckConfine tells in advance.
	Confine bool
	// Hide lists absolute paths (files or directories; symlinks are
	// followed) the worker must not read: credentials, the lease store.
	// A non-empty Hide implies Confine; each directory is covered with an
	// empty read-only tmpfs and each file with /dev/null. Paths that do
	// not exist are skipped (the run is confined all the same). A hidden
	// path containing Dir or the command is an error.
	Hide []string
	// Lend lists paths (files or directories) a confined worker may write
	// besides Dir: like Dir, each is lent to the worker's identity for the
	// run (every file in it owned by the executor's uid or gid changes
	// owner to the worker's, and back when the run ends) and writable in
	// its view.
	Lend []string
	// Writable lists directories (or files) a confined worker may write
	// besides Dir, as far as its ids may: they are writable in its view
	// but not lent, so their owners and modes stay. For a worker with ids
	// of its own, make them writable by anyone (mode 1777) or by those
	// ids; one with the executor's ids can write there all the
	// executor's user can. None may be the root directory, hold the
	// executor's binary, lie in a hidden path or lead elsewhere through a
	// symlink.
	Writable []string
	// Binds are read-only bind mounts in a confined worker's view: the
	// file or directory at Source (as the executor reaches it) appears at
	// Target (an existing file or directory of the same kind). For giving
	// the worker a program whose own path its identity cannot reach.
	Binds []Bind
	// NoNetwork runs the worker in its own network namespace (only lo,
	// up). It never falls back: Run starts nothing and returns an error
	// matching ErrNotIsolated when no network namespace can be had.
	NoNetwork bool
	// Stdout and Stderr receive the worker's output live (nil = discard).
	// They are never written concurrently with each other.
	Stdout, Stderr io.Writer
	// CaptureBytes caps the captured tail of stdout and of stderr each
	// (0 = DefaultCaptureBytes, negative = capture nothing).
	CaptureBytes int
	// KillGrace is the delay between SIGTERM and SIGKILL (0 = DefaultKillGrace).
	KillGrace time.Duration
	// LostGrace is that delay when lost closes, if shorter than KillGrace.
	// The lease is gone then, and its slots go to the next holder as soon
	// as its record expires, so the work must be dead before that: pass at
	// most lease.Lease.LossGrace. 0 means SIGKILL at once. (A worker that is
	// PID 1 of its namespace gets SIGTERM only if it handles it, so a
	// plain command would otherwise run on for the whole KillGrace.)
	LostGrace time.Duration
	// Deadline, if set, is when the work must be dead at the latest: the
	// lease's deadline (lease.Lease.Deadline), read again every few tens of
	// milliseconds while the worker runs. Run hands each new value to the
	// supervisor, which kills the whole worker tree when the last one it was
	// told passes, even if this process can no longer act (frozen, stopped,
	// starved): work never outlives its lease. The worker cannot reach the
	// channel it is told on.
	Deadline func() time.Time
}

// Bind is a read-only bind mount of Spec.Binds.
type Bind struct {
	Source, Target string
}

// Identity is who a confined worker runs as: its uid and gid as the
// executor's user namespace sees them, and where they come from
// (IdentityOwnRange, IdentitySubordinate, IdentityExecutor).
type Identity struct {
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Kind string `json:"kind"`
}

func (id Identity) String() string {
	return fmt.Sprintf("uid %d, gid %d (%s)", id.UID, id.GID, id.Kind)
}

// Values of Identity.Kind.
const (
	// IdentityOwnRange: an id of a range no account uses, one per run
	// (the supervisor's pid picks it), mapped by the executor itself: it
	// has CAP_SETUID and CAP_SETGID in its user namespace (root).
	IdentityOwnRange = "own range"
	// IdentitySubordinate: one of the subordinate ids /etc/subuid and
	// /etc/subgid give the executor's user, mapped by newuidmap and
	// newgidmap (Debian package uidmap).
	IdentitySubordinate = "subordinate"
	// IdentityExecutor: the executor's own uid and gid, the only ids a
	// user without subordinate ids can map. The worker then owns what the
	// executor's user owns, and only the read-only view keeps it from
	// changing it; Confinement.Why says what is missing.
	IdentityExecutor = "executor's own"
)

// Confinement says how confined workers run on this machine
// (CheckConfine).
type Confinement struct {
	// Identity is the kind of ids workers get: IdentityOwnRange,
	// IdentitySubordinate or IdentityExecutor.
	Identity string
	// UIDs and GIDs are where they come from ("1879048192-1883242495"),
	// or the executor's own ids.
	UIDs, GIDs string
	// Namespaces are those a confined run gets, e.g. "pid+mount+ipc" or
	// "user+pid+mount+ipc".
	Namespaces string
	// Why says, for IdentityExecutor, what is missing for ids of the
	// workers' own.
	Why string
}

// Result describes how a run ended.
type Result struct {
	ExitCode        int           // -1 if killed by a signal
	Signal          string        // e.g. "killed", "terminated" ("" if exited)
	Duration        time.Duration // from start until the worker exited
	PeakMemoryBytes int64         // cgroup memory.peak if available, else rusage maxrss; 0 if unknown
	StoppedBy       string        // "" | StoppedTimeout | StoppedLeaseLost | StoppedCancelled | StoppedMemory | StoppedCPU
	MemoryLimit     string        // "cgroup" | "rlimit" | "none"
	Isolation       string        // "namespaces" (for Isolate, NoNetwork or Hide) | "none"
	Hidden          bool          // Spec.Hide was given and took effect
	Confined        bool          // the worker ran confined (Spec.Confine or Hide)
	Identity        Identity      // who a confined worker ran as
	Notes           []string      // fallbacks and anything the caller should know
	StdoutTail      []byte
	StderrTail      []byte
	Workdir         string // set when the workdir outlives the run (KeepWorkdir or Spec.Dir)
}

// Values of Result.StoppedBy.
const (
	StoppedTimeout = "timeout"
	// StoppedLeaseLost: lost closed, or the supervisor killed the tree at
	// the last Spec.Deadline it was told (the caller could not say the
	// lease was lost: it was frozen, say).
	StoppedLeaseLost = "lease_lost"
	StoppedCancelled = "cancelled"
	StoppedMemory    = "memory"
	StoppedCPU       = "cpu"
)

// Values of Result.MemoryLimit and Result.Isolation.
const (
	LimitCgroup         = "cgroup"
	LimitRlimit         = "rlimit"
	LimitNone           = "none"
	IsolationNamespaces = "namespaces"
	IsolationNone       = "none"
)

// Defaults.
const (
	DefaultPath         = "/usr/local/bin:/usr/bin:/bin"
	DefaultCaptureBytes = 64 << 10
	DefaultKillGrace    = 5 * time.Second
)

var (
	// ErrInitNotCalled is returned by Run when the program did not call
	// Init at the start of main (or TestMain). See Init.
	ErrInitNotCalled = errors.New("sandbox: sandbox.Init was not called at the start of main/TestMain")
	// ErrLeaseLost is returned by Run, without starting anything, when the
	// lost channel is already closed.
	ErrLeaseLost = errors.New("sandbox: lease already lost")
	// ErrUnsupported is returned by Run on platforms other than Linux.
	ErrUnsupported = errors.New("sandbox: only supported on linux")
	// ErrNotIsolated is matched by Run's error when a run that must be
	// confined or without a network could not get its namespaces or its
	// identity: nothing was started. It may be a passing shortage (the
	// per-user namespace limits are shared by all of a user's processes):
	// a later attempt can succeed.
	ErrNotIsolated = errors.New("sandbox: the worker could not be isolated, so it was not started")
)

// WorkerIDsError is returned by Run for a confined run, and by
// CheckConfine where namespaces work, when the only ids a worker could
// get here include uid 0 or gid 0, which a worker never runs as (root in
// a user namespace that maps no other ids, say): nothing was started. It
// matches ErrNotIsolated. UID and GID are the executor's; Why says what is
// missing for ids of the worker's own.
type WorkerIDsError struct {
	UID, GID int
	Why      string
}

func (e *WorkerIDsError) Error() string {
	return ErrNotIsolated.Error() + ": " + e.Reason()
}

// Reason is the error without ErrNotIsolated's words: for a message of
// its own.
func (e *WorkerIDsError) Reason() string {
	return "a worker never runs as uid 0 or gid 0, and no other ids can be had here: " + e.Why
}

func (e *WorkerIDsError) Unwrap() error { return ErrNotIsolated }

package sandbox

import (
	"errors"
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
	// created for this run and removed afterwards unless KeepWorkdir is set.
	Dir         string
	KeepWorkdir bool
	// Timeout is a wall-clock limit; 0 means none.
	Timeout time.Duration
	// CPUTime is applied as RLIMIT_CPU in whole seconds, rounded up; 0 means none.
	CPUTime time.Duration
	// MemoryBytes is a memory limit: cgroup v2 memory.max where possible,
	// else RLIMIT_AS; 0 means none.
	MemoryBytes int64
	// MaxProcs limits the number of processes: cgroup v2 pids.max where
	// possible, else RLIMIT_NPROC (which the kernel ignores for root and
	// which counts all processes of the user); 0 means none.
	MaxProcs int
	// MaxOpenFiles is applied as RLIMIT_NOFILE; 0 means inherit.
	MaxOpenFiles int
	// Isolate runs the worker in its own PID and mount namespace (plus a
	// user namespace when needed) where available; otherwise the run falls
	// back to no isolation and says so in Result.
	Isolate bool
	// Hide lists absolute paths (files or directories; symlinks are
	// followed) the worker must not read: credentials, the lease store.
	// When it is not empty the worker runs in its own mount and PID
	// namespace (as with Isolate) with an empty read-only tmpfs over each
	// directory and /dev/null over each file; paths that do not exist are
	// skipped (the namespaces are used all the same). A
	// hidden path containing Dir or the command is an error. Where no mount
	// namespace can be had the worker runs anyway, Result.Hidden is false
	// and a Note names what it can read; HideSupported tells in advance.
	Hide []string
	// NoNetwork runs the worker in its own network namespace (only lo, up).
	// Same fallback rules as Isolate.
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
	Notes           []string      // fallbacks and anything the caller should know
	StdoutTail      []byte
	StderrTail      []byte
	Workdir         string // set when the workdir outlives the run (KeepWorkdir or Spec.Dir)
}

// Values of Result.StoppedBy.
const (
	StoppedTimeout   = "timeout"
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
)

//go:build linux

package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The init helper.
//
// Go's os/exec cannot set resource limits in the child between fork and
// exec, and setting them on the executor itself would affect the executor.
// Run therefore re-executes the current binary (/proc/self/exe, so it works
// even if the file was replaced or deleted) with only initEnvVar in its
// environment (and GORACE in -race builds: raceenv_race.go). Init, called
// first thing in main, recognises that marker and turns the process into
// the supervisor (supervise_linux.go), which:
//
//  1. waits for the executor's handover on fd 5: the executor writes the
//     user namespace's id maps, if there is one, and then sends the
//     worker's ids (identity_linux.go); only then does the supervisor make
//     itself non-dumpable;
//  2. reads its configuration (target path, argv, env, limits) from fd 3
//     (a memfd written by Run, so the worker env never appears in the
//     helper's own environment or argv);
//  3. in a new PID+mount namespace, makes mounts private and mounts a
//     fresh /proc; for a confined run it first lends the working
//     directory to the worker's ids, makes every mount read-only but the
//     working directory, and hides Spec.Hide (confine_linux.go); in a new
//     network namespace, brings lo up;
//  4. becomes a child subreaper and starts the exec stage: this binary
//     once more, with the config in a new memfd on fd 3, which
//  5. joins the worker's own cgroup v1 cpu group, if Run made one (fd 7:
//     cpugroup_linux.go), sets no_new_privs, drops every capability and
//     switches to the worker's ids;
//  6. applies the rlimits with prlimit(2) — RLIMIT_DATA last, immediately
//     before exec, so the limit cannot break the helper's own Go runtime;
//  7. execve()s the worker with the raw syscall (no allocation after
//     RLIMIT_DATA is in place).
//
// The worker keeps the supervisor's process group, cgroups (Run cloned the
// supervisor into its v2 one with CLONE_INTO_CGROUP; all but the v1 cpu
// group) and namespaces. This is race-free: no worker instruction runs
// before every limit is in place.
// Problems are reported on fd 4 (close-on-exec in both stages; EOF means
// the supervisor is gone) as "note:" (non-fatal) or "error:"/"execerr:"/
// "isolation:" lines (the last for what confinement could not set up),
// the worker's wait status as "exit:<status>", and "returned:" once what
// was lent to the worker is the executor's again; on error the exec stage
// exits with status 127, the supervisor reports it and exits, and Run
// returns an error.

const (
	initEnvVar   = "_SLOTLEASE_SANDBOX_INIT"
	initEnvValue = "1"
	// initProbeValue makes the helper CheckConfine's probe instead.
	initProbeValue = "probe"
	// initExecValue makes the helper the exec stage the supervisor starts.
	initExecValue = "exec"
	// initReclaimValue makes the helper give back what a run lent to its
	// worker, when the supervisor could not (reclaim).
	initReclaimValue = "reclaim"
	initArgv0        = "slotlease-sandbox-init"
	cfgFD            = 3
	statusFD         = 4
	// handoverFD is where the supervisor (or probe, or reclaim helper)
	// reads the executor's handover.
	handoverFD = 5
	// deadlineFD is the supervisor's end of the deadline pipe (Spec.Deadline),
	// close-on-exec in the supervisor, so the worker never has it.
	deadlineFD = 6
	// fd 7 is cpuGroupFD (cpugroup_linux.go).
	// pidsTasksFD is the pids cgroup v1's tasks file (cgroupv1_linux.go).
	pidsTasksFD = 8
)

var initHookCalled atomic.Bool

// Init must be called at the very start of main — and of TestMain in test
// binaries of packages that call Run — before anything else (flag parsing,
// logging setup, connecting to NATS...):
//
//	func main() {
//		sandbox.Init()
//		...
//	}
//
//	func TestMain(m *testing.M) {
//		sandbox.Init()
//		os.Exit(m.Run())
//	}
//
// In a normal process it only records that it was called and returns
// immediately. In a process started by Run as the init helper it never
// returns: it applies the limits and execs the worker (or exits with status
// 127). Run refuses to work (ErrInitNotCalled) unless Init was called, so
// that a forgotten hook cannot make the re-executed binary run main again.
func Init() {
	initHookCalled.Store(true)
	switch os.Getenv(initEnvVar) {
	case initEnvValue:
		runSupervisor()
	case initExecValue:
		runExecStage()
	case initProbeValue:
		probeHelper()
	case initReclaimValue:
		reclaimHelper()
	}
}

type rlimitSetting struct {
	Name     string `json:"name"`
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

type initConfig struct {
	Path          string          `json:"path"`
	Argv          []string        `json:"argv"`
	Env           []string        `json:"env"`
	RestoreNofile bool            `json:"restore_nofile"`
	Limits        []rlimitSetting `json:"limits"` // applied in order; RLIMIT_DATA must be last
	MountProc     bool            `json:"mount_proc"`
	LoopbackUp    bool            `json:"loopback_up"`
	Hide          []hiddenPath    `json:"hide"` // the paths of Spec.Hide that exist (confined runs)
	// KillGrace is how long processes the worker leaves behind get between
	// SIGTERM and SIGKILL (read by the supervisor).
	KillGrace time.Duration `json:"kill_grace"`
	// Deadline: the supervisor reads deadlines on deadlineFD (Spec.Deadline).
	Deadline bool `json:"deadline"`
	// TreeList: the supervisor holds a cgroup.procs listing the worker's
	// tree on cpuGroupFD; CPUGroup: it is the worker's cpu group, which
	// the supervisor hands to the exec stage to join (cpugroup_linux.go).
	TreeList bool `json:"tree_list,omitempty"`
	CPUGroup bool `json:"cpu_group,omitempty"`
	// PidsJoin: the supervisor holds the pids cgroup's tasks file on
	// pidsTasksFD and hands it to the exec stage, whose thread joins it
	// last of all (cgroupv1_linux.go).
	PidsJoin bool `json:"pids_join,omitempty"`

	// Confine: the run is confined (Spec.Confine or Hide): read-only view
	// but Lend, Binds, /dev/shm of its own (confine_linux.go).
	Confine bool `json:"confine,omitempty"`
	// Lend are the working directory and Spec.Lend, resolved: lent to the
	// worker's ids when they are not the supervisor's, writable in its view.
	Lend []string `json:"lend,omitempty"`
	// Writable: Spec.Writable, resolved: writable in the worker's view.
	Writable []string `json:"writable,omitempty"`
	Binds    []Bind   `json:"binds,omitempty"`

	// The worker's ids in the supervisor's user namespace (-1: keep the
	// supervisor's) and whether to drop the supplementary groups: from the
	// handover, not from Run's config file, which is written before the
	// supervisor's pid (that picks the ids) is known.
	UID        int  `json:"uid"`
	GID        int  `json:"gid"`
	DropGroups bool `json:"drop_groups,omitempty"`
}

// handover is what the executor tells a helper it started once the id
// maps of its user namespace (if any) are written: the worker's ids.
type handover struct {
	UID        int  `json:"uid"` // -1: keep the supervisor's
	GID        int  `json:"gid"`
	DropGroups bool `json:"drop_groups"`
}

// readHandover waits for the executor's handover. Nothing else may happen
// before it: until the maps are written the helper's ids are unmapped. A
// helper whose executor gave up (closed the pipe without a word) exits.
func readHandover() handover {
	f := os.NewFile(handoverFD, "handover")
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	f.Close()
	var h handover
	if err != nil || len(data) == 0 || json.Unmarshal(data, &h) != nil {
		unix.Exit(127)
	}
	return h
}

func helperStatus(kind, msg string) {
	msg = strings.ReplaceAll(msg, "\n", " ")
	b := []byte(kind + ":" + msg + "\n")
	for len(b) > 0 {
		n, err := unix.Write(statusFD, b)
		if err != nil {
			return
		}
		b = b[n:]
	}
}

func helperFail(format string, args ...any) {
	giveBack()
	helperStatus("error", fmt.Sprintf(format, args...))
	unix.Exit(127)
}

// readInitConfig reads the configuration Run (or the supervisor) wrote to
// fd 3.
func readInitConfig() initConfig {
	cfgFile := os.NewFile(cfgFD, "sandbox-config")
	data, err := io.ReadAll(cfgFile)
	cfgFile.Close()
	if err != nil {
		helperFail("init helper: read config: %v", err)
	}
	var cfg initConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		helperFail("init helper: decode config: %v", err)
	}
	if len(cfg.Argv) == 0 || cfg.Path == "" {
		helperFail("init helper: empty command")
	}
	return cfg
}

// setupNamespaces prepares the new mount and network namespaces (fresh
// /proc, hidden paths, lo up). It runs in the supervisor; its children
// inherit the result.
func setupNamespaces(cfg initConfig) {
	if cfg.Confine {
		if err := confine(cfg); err != nil {
			// The worker must not run with less than it was promised.
			isolationFail(err)
		}
	} else if cfg.MountProc {
		// Make every mount private first so nothing we do here propagates
		// back to the executor's mount namespace, then give the worker a
		// /proc that shows only its own PID namespace.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			helperStatus("note", fmt.Sprintf("isolation: could not make mounts private (%v); /proc not remounted, the worker sees the host's /proc", err))
		} else if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			helperStatus("note", fmt.Sprintf("isolation: could not mount a fresh /proc (%v); the worker sees the host's /proc", err))
		}
	}
	if cfg.LoopbackUp {
		if err := loopbackUp(); err != nil {
			helperStatus("note", fmt.Sprintf("network: could not bring lo up in the new network namespace (%v)", err))
		}
	}
}

// runExecStage is the second stage, started by the supervisor: it drops
// privileges, applies the limits and execs the worker.
func runExecStage() {
	// Capabilities, no_new_privs and the bounding set belong to a thread:
	// the thread that drops them must be the one that calls execve.
	runtime.LockOSThread()
	// fd 4 (shared with the supervisor) must not reach the worker.
	unix.CloseOnExec(statusFD)
	cfg := readInitConfig()
	if cfg.CPUGroup {
		if err := joinCPUGroup(); err != nil {
			helperStatus("note", fmt.Sprintf("the worker could not join its cpu cgroup (%v): a tree of many processes can slow its supervisor", err))
		}
	}

	// Everything execve needs is prepared now, before the limits.
	argv0p, err := unix.BytePtrFromString(cfg.Path)
	if err != nil {
		helperFail("init helper: bad path %q", cfg.Path)
	}
	argvp, err := cStrings(cfg.Argv)
	if err != nil {
		helperFail("init helper: bad argument: %v", err)
	}
	envp, err := cStrings(cfg.Env)
	if err != nil {
		helperFail("init helper: bad environment entry: %v", err)
	}
	errBuf := make([]byte, 0, 64)
	joinErr := make([]byte, 0, 96)
	joinErr = append(joinErr, "error:the worker could not join its pids cgroup, errno "...)
	zero := []byte("0") // this thread, in a cgroup v1 tasks file

	if cfg.RestoreNofile {
		// The Go runtime of this helper raised its soft RLIMIT_NOFILE at
		// startup and only syscall.Exec knows the original value (it restores
		// it right before execve). Calling syscall.Exec on an empty path
		// restores the original limit and then fails with ENOENT without
		// doing anything else, so the worker "inherits" the limit exactly as
		// any os/exec child of the executor would. If a future Go release
		// stopped doing this, the worker would merely keep the raised soft
		// limit.
		_ = syscall.Exec("", []string{initArgv0}, nil)
	}
	if err := dropPrivileges(cfg); err != nil {
		helperFail("init helper: %v", err)
	}
	closeExtraFDs()
	for _, l := range cfg.Limits {
		if err := setLimit(l); err != nil {
			helperFail("set %s: %v", l.Name, err)
		}
	}
	// No allocation from here on: RLIMIT_DATA may already be in force.
	if cfg.PidsJoin {
		// Last of all, this thread alone joins the pids cgroup: the Go
		// runtime's other threads stay out, and execve leaves this one
		// the whole process (cgroupv1_linux.go). No thread of this one's
		// can start in between.
		if _, _, e := unix.RawSyscall(unix.SYS_WRITE, pidsTasksFD, uintptr(unsafe.Pointer(&zero[0])), 1); e != 0 {
			joinErr = appendUint(joinErr, uint64(e))
			joinErr = append(joinErr, '\n')
			_, _ = unix.Write(statusFD, joinErr)
			unix.Exit(127)
		}
	}
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE,
		uintptr(unsafe.Pointer(argv0p)),
		uintptr(unsafe.Pointer(&argvp[0])),
		uintptr(unsafe.Pointer(&envp[0])))
	errBuf = append(errBuf, "execerr:"...)
	errBuf = appendUint(errBuf, uint64(errno))
	errBuf = append(errBuf, '\n')
	_, _ = unix.Write(statusFD, errBuf)
	unix.Exit(127)
}

func appendUint(b []byte, v uint64) []byte {
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}

func cStrings(ss []string) ([]*byte, error) {
	out := make([]*byte, len(ss)+1)
	for i, s := range ss {
		p, err := unix.BytePtrFromString(s)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// setLimit only ever tightens: it never raises the current hard limit.
func setLimit(l rlimitSetting) error {
	var cur unix.Rlimit
	if err := unix.Prlimit(0, l.Resource, nil, &cur); err != nil {
		return err
	}
	want := unix.Rlimit{Cur: l.Cur, Max: l.Max}
	if want.Max > cur.Max {
		want.Max = cur.Max
	}
	if want.Cur > want.Max {
		want.Cur = want.Max
	}
	return unix.Prlimit(0, l.Resource, &want, nil)
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

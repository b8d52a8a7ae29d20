//go:build linux

package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Starting the worker: the namespaces to try, the supervisor's process
// attributes and configuration, and the hand-over of its ids.
// nsVariant is one set of namespaces to try when starting the worker.
type nsVariant struct {
	flags uintptr
	user  bool
}

func (v nsVariant) String() string {
	var s []string
	if v.flags&unix.CLONE_NEWUSER != 0 {
		s = append(s, "user")
	}
	if v.flags&unix.CLONE_NEWPID != 0 {
		s = append(s, "pid")
	}
	if v.flags&unix.CLONE_NEWNS != 0 {
		s = append(s, "mount")
	}
	if v.flags&unix.CLONE_NEWIPC != 0 {
		s = append(s, "ipc")
	}
	if v.flags&unix.CLONE_NEWNET != 0 {
		s = append(s, "net")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "+")
}

// plainEnvVar=1 in the executor's environment makes Run use neither
// namespaces nor a cgroup, as on a host that has none: set only by tests, to
// show that the supervisor's containment does not depend on them.
const plainEnvVar = "_SLOTLEASE_SANDBOX_TEST_PLAIN"

func plainForced() bool { return os.Getenv(plainEnvVar) == "1" }

// mustIsolate: a run that must not start without its namespaces.
func (r *runner) mustIsolate() bool { return r.confined || r.spec.NoNetwork }

func (r *runner) nsVariants() []nsVariant {
	if plainForced() {
		if r.mustIsolate() {
			return nil
		}
		return []nsVariant{{}}
	}
	var base uintptr
	switch {
	case r.confined:
		// Hiding paths needs a mount namespace, and a PID namespace with
		// a fresh /proc so that /proc/<pid>/root of outside processes is
		// no way around it; an IPC namespace keeps the executor user's
		// System V objects away. Decided on the spec, not on which hidden
		// paths exist, so that the worker's surroundings do not depend on
		// what is on disk now.
		base = unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWIPC
	case r.spec.Isolate:
		base = unix.CLONE_NEWPID | unix.CLONE_NEWNS
	}
	if r.spec.NoNetwork {
		base |= unix.CLONE_NEWNET
	}
	if base == 0 {
		return []nsVariant{{}}
	}
	var vs []nsVariant
	if r.plan.canNamespace && !(r.confined && probedUserOnly.Load()) {
		vs = append(vs, nsVariant{flags: base})
	}
	// Unprivileged (or root without CAP_SYS_ADMIN, e.g. in a container):
	// a user namespace makes the other namespaces possible.
	vs = append(vs, nsVariant{flags: base | unix.CLONE_NEWUSER, user: true})
	if r.mustIsolate() {
		return vs // never without them
	}
	return append(vs, nsVariant{})
}

// probedUserOnly: CheckConfine found that confined runs work only in a
// user namespace here (root in a container whose /proc the plain mount
// namespace cannot remount, say), so Run does not try without one.
var probedUserOnly atomic.Bool

func (r *runner) sysProcAttr(v nsVariant, useCg bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Setpgid: true,
		// If the executor dies before the supervisor has set up its own
		// parent-death signal (superviseSignal, to kill the whole tree),
		// the supervisor dies at once, before starting anything. The fork
		// happens on a locked OS thread that stays locked until the
		// supervisor has exited, so the signal cannot fire early
		// (go.dev/issue/27505).
		Pdeathsig:  syscall.SIGKILL,
		Cloneflags: v.flags,
	}
	if v.user {
		// No id maps here: os/exec would write them while the child is
		// still non-dumpable, as the executor is, and a non-root
		// executor may not open a non-dumpable child's uid_map. They are
		// written after the helper's exec (handOver). Its ids are
		// unmapped at exec, so nothing makes it root of its namespace:
		// it keeps these as ambient capabilities, to mount /proc, hide
		// paths, bring lo up, lend the working directory (chown, over
		// files it does not own), switch the exec stage to the worker's
		// ids and empty the bounding set; the exec stage drops them all
		// before exec'ing the worker.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETPCAP,
			unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_CHOWN, unix.CAP_FOWNER, unix.CAP_DAC_OVERRIDE}
	}
	if useCg {
		attr.UseCgroupFD = true
		attr.CgroupFD = r.cg.fd
	}
	return attr
}

func (r *runner) config(v nsVariant, useCg bool) initConfig {
	s := r.spec
	cfg := initConfig{
		Path:          r.path,
		Argv:          r.argv,
		Env:           r.env,
		RestoreNofile: s.MaxOpenFiles == 0,
		MountProc:     v.flags&unix.CLONE_NEWPID != 0 && v.flags&unix.CLONE_NEWNS != 0,
		LoopbackUp:    v.flags&unix.CLONE_NEWNET != 0,
		KillGrace:     r.grace,
		Deadline:      s.Deadline != nil,
		CPUGroup:      r.cpu != nil,
		UID:           -1,
		GID:           -1,
	}
	if r.confined && v.flags&unix.CLONE_NEWNS != 0 {
		cfg.Confine, cfg.Hide, cfg.Lend, cfg.Writable, cfg.Binds = true, r.hide, r.lend, r.writable, r.binds
	}
	// No core dumps: a worker killed by SIGXCPU/SIGABRT must not write
	// hundreds of MB into its workdir or the host's crash collector.
	cfg.Limits = append(cfg.Limits, rlimitSetting{Name: "RLIMIT_CORE", Resource: unix.RLIMIT_CORE})
	if s.CPUTime > 0 {
		secs := uint64(cpuSeconds(s.CPUTime) / time.Second)
		// SIGXCPU at the soft limit, SIGKILL one second later.
		cfg.Limits = append(cfg.Limits, rlimitSetting{Name: "RLIMIT_CPU", Resource: unix.RLIMIT_CPU, Cur: secs, Max: secs + 1})
	}
	if s.MaxOpenFiles > 0 {
		n := uint64(s.MaxOpenFiles)
		cfg.Limits = append(cfg.Limits, rlimitSetting{Name: "RLIMIT_NOFILE", Resource: unix.RLIMIT_NOFILE, Cur: n, Max: n})
	}
	if s.MaxProcs > 0 && !(useCg && r.cg.pids) && (r.v1 == nil || r.v1.pids == "") {
		n := uint64(s.MaxProcs)
		cfg.Limits = append(cfg.Limits, rlimitSetting{Name: "RLIMIT_NPROC", Resource: unix.RLIMIT_NPROC, Cur: n, Max: n})
	}
	if s.MemoryBytes > 0 && !(useCg && r.cg.memory) && r.v1.memoryOnly() == nil {
		n := uint64(s.MemoryBytes)
		// RLIMIT_DATA, not RLIMIT_AS: runtimes reserve far more address
		// space than they use (memwatch_linux.go). Must stay last: see
		// runInitHelper.
		cfg.Limits = append(cfg.Limits, rlimitSetting{Name: "RLIMIT_DATA", Resource: unix.RLIMIT_DATA, Cur: n, Max: n})
	}
	return cfg
}

// cpuSeconds rounds d up to whole seconds.
func cpuSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

func configFile(cfg initConfig) (*os.File, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var f *os.File
	if fd, err := unix.MemfdCreate("slotlease-sandbox-config", unix.MFD_CLOEXEC); err == nil {
		f = os.NewFile(uintptr(fd), "slotlease-sandbox-config")
	} else {
		f, err = os.CreateTemp("", "slotlease-sandbox-config-*")
		if err != nil {
			return nil, err
		}
		_ = os.Remove(f.Name())
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (r *runner) startOnce(v nsVariant, useCg bool) error {
	attr := r.sysProcAttr(v, useCg)
	tree := r.treeFile(useCg)
	if tree != nil && tree != r.cpu.file() {
		defer tree.Close() // the supervisor's copy is what counts
	}
	pidsTasks, err := r.v1.tasks()
	if err != nil {
		r.dropV1(err) // the next try starts with the rlimits instead
		return err
	}
	if pidsTasks != nil {
		defer pidsTasks.Close() // the supervisor's copy is what counts
	}
	cfg := r.config(v, useCg)
	cfg.TreeList = tree != nil
	cfg.PidsJoin = pidsTasks != nil
	cfgF, err := configFile(cfg)
	if err != nil {
		return err
	}
	defer cfgF.Close()
	var toClose []*os.File // on failure
	defer func() {
		for _, f := range toClose {
			f.Close()
		}
	}()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return err
	}
	toClose = append(toClose, statusR, statusW)
	hoR, hoW, err := os.Pipe()
	if err != nil {
		return err
	}
	toClose = append(toClose, hoR, hoW)
	files := []*os.File{cfgF, statusW, hoR} // fds 3, 4 and 5
	var deadlineR, deadlineW *os.File
	if r.spec.Deadline != nil {
		if deadlineR, deadlineW, err = os.Pipe(); err != nil {
			return err
		}
		toClose = append(toClose, deadlineR, deadlineW)
		files = append(files, deadlineR) // fd 6
	}
	if tree != nil || pidsTasks != nil {
		if len(files) == 3 {
			files = append(files, nil) // no fd 6
		}
		files = append(files, tree) // fd 7, or none
	}
	if pidsTasks != nil {
		files = append(files, pidsTasks) // fd 8
	}
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{initArgv0},
		Env:         helperEnv(initEnvVar + "=" + initEnvValue),
		Dir:         r.workdir,
		Stdout:      r.outW,
		Stderr:      r.errW,
		ExtraFiles:  files,
		SysProcAttr: attr,
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	statusW.Close()
	hoR.Close()
	if deadlineR != nil {
		deadlineR.Close()
	}
	toClose = []*os.File{statusR, deadlineW}
	if deadlineW == nil {
		toClose = toClose[:1]
	}
	if r.v1 != nil {
		// Before the handover: the supervisor starts the worker only
		// after it, so the worker is in these cgroups from its start.
		if err := r.v1.enter(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			r.dropV1(err) // the next try starts with the rlimits instead
			return err
		}
	}
	id, err := r.handOver(v, cmd.Process.Pid, hoW, nil)
	if err != nil {
		// The helper waits for the handover: it has done nothing yet.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	toClose = nil
	r.startTime = time.Now()
	r.cmd, r.statusR, r.deadlineW, r.pgid, r.id = cmd, statusR, deadlineW, cmd.Process.Pid, id
	return nil
}

// treeFile is the cgroup.procs the supervisor finds the worker's tree by
// (cpuGroupFD, cpugroup_linux.go): the tree's own cpu group, which the
// exec stage joins, else the run's cgroup v2 cgroup (useCg), which the
// supervisor is in too; nil without either (the supervisor then scans
// /proc).
func (r *runner) treeFile(useCg bool) *os.File {
	if r.cpu != nil {
		return r.cpu.file()
	}
	if useCg {
		if f, err := os.Open(filepath.Join(r.cg.path, "cgroup.procs")); err == nil {
			return f
		}
	}
	return nil
}

// handOver completes the start of a helper (supervisor, probe or reclaim
// helper) that has exec'd and waits on w: it writes the id maps of the
// helper's user namespace, if v has one, then tells it the worker's ids
// (identity_linux.go: the pid picks them, unless fixed is given), and
// closes w.
func (r *runner) handOver(v nsVariant, pid int, w *os.File, fixed *Identity) (Identity, error) {
	defer w.Close()
	id, err := r.plan.identity(pid, r.confined)
	if fixed != nil {
		id, err = *fixed, nil
	}
	if err != nil {
		return id, err
	}
	h := handover{UID: -1, GID: -1}
	if v.user {
		drop, err := r.plan.writeMaps(pid, id)
		if err != nil {
			return id, fmt.Errorf("id maps of the worker's user namespace: %w", err)
		}
		h.DropGroups = drop && r.confined
	} else {
		h.DropGroups = r.confined && r.plan.canMap && r.plan.setgroups
	}
	if r.confined {
		h.UID, h.GID = id.UID, id.GID
	}
	data, err := json.Marshal(h)
	if err == nil {
		_, err = w.Write(data)
	}
	if err != nil {
		return id, fmt.Errorf("handover to the sandbox helper: %w", err)
	}
	return id, nil
}

// start tries the wanted namespaces and cgroup first and falls back step by
// step: every failed attempt is reported in Notes.
func (r *runner) start() error {
	cgOpts := []bool{false}
	if r.cg != nil {
		cgOpts = []bool{true, false}
	}
	var failures []string
	var lastErr error
	for _, v := range r.nsVariants() {
		for _, useCg := range cgOpts {
			err := r.startOnce(v, useCg)
			if err == nil {
				r.nsUsed, r.cgUsed = v, useCg
				if len(failures) > 0 {
					r.note(fmt.Sprintf("start fell back to namespaces=%s cgroup=%t after: %s", v, useCg, strings.Join(failures, "; ")))
				}
				return nil
			}
			if errors.Is(err, syscall.ENOSPC) && v.flags != 0 {
				err = fmt.Errorf("%w (a limit of namespaces in /proc/sys/user is reached: every process of the user counts, workers too)", err)
			}
			lastErr = err
			failures = append(failures, fmt.Sprintf("namespaces=%s cgroup=%t: %v", v, useCg, err))
		}
	}
	if r.mustIsolate() {
		if len(failures) == 0 {
			failures = append(failures, plainEnvVar+"=1 (test setting): no namespaces")
		}
		return fmt.Errorf("%w: %s", ErrNotIsolated, strings.Join(failures, "; "))
	}
	return lastErr
}

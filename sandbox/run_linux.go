//go:build linux

package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Run runs spec until the command exits, ctx is done (StoppedBy
// "cancelled"), Timeout passes ("timeout"), or lost closes ("lease_lost").
//
// On any stop the whole process group — and, with a cgroup, every process in
// the cgroup — gets SIGTERM, then SIGKILL after KillGrace (cgroup.kill when
// present). Processes the worker leaves behind after a normal exit are
// terminated the same way. No process that can be tracked survives Run's
// return (see the package documentation for what cannot be tracked), and
// every goroutine Run starts has ended.
//
// Run returns an error only when the command could not be started: bad spec
// (empty command, invalid env, missing or non-executable binary, bad Dir),
// exec failure, ctx already done, lost already closed (ErrLeaseLost), or Init
// not called (ErrInitNotCalled). A non-zero exit is a Result, not an error.
func Run(ctx context.Context, spec Spec, lost <-chan struct{}) (*Result, error) {
	if !initHookCalled.Load() {
		return nil, ErrInitNotCalled
	}
	if err := validate(spec); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sandbox: not started: %w", err)
	}
	select {
	case <-lost:
		return nil, ErrLeaseLost
	default:
	}

	r := &runner{spec: spec, grace: spec.KillGrace, plan: currentPlan(), confined: spec.Confine || len(spec.Hide) > 0}
	if r.confined && r.plan.refused != nil {
		return nil, r.plan.refused // its ids would be 0 (identity_linux.go)
	}
	if r.grace <= 0 {
		r.grace = DefaultKillGrace
	}
	capture := spec.CaptureBytes
	if capture == 0 {
		capture = DefaultCaptureBytes
	}
	r.outTail, r.errTail = newTailBuffer(capture), newTailBuffer(capture)

	// Working directory.
	sweepSandboxTemp() // those of executors that crashed
	created := false
	if spec.Dir == "" {
		mkdir := MkdirTemp
		if spec.KeepWorkdir {
			// Kept on purpose: never swept.
			mkdir = func(string) (string, error) { return os.MkdirTemp("", "slotlease-kept-") }
		}
		d, err := mkdir(TempWorkdir)
		if err != nil {
			return nil, fmt.Errorf("sandbox: create workdir: %w", err)
		}
		r.workdir, created = d, true
	} else {
		d, err := filepath.Abs(spec.Dir)
		if err != nil {
			return nil, fmt.Errorf("sandbox: workdir: %w", err)
		}
		fi, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("sandbox: workdir: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("sandbox: workdir %s is not a directory", d)
		}
		r.workdir = d
	}

	res := &Result{MemoryLimit: LimitNone, Isolation: IsolationNone}
	err := r.prepare()
	if err == nil {
		err = r.execute(ctx, lost, res)
	}
	if created && !spec.KeepWorkdir {
		if rmErr := os.RemoveAll(r.workdir); rmErr != nil {
			r.note(fmt.Sprintf("could not remove workdir %s: %v", r.workdir, rmErr))
			res.Workdir = r.workdir
		}
	} else {
		res.Workdir = r.workdir
	}
	if err != nil {
		return nil, err
	}
	res.Notes = r.notes
	return res, nil
}

func validate(spec Spec) error {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return errors.New("sandbox: empty command")
	}
	for _, a := range spec.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("sandbox: command argument contains NUL")
		}
	}
	for k, v := range spec.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("sandbox: invalid environment entry %q", k)
		}
	}
	if spec.MemoryBytes < 0 || spec.MaxProcs < 0 || spec.MaxOpenFiles < 0 || spec.CPUTime < 0 || spec.Timeout < 0 {
		return errors.New("sandbox: negative limit")
	}
	if (len(spec.Lend) > 0 || len(spec.Writable) > 0 || len(spec.Binds) > 0) && !spec.Confine && len(spec.Hide) == 0 {
		return errors.New("sandbox: Lend, Writable and Binds need a confined run (Confine or Hide)")
	}
	for _, p := range append(slices.Clip(spec.Lend), spec.Writable...) {
		if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("sandbox: lent or writable path %q is not an absolute path", p)
		}
	}
	for _, b := range spec.Binds {
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(b.Target) || strings.IndexByte(b.Source+b.Target, 0) >= 0 {
			return fmt.Errorf("sandbox: bind %q at %q: both must be absolute paths", b.Source, b.Target)
		}
	}
	return nil
}

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

type runner struct {
	spec    Spec
	grace   time.Duration
	workdir string
	path    string
	argv    []string
	env     []string
	hide    []hiddenPath

	// confined: Spec.Confine or Hide; plan: where the worker's ids come
	// from (identity_linux.go); lend (the working directory first),
	// writable and binds: Spec.Lend, Writable and Binds, resolved.
	confined bool
	plan     *idPlan
	lend     []string
	writable []string
	binds    []Bind

	cg                     *cgroup
	outR, outW, errR, errW *os.File
	outTail, errTail       *tailBuffer
	writeMu                sync.Mutex // serialises writes to Spec.Stdout/Stderr

	// Set by start (before it reports on startCh).
	cmd       *exec.Cmd
	statusR   *os.File
	deadlineW *os.File // the executor's end of the deadline pipe, if any
	pgid      int
	nsUsed    nsVariant
	cgUsed    bool
	id        Identity // the worker's ids (the executor's when not confined)
	startTime time.Time

	// Set by the waiter before it closes waitDone.
	exitTime time.Time

	notesMu sync.Mutex
	notes   []string
}

func (r *runner) note(s ...string) {
	r.notesMu.Lock()
	r.notes = append(r.notes, s...)
	r.notesMu.Unlock()
}

// prepare resolves the command and builds the worker environment.
func (r *runner) prepare() error {
	env := make(map[string]string, len(r.spec.Env)+2)
	for k, v := range r.spec.Env {
		env[k] = v
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = DefaultPath
	}
	if _, ok := env["HOME"]; !ok {
		env["HOME"] = r.workdir
	}
	if _, ok := env["TMPDIR"]; !ok && r.confined {
		env["TMPDIR"] = r.workdir // the only place a confined worker can write
	}
	for k, v := range env {
		r.env = append(r.env, k+"="+v)
	}
	sort.Strings(r.env)
	p, err := lookPath(r.spec.Command[0], env["PATH"], r.workdir)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	r.path = p
	r.argv = append([]string(nil), r.spec.Command...)
	hide := r.spec.Hide
	if r.confined {
		// The user's runtime directory holds sockets that trust whoever
		// has its uid (D-Bus, systemd --user, agents): a worker with the
		// executor's own uid could use them, read-only view or not.
		rt := fmt.Sprintf("/run/user/%d", os.Geteuid())
		if fi, err := os.Stat(rt); err == nil && fi.IsDir() && !within(r.workdir, rt) && !within(p, rt) {
			hide = append(slices.Clip(hide), rt)
		}
	}
	if r.hide, err = resolveHide(hide, r.workdir, p); err != nil {
		return err
	}
	if !r.confined {
		return nil
	}
	if r.lend, err = resolveLend(append([]string{r.workdir}, r.spec.Lend...), r.hide); err != nil {
		return err
	}
	for _, w := range r.spec.Writable {
		// Taken as given: a path that leads elsewhere through a symlink
		// could be made (by a job, in its own writable directory) to name
		// any place, and a follow-up's writable paths are checked against
		// its parent's by name.
		if real, err := filepath.EvalSymlinks(w); err == nil && real != filepath.Clean(w) {
			return fmt.Errorf("sandbox: writable path %q leads to %s through a symlink: give the real path", w, real)
		}
	}
	if r.writable, err = resolveLend(r.spec.Writable, r.hide); err != nil {
		return err
	}
	r.binds, err = resolveBinds(r.spec.Binds)
	return err
}

// resolveLend resolves the paths a confined worker is lent (its working
// directory first) or may write. The worker can write every file in them
// the executor owns, so none may be the root directory, hold the
// executor's own binary (the worker could replace it) or lie in a hidden
// path.
func resolveLend(paths []string, hide []hiddenPath) ([]string, error) {
	exe, _ := os.Executable()
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	var out []string
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("sandbox: lent or writable path %q: %w", p, err)
		}
		switch {
		case real == "/":
			return nil, fmt.Errorf("sandbox: lent or writable path %q: the worker may not write the root directory", p)
		case exe != "" && within(exe, real):
			return nil, fmt.Errorf("sandbox: lent or writable path %q holds the executor's own binary %s: the worker could replace it", p, exe)
		}
		for _, h := range hide {
			if within(real, h.Path) {
				return nil, fmt.Errorf("sandbox: lent or writable path %q is hidden (%s)", p, h.Path)
			}
		}
		if !slices.Contains(out, real) {
			out = append(out, real)
		}
	}
	return out, nil
}

// resolveBinds checks Spec.Binds: both ends exist and are of one kind.
func resolveBinds(binds []Bind) ([]Bind, error) {
	var out []Bind
	for _, b := range binds {
		src, err := os.Stat(b.Source)
		if err != nil {
			return nil, fmt.Errorf("sandbox: bind source: %w", err)
		}
		dst, err := os.Stat(b.Target)
		if err != nil {
			return nil, fmt.Errorf("sandbox: bind target: %w", err)
		}
		if src.IsDir() != dst.IsDir() {
			return nil, fmt.Errorf("sandbox: bind %s at %s: one is a directory, the other is not", b.Source, b.Target)
		}
		out = append(out, b)
	}
	return out, nil
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
	if s.MaxProcs > 0 && !(useCg && r.cg.pids) {
		n := uint64(s.MaxProcs)
		cfg.Limits = append(cfg.Limits, rlimitSetting{Name: "RLIMIT_NPROC", Resource: unix.RLIMIT_NPROC, Cur: n, Max: n})
	}
	if s.MemoryBytes > 0 && !(useCg && r.cg.memory) {
		n := uint64(s.MemoryBytes)
		// Must stay last: see runInitHelper.
		cfg.Limits = append(cfg.Limits, rlimitSetting{Name: "RLIMIT_AS", Resource: unix.RLIMIT_AS, Cur: n, Max: n})
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
	cfgF, err := configFile(r.config(v, useCg))
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
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{initArgv0},
		Env:         []string{initEnvVar + "=" + initEnvValue},
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

func (r *runner) execute(ctx context.Context, lost <-chan struct{}, res *Result) (err error) {
	if r.outR, r.outW, err = os.Pipe(); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	defer r.outR.Close()
	if r.errR, r.errW, err = os.Pipe(); err != nil {
		r.outW.Close()
		return fmt.Errorf("sandbox: %w", err)
	}
	defer r.errR.Close()

	if plainForced() {
		r.note(plainEnvVar + "=1: no namespaces and no cgroup (test setting)")
	} else {
		cg, notes := newCgroup(r.spec.MemoryBytes, r.spec.MaxProcs)
		r.cg = cg
		r.note(notes...)
	}
	defer func() {
		if r.cg != nil {
			if rmErr := r.cg.remove(); rmErr != nil {
				r.note(fmt.Sprintf("could not remove cgroup %s: %v", r.cg.path, rmErr))
			}
			r.cg = nil
		}
	}()

	// The waiter goroutine starts the worker on a locked OS thread and
	// waits for it there (see Pdeathsig in sysProcAttr).
	var wg sync.WaitGroup
	defer wg.Wait()
	startCh := make(chan error, 1)
	waitDone := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := r.start()
		startCh <- err
		if err != nil {
			return
		}
		_ = r.cmd.Wait() // a non-zero exit is read from ProcessState
		r.exitTime = time.Now()
		close(waitDone)
	}()
	err = <-startCh
	r.outW.Close()
	r.errW.Close()
	if errors.Is(err, ErrNotIsolated) {
		return err
	}
	if err != nil {
		return fmt.Errorf("sandbox: start %s: %w", r.spec.Command[0], err)
	}
	r.reportSetup(res)

	statusCh := make(chan []string, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		data, _ := io.ReadAll(r.statusR)
		r.statusR.Close()
		statusCh <- strings.Split(strings.TrimSpace(string(data)), "\n")
	}()
	readersDone := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Add(2)
	wg.Add(3)
	go func() { defer wg.Done(); defer rwg.Done(); r.pump(r.outR, r.spec.Stdout, r.outTail, "stdout") }()
	go func() { defer wg.Done(); defer rwg.Done(); r.pump(r.errR, r.spec.Stderr, r.errTail, "stderr") }()
	go func() { defer wg.Done(); rwg.Wait(); close(readersDone) }()

	stopDeadlines := make(chan struct{})
	if r.deadlineW != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.tellDeadlines(stopDeadlines) }()
	}

	var timerC <-chan time.Time
	if r.spec.Timeout > 0 {
		t := time.NewTimer(r.spec.Timeout)
		defer t.Stop()
		timerC = t.C
	}

	var status []string
	gotStatus, execFailed := false, false
	stCh := statusCh
	reason := ""
loop:
	for {
		select {
		case status = <-stCh:
			gotStatus, stCh = true, nil
			if statusError(status, r.path) != nil {
				execFailed = true
				break loop
			}
		case <-waitDone:
			break loop
		case <-ctx.Done():
			reason = StoppedCancelled
			break loop
		case <-lost:
			reason = StoppedLeaseLost
			break loop
		case <-timerC:
			reason = StoppedTimeout
			break loop
		}
	}
	// While the tree is stopped the supervisor is still told every new
	// deadline: a graceful stop (a timeout, a cancel) keeps the lease and
	// has its whole kill grace, and the lease's end still bounds it.
	switch {
	case execFailed:
		r.terminate(waitDone, 0, nil)
	case reason == StoppedLeaseLost:
		lostGrace := min(r.grace, max(r.spec.LostGrace, 0))
		r.stopNote("the lease was lost", r.terminateWithin(waitDone, lostGrace, r.lostWait(), nil), lostGrace)
	case reason != "":
		r.stopNote(stopCause(reason, r.spec.Timeout), r.terminate(waitDone, r.grace, lost), r.grace)
	default:
		if !r.allGone(waitDone) {
			r.note("the worker exited but left processes behind; they were terminated")
			r.terminate(waitDone, r.grace, lost)
		}
	}
	close(stopDeadlines)
	if !gotStatus {
		status = <-statusCh // the helper is gone, so its status pipe is at EOF
	}
	select {
	case <-readersDone:
	case <-time.After(time.Second):
		// Only possible when a process escaped all tracking (setsid
		// without cgroup or PID namespace, after the worker killed its
		// supervisor) and still holds the pipes.
		r.note("worker output pipes are still held open by an untracked process; output capture stopped")
		_ = r.outR.SetReadDeadline(time.Now())
		_ = r.errR.SetReadDeadline(time.Now())
		<-readersDone
	}
	wg.Wait()

	for _, line := range status {
		if n, ok := strings.CutPrefix(line, "note:"); ok {
			r.note(n)
		}
	}
	if r.lent() && !slices.Contains(status, "returned:") {
		r.reclaim() // the supervisor died before it gave back (OOM, SIGKILL)
	}
	if err := statusError(status, r.path); err != nil {
		return err
	}
	if reason == "" && slices.Contains(status, "deadline:") {
		// The supervisor stopped the tree at the lease deadline while
		// Run heard nothing of the loss (its caller was frozen, say):
		// lost all the same.
		reason = StoppedLeaseLost
	}
	r.collect(res, reason, status)
	return nil
}

// workerStatus extracts the worker's wait status reported by the supervisor.
func workerStatus(status []string) (syscall.WaitStatus, bool) {
	for _, line := range status {
		if v, ok := strings.CutPrefix(line, "exit:"); ok {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return 0, false
			}
			return syscall.WaitStatus(n), true
		}
	}
	return 0, false
}

// statusError extracts a fatal error reported by the init helper.
func statusError(status []string, path string) error {
	for _, line := range status {
		if v, ok := strings.CutPrefix(line, "execerr:"); ok {
			n, _ := strconv.Atoi(v)
			return fmt.Errorf("sandbox: %w", &exec.Error{Name: path, Err: syscall.Errno(n)})
		}
		if v, ok := strings.CutPrefix(line, "error:"); ok {
			return fmt.Errorf("sandbox: %s", v)
		}
		if v, ok := strings.CutPrefix(line, "isolation:"); ok {
			return fmt.Errorf("%w: %s", ErrNotIsolated, v)
		}
	}
	return nil
}

// reportSetup records how isolation and limits were actually applied.
func (r *runner) reportSetup(res *Result) {
	s := r.spec
	if r.nsUsed.flags != 0 {
		res.Isolation = IsolationNamespaces // also when only Hide asked for them
	}
	if s.Isolate && !r.confined {
		if r.nsUsed.flags != 0 {
			if r.nsUsed.user {
				r.note("namespaces: " + r.nsUsed.String() + " (a user namespace was needed)")
			}
		} else {
			r.note("isolation requested but namespaces are unavailable (see the start fallback note): the worker shares the executor's PID and mount namespaces")
		}
	}
	// Confined and no-network runs start only with their namespaces
	// (start), so these hold whenever Run got this far.
	res.Confined, res.Hidden = r.confined, r.confined && len(s.Hide) > 0
	if r.confined {
		res.Identity = r.id
	}
	if r.cg != nil && !r.cgUsed {
		r.note("the worker could not be placed in its cgroup; tracking by process group only")
		if err := r.cg.remove(); err != nil {
			r.note(fmt.Sprintf("could not remove cgroup %s: %v", r.cg.path, err))
		}
		r.cg = nil
	}
	if s.MemoryBytes > 0 {
		if r.cgUsed && r.cg.memory {
			res.MemoryLimit = LimitCgroup
		} else {
			res.MemoryLimit = LimitRlimit
			r.note("memory limit applied as RLIMIT_AS (virtual address space, per process): allocations beyond it fail inside the worker, which then exits or crashes on its own; StoppedBy cannot report \"memory\" in this mode")
		}
	}
	if s.MaxProcs > 0 && !(r.cgUsed && r.cg.pids) {
		msg := "MaxProcs applied as RLIMIT_NPROC, which counts all processes of the worker's user"
		if r.id.UID != r.plan.uid {
			msg += " (an id of this run's own)"
		}
		if r.id.UID == 0 {
			msg += "; the kernel ignores RLIMIT_NPROC for root, so MaxProcs is NOT enforced"
		}
		r.note(msg)
	}
}

func (r *runner) pump(f *os.File, w io.Writer, tail *tailBuffer, name string) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			_, _ = tail.Write(buf[:n])
			if w != nil {
				r.writeMu.Lock()
				_, werr := w.Write(buf[:n])
				r.writeMu.Unlock()
				if werr != nil {
					r.note(fmt.Sprintf("%s writer failed (%v); output is still captured", name, werr))
					w = nil
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *runner) signalAll(sig syscall.Signal) {
	_ = syscall.Kill(-r.pgid, sig)
	if !r.cgUsed {
		return
	}
	// The cgroup also holds what left the process group. Only those: a
	// process signalled twice may take both (a shell runs its TERM trap
	// twice, and a 2s cleanup then needs 4s of the kill grace).
	for _, pid := range r.cg.procs() {
		if pg, err := syscall.Getpgid(pid); err != nil || pg != r.pgid {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// allGone reports whether the worker has exited and nothing of its process
// group or cgroup is left.
func (r *runner) allGone(waitDone <-chan struct{}) bool {
	select {
	case <-waitDone:
	default:
		return false
	}
	if pgroupAlive(r.pgid) {
		return false
	}
	return !r.cgUsed || r.cg.empty()
}

func (r *runner) waitGone(waitDone <-chan struct{}, d time.Duration) bool {
	gone, _ := r.waitGoneOr(waitDone, d, nil)
	return gone
}

// waitGoneOr is waitGone that also stops waiting when lost closes.
func (r *runner) waitGoneOr(waitDone <-chan struct{}, d time.Duration, lost <-chan struct{}) (gone, lostNow bool) {
	deadline := time.Now().Add(d)
	for {
		if r.allGone(waitDone) {
			return true, false
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, false
		}
		select {
		case <-lost:
			return false, true
		case <-time.After(min(left, 10*time.Millisecond)):
		}
	}
}

// terminate sends SIGTERM to everything, waits up to grace, then SIGKILLs
// until nothing is left. It returns only once the worker itself has exited.
func (r *runner) terminate(waitDone <-chan struct{}, grace time.Duration, lost <-chan struct{}) stopped {
	return r.terminateWithin(waitDone, grace, supervisorWait, lost)
}

// stopped is how a terminate went.
type stopped struct {
	took      time.Duration // from SIGTERM until the tree was gone
	killed    bool          // the grace ran out: SIGKILL
	lostAfter time.Duration // > 0: the lease was lost this long into the grace
}

// stopCause says why Run stopped the worker, for stopNote.
func stopCause(reason string, timeout time.Duration) string {
	switch reason {
	case StoppedTimeout:
		return fmt.Sprintf("it ran past its %v timeout", timeout)
	case StoppedCancelled:
		return "the run was cancelled"
	}
	return "stopped (" + reason + ")"
}

// stopNote tells how stopping the worker went, so that the caller's
// report says what really happened.
func (r *runner) stopNote(cause string, st stopped, grace time.Duration) {
	round := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	switch {
	case grace <= 0:
		r.note(fmt.Sprintf("%s: the worker was killed at once", cause))
	case st.lostAfter > 0:
		r.note(fmt.Sprintf("%s: SIGTERM; the lease was lost %v into the %v kill grace, so the worker was killed then", cause, round(st.lostAfter), grace))
	case st.killed:
		r.note(fmt.Sprintf("%s: SIGTERM; the worker was still running after its %v kill grace and was killed", cause, grace))
	default:
		r.note(fmt.Sprintf("%s: SIGTERM; the worker was gone %v later, within its %v kill grace", cause, round(st.took), grace))
	}
}

// supervisorWait is how long terminate lets the supervisor kill the tree
// before the SIGKILL backstop, unless a lease loss bounds it (lostWait).
const supervisorWait = 2 * time.Second

// lostWait bounds the supervisor's turn after a lease loss: the work must
// be gone within about twice LostGrace (the holder's margin), also when the
// supervisor does not answer (a worker outside a PID namespace can stop
// it: same user).
func (r *runner) lostWait() time.Duration {
	return min(supervisorWait, max(r.spec.LostGrace, 100*time.Millisecond))
}

// terminateWithin is terminate with the supervisor's turn bounded by
// supWait. If lost closes during the grace, the lease is gone: the grace
// ends then, and the supervisor's turn is bounded as after a loss.
func (r *runner) terminateWithin(waitDone <-chan struct{}, grace, supWait time.Duration, lost <-chan struct{}) (st stopped) {
	start := time.Now()
	defer func() { st.took = time.Since(start) }()
	if grace > 0 {
		r.signalAll(syscall.SIGTERM)
		gone, lostNow := r.waitGoneOr(waitDone, grace, lost)
		if gone {
			return st
		}
		if lostNow {
			st.lostAfter = max(time.Since(start), time.Nanosecond)
			supWait = min(supWait, r.lostWait())
		}
	}
	st.killed = true
	// The supervisor kills the whole tree, also what left the process
	// group or session, and reports the worker's status: give it the
	// first go, the signals below are the backstop.
	_ = r.cmd.Process.Signal(superviseSignal)
	if r.waitGone(waitDone, supWait) {
		return st
	}
	killStart := time.Now()
	for {
		// Repeated: a process that forked between two rounds is caught by
		// the next one.
		r.signalAll(syscall.SIGKILL)
		if r.cgUsed {
			r.cg.kill()
		}
		if r.waitGone(waitDone, 20*time.Millisecond) {
			return st
		}
		select {
		case <-waitDone:
			if time.Since(killStart) > 10*time.Second {
				r.note("some processes of the worker survived SIGKILL for 10s (uninterruptible sleep?)")
				return st
			}
		default:
			// The worker itself is still there: SIGKILL always wins in
			// the end, keep going.
		}
	}
}

// collect fills the result from the exit status, rusage and cgroup stats.
// The worker's own wait status comes from the supervisor ("exit:" on the
// status pipe); the supervisor's is used only when it died before telling
// (SIGKILLed with the process group, OOM kill of the cgroup). The rusage is
// the supervisor's, which includes the worker it reaped.
func (r *runner) collect(res *Result, reason string, status []string) {
	ps := r.cmd.ProcessState
	ws, _ := ps.Sys().(syscall.WaitStatus)
	if w, ok := workerStatus(status); ok {
		ws = w
	}
	ru, _ := ps.SysUsage().(*syscall.Rusage)
	res.ExitCode = -1
	if ws.Exited() {
		res.ExitCode = ws.ExitStatus()
	}
	if ws.Signaled() {
		res.ExitCode = -1
		res.Signal = ws.Signal().String()
	}
	res.Duration = r.exitTime.Sub(r.startTime)
	var ooms int64
	if r.cgUsed && r.cg.memory {
		res.PeakMemoryBytes = r.cg.peak()
		ooms = r.cg.oomKills()
	}
	if res.PeakMemoryBytes == 0 && ru != nil {
		res.PeakMemoryBytes = ru.Maxrss * 1024
	}
	res.StdoutTail, res.StderrTail = r.outTail.Bytes(), r.errTail.Bytes()

	switch {
	case reason != "":
		res.StoppedBy = reason
	case ooms > 0:
		res.StoppedBy = StoppedMemory
	case ws.Signaled() && ws.Signal() == syscall.SIGXCPU:
		res.StoppedBy = StoppedCPU
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL && r.spec.CPUTime > 0 && ru != nil:
		// The hard RLIMIT_CPU (soft + 1s) kills with SIGKILL. Best effort:
		// a SIGKILL we did not send, after the soft limit was reached. The
		// rusage times can read up to ~10% low (observed under load), and
		// they also count reaped children while RLIMIT_CPU is per process.
		used := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		if used >= cpuSeconds(r.spec.CPUTime)*9/10 {
			res.StoppedBy = StoppedCPU
		}
	}
}

// deadlineEvery is how often Run reads Spec.Deadline again.
const deadlineEvery = 25 * time.Millisecond

// tellDeadlines hands the supervisor every new value of Spec.Deadline, as
// CLOCK_MONOTONIC nanoseconds, until stop closes; then it closes the pipe.
func (r *runner) tellDeadlines(stop <-chan struct{}) {
	defer r.deadlineW.Close()
	t := time.NewTicker(deadlineEvery)
	defer t.Stop()
	var last time.Time
	for {
		if d := r.spec.Deadline(); !d.Equal(last) {
			last = d
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], uint64(monotonicNow()+int64(time.Until(d))))
			if _, err := r.deadlineW.Write(b[:]); err != nil {
				return // the supervisor is gone
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

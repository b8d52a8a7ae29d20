//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
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
	v1                     *v1Limits // the limits cg's controllers could not take, if any
	cpu                    *cpuGroup // the worker's own cpu group (v1), if any
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

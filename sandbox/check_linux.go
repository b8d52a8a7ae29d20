//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// CheckConfine tells whether confined runs (Spec.Confine, Spec.Hide) can
// start here, and how their workers would run. It starts a helper the way
// Run starts a confined run's supervisor, in the same namespaces with the
// same id maps, and has it do what the supervisor does before the worker
// starts: lend a directory to the worker's ids, make every mount
// read-only, bind that directory writable, mount a /dev/shm of its own, a
// fresh /proc and a hiding tmpfs, give the directory back and switch to
// the worker's ids. The error (matching ErrNotIsolated) names, for each
// set of namespaces tried, the step that failed. Init must have been
// called. Callers that confine by default call it once at start, to refuse
// to start (or to run unconfined only when told to) where confinement is
// impossible. Where the namespaces work but a worker could only run as
// uid 0 or gid 0, the error is a *WorkerIDsError: confinement is possible
// but for its ids, and running unconfined would not help (the worker
// would keep the executor's ids).
func CheckConfine() (Confinement, error) {
	if !initHookCalled.Load() {
		return Confinement{}, ErrInitNotCalled
	}
	sweepSandboxTemp() // those of executors that crashed
	dir, err := MkdirTemp(TempProbe)
	if err != nil {
		return Confinement{}, fmt.Errorf("%w: a directory for the check: %v", ErrNotIsolated, err)
	}
	defer os.RemoveAll(dir)
	hidden := filepath.Join(dir, "hidden")
	if err := os.Mkdir(hidden, 0o700); err != nil {
		return Confinement{}, fmt.Errorf("%w: a directory for the check: %v", ErrNotIsolated, err)
	}
	dir, _ = filepath.EvalSymlinks(dir)
	plan := currentPlan()
	c := Confinement{Identity: plan.kind, Why: plan.why}
	if plan.kind == IdentityExecutor {
		c.UIDs, c.GIDs = fmt.Sprint(plan.uid), fmt.Sprint(plan.gid)
	} else {
		c.UIDs, c.GIDs = plan.uids.String(), plan.gids.String()
	}
	r := &runner{spec: Spec{Confine: true}, plan: plan, confined: true, workdir: dir,
		lend: []string{dir}, hide: []hiddenPath{{Path: filepath.Join(dir, "hidden"), Dir: true}}}
	// Where a worker's ids would be 0 no run starts; the namespaces are
	// probed all the same, with the executor's ids, for the caller to
	// tell a machine without them (where an opt-out may run workers
	// unconfined) from one that lacks only the ids.
	var probeAs *Identity
	if plan.refused != nil {
		probeAs = &Identity{UID: plan.uid, GID: plan.gid, Kind: IdentityExecutor}
	}
	var failures []string
	for _, v := range r.nsVariants() {
		err := r.probe(v, probeAs)
		if err == nil {
			c.Namespaces = v.String()
			if plan.refused != nil {
				return c, plan.refused
			}
			probedUserOnly.Store(v.user)
			return c, nil
		}
		failures = append(failures, fmt.Sprintf("namespaces %s: %v", v, err))
	}
	if len(failures) == 0 {
		failures = append(failures, plainEnvVar+"=1 (test setting): no namespaces")
	}
	if plan.refused != nil {
		failures = append(failures, "and with namespaces: "+plan.refused.Reason())
	}
	return c, fmt.Errorf("%w: %s", ErrNotIsolated, strings.Join(failures, "; "))
}

// probe runs CheckConfine's helper in the namespaces of v, switching to
// the ids as, or to a new run's if nil.
func (r *runner) probe(v nsVariant, as *Identity) error {
	cfg := r.config(v, false)
	cfg.Path, cfg.Argv = "/bin/true", []string{"true"} // never run
	status, err := r.runHelper(initProbeValue, v, cfg, as)
	for _, line := range status {
		for _, kind := range []string{"isolation:", "error:"} {
			if msg, ok := strings.CutPrefix(line, kind); ok {
				return errors.New(msg)
			}
		}
	}
	return err
}

// runHelper starts this binary as a helper (probe or reclaim) with cfg on
// fd 3, hands it over (id maps, the worker's ids: id, or those of a new
// run if nil) and waits for it. It returns the helper's status lines.
func (r *runner) runHelper(marker string, v nsVariant, cfg initConfig, id *Identity) ([]string, error) {
	cfgF, err := configFile(cfg)
	if err != nil {
		return nil, err
	}
	defer cfgF.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusR.Close()
	hoR, hoW, err := os.Pipe()
	if err != nil {
		statusW.Close()
		return nil, err
	}
	attr := r.sysProcAttr(v, false)
	attr.Setpgid = false
	// The parent-death signal belongs to the forking thread: keep it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{initArgv0},
		Env:         helperEnv(initEnvVar + "=" + marker),
		Dir:         "/",
		ExtraFiles:  []*os.File{cfgF, statusW, hoR},
		SysProcAttr: attr,
	}
	err = cmd.Start()
	statusW.Close()
	hoR.Close()
	if err != nil {
		hoW.Close()
		return nil, err
	}
	if _, err := r.handOver(v, cmd.Process.Pid, hoW, id); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	data, _ := io.ReadAll(io.LimitReader(statusR, 64<<10))
	werr := cmd.Wait()
	return strings.Split(strings.TrimSpace(string(data)), "\n"), werr
}

// probeHelper is CheckConfine's helper: it sets up what a confined run's
// supervisor sets up, gives the directory back, switches to the worker's
// ids and exits 0; or reports the step that failed ("isolation:").
func probeHelper() {
	runtime.LockOSThread() // switchIDs changes this thread's ids
	h := readHandover()
	cfg := readInitConfig()
	cfg.UID, cfg.GID, cfg.DropGroups = h.UID, h.GID, h.DropGroups
	if err := confine(cfg); err != nil {
		isolationFail(err)
	}
	giveBack()
	if err := switchIDs(cfg.UID, cfg.GID, cfg.DropGroups); err != nil {
		isolationFail(err)
	}
	unix.Exit(0)
}

// lent reports whether this run lent files to its worker: it was
// confined with ids other than the executor's.
func (r *runner) lent() bool {
	return r.confined && r.id.Kind != IdentityExecutor && len(r.lend) > 0
}

// reclaim gives back what the supervisor lent to the worker when it could
// not (it was killed with the worker's cgroup on an OOM, or by the SIGKILL
// backstop): the worker's tree is gone by now. A process that may chown
// (root) does it itself; others start a helper in a user namespace with
// the run's id maps.
func (r *runner) reclaim() {
	skip := make([]string, 0, len(r.hide)+len(r.binds))
	for _, h := range r.hide {
		skip = append(skip, h.Path)
	}
	for _, b := range r.binds {
		skip = append(skip, b.Target)
	}
	var errs []string
	if r.plan.canMap {
		for _, p := range r.lend {
			if err := shiftOwners(p, skip, r.id.UID, r.plan.uid, r.id.GID, r.plan.gid); err != nil {
				errs = append(errs, err.Error())
			}
		}
	} else {
		cfg := initConfig{Path: "/bin/true", Argv: []string{"true"}, Lend: r.lend, Hide: r.hide, Binds: r.binds}
		status, err := r.runHelper(initReclaimValue, nsVariant{flags: unix.CLONE_NEWUSER, user: true}, cfg, &r.id)
		for _, line := range status {
			if n, ok := strings.CutPrefix(line, "note:"); ok {
				errs = append(errs, n)
			}
		}
		if err != nil && len(errs) == 0 {
			errs = append(errs, err.Error())
		}
		if err == nil && !slices.Contains(status, "returned:") && len(errs) == 0 {
			errs = append(errs, "the helper did not say it had")
		}
	}
	if len(errs) > 0 {
		r.note(fmt.Sprintf("the supervisor did not give back what it lent to the worker (uid %d, gid %d), and neither could the executor: %s",
			r.id.UID, r.id.GID, strings.Join(errs, "; ")))
		return
	}
	r.note(fmt.Sprintf("the executor gave back what was lent to the worker (uid %d, gid %d): the supervisor had not", r.id.UID, r.id.GID))
}

// reclaimHelper is the helper reclaim starts: in a user namespace mapping
// the executor's and the worker's ids, it gives the lent paths back.
func reclaimHelper() {
	h := readHandover()
	cfg := readInitConfig()
	lent.paths, lent.fromUID, lent.toUID, lent.fromGID, lent.toGID = cfg.Lend, os.Getuid(), h.UID, os.Getgid(), h.GID
	for _, p := range cfg.Hide {
		lent.skip = append(lent.skip, p.Path)
	}
	for _, b := range cfg.Binds {
		lent.skip = append(lent.skip, b.Target)
	}
	lent.active = true
	giveBack()
	unix.Exit(0)
}

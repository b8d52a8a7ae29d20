//go:build linux

package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The worker's identity.
//
// A confined worker never runs as the executor's uid when any other id can
// be had, nor as uid 0. Where its ids come from depends on who runs the
// executor (idPlan):
//
//   - Root (CAP_SETUID and CAP_SETGID in its user namespace): one uid and
//     gid per run from ownRange, which no account uses, picked by the
//     supervisor's pid (so two live runs never share one), and mapped by
//     the executor itself. Without a user namespace (root's first choice)
//     the worker switches to them with setresuid; in one, the executor
//     writes the maps.
//   - A user with subordinate ids (a range in /etc/subuid and /etc/subgid,
//     and newuidmap and newgidmap, Debian's uidmap package): one of them
//     per run, mapped by newuidmap and newgidmap into the worker's user
//     namespace. A range smaller than the machine's pid_max (65536 is the
//     usual) can give two live runs the same id; they still see each
//     other's working directories only read-only, through the read-only
//     view.
//   - A user without subordinate ids: the kernel lets it map nothing but
//     its own uid and gid, so the worker keeps them (IdentityExecutor),
//     and its supplementary groups (setgroups is denied in a user
//     namespace such a user maps). The read-only view and the hidden paths
//     are then what keep the worker from the user's files.
//
// Never uid 0 or gid 0, as the executor's user namespace sees them,
// whatever it maps (refusal): where the only ids to be had are the
// executor's own and one of them is 0 (root in a container whose
// uid_map is "0 0 1", or that maps no range of 3 ids; root without
// CAP_SETUID and without subordinate ids; a user whose gid is 0), or
// where the worker would keep a supplementary group 0, a confined run
// starts nothing and returns a *WorkerIDsError. Ids of the worker's own
// are never 0 either: pick skips it, in a mapped range or a subordinate
// one that starts at 0.
//
// The maps are written after the supervisor has exec'd, before it makes
// itself non-dumpable: a non-dumpable process (the executor is one, and
// its fork inherits it until exec) has a root-owned /proc/<pid>, so a
// non-root parent could not open the child's uid_map, nor newuidmap (which
// checks that the caller owns the target) act on it. The supervisor waits
// for the executor's word (handover) before doing anything else.

// ownRange is where root's workers get their ids: above systemd's
// container ranges (up to 0x6FFFFFFF), below the ids it reserves near
// 2^31, and as large as the kernel's largest pid_max (PID_MAX_LIMIT), so
// that the supervisor's pid names one id no other live run has.
var ownRange = idRange{start: 0x70000000, count: 1 << 22}

// idRange is a range of ids, as the executor's user namespace sees them.
type idRange struct{ start, count uint64 }

func (r idRange) String() string {
	return fmt.Sprintf("%d-%d", r.start, r.start+r.count-1)
}

// pick is the id of the run whose supervisor has pid: never avoid (the
// executor's own id) nor 0. Of 3 ids in a row at most 2 are those, and
// mappedRange and subordinateRange take no range of fewer.
func (r idRange) pick(pid, avoid int) int {
	n := uint64(pid) % r.count
	for range 3 {
		if id := r.start + n; id != uint64(avoid) && id != 0 {
			return int(id)
		}
		n = (n + 1) % r.count
	}
	return int(r.start + n) // unreachable: ranges hold at least 3 ids
}

// idPlan is how this process's confined workers get their identity.
type idPlan struct {
	kind       string  // IdentityOwnRange, IdentitySubordinate or IdentityExecutor
	uids, gids idRange // where worker ids come from (not for IdentityExecutor)
	uid, gid   int     // the executor's
	// canMap: this process may write any map of ids its own user
	// namespace has (CAP_SETUID and CAP_SETGID there).
	canMap bool
	// canNamespace: it may create PID and mount namespaces without a user
	// namespace (CAP_SYS_ADMIN).
	canNamespace bool
	// setgroups: its user namespace lets it drop supplementary groups
	// (not one made by `unshare -r`, which denies setgroups, nor any
	// below one).
	setgroups            bool
	newuidmap, newgidmap string
	// why says, for IdentityExecutor, what is missing for ids of its own.
	why string
	// refused is set where a confined worker could only run as uid 0 or
	// gid 0 (refusal): such runs start nothing.
	refused *WorkerIDsError
}

// planFacts are what a plan is made from: this process's ids and
// capabilities, and the files its ids' maps and subordinate ranges are
// read from. makePlan reads them from the process; tests make them up.
type planFacts struct {
	uid, gid int
	groups   []int // supplementary groups, as this namespace shows them
	// canMap, canNamespace, setgroups: see idPlan.
	canMap, canNamespace, setgroups bool
	uidMap, gidMap                  string // /proc/self/uid_map, gid_map
	subuid, subgid                  string // /etc/subuid, /etc/subgid
	// names are who a line of subuid and subgid may name for this user:
	// its uid, and its name where the user database has it (else
	// userErr says so: newuidmap needs the entry).
	names                []string
	userErr              string
	newuidmap, newgidmap string // "" where not installed
}

var planOnce = sync.OnceValue(makePlan)

// currentPlan is this process's plan, worked out once.
func currentPlan() *idPlan { return planOnce() }

func makePlan() *idPlan { return planFrom(readFacts()) }

// readFacts reads this process's planFacts.
func readFacts() planFacts {
	f := planFacts{uid: os.Geteuid(), gid: os.Getegid(), setgroups: setgroupsAllowed("/proc/self/setgroups"),
		uidMap: "/proc/self/uid_map", gidMap: "/proc/self/gid_map", subuid: "/etc/subuid", subgid: "/etc/subgid"}
	f.groups, _ = os.Getgroups()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) == nil {
		has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
		f.canMap = has(unix.CAP_SETUID) && has(unix.CAP_SETGID)
		f.canNamespace = has(unix.CAP_SYS_ADMIN)
	}
	f.newuidmap, f.newgidmap = findTool("newuidmap"), findTool("newgidmap")
	owner := strconv.Itoa(f.uid)
	f.names = []string{owner}
	if u, err := user.LookupId(owner); err == nil {
		f.names = append(f.names, u.Username)
	} else {
		f.userErr = fmt.Sprintf("uid %d has no entry in the user database, which newuidmap needs", f.uid)
	}
	return f
}

// findTool is the path of newuidmap or newgidmap, or "".
func findTool(name string) string {
	if path, err := exec.LookPath(name); err == nil {
		return path
	}
	if _, err := os.Stat("/usr/bin/" + name); err == nil {
		return "/usr/bin/" + name
	}
	return ""
}

// planFrom works out the plan of a process with facts f.
func planFrom(f planFacts) *idPlan {
	p := &idPlan{kind: IdentityExecutor, uid: f.uid, gid: f.gid, canMap: f.canMap, canNamespace: f.canNamespace,
		setgroups: f.setgroups, newuidmap: f.newuidmap, newgidmap: f.newgidmap}
	if p.canMap {
		uids, uerr := mappedRange(f.uidMap)
		gids, gerr := mappedRange(f.gidMap)
		if uerr == nil && gerr == nil {
			p.kind, p.uids, p.gids = IdentityOwnRange, uids, gids
		} else {
			var errs []string
			for _, err := range []error{uerr, gerr} {
				if err != nil {
					errs = append(errs, err.Error())
				}
			}
			p.why = fmt.Sprintf("this user namespace maps no ids but the executor's own (%s)", strings.Join(errs, "; "))
		}
	} else {
		p.kind, p.why = p.subordinate(f)
	}
	p.refused = p.refusal(f.groups)
	return p
}

// setgroupsAllowed reads a /proc/<pid>/setgroups file: "allow", or no
// such file (kernels before 3.19 have no way to deny it).
func setgroupsAllowed(file string) bool {
	data, err := os.ReadFile(file)
	return os.IsNotExist(err) || (err == nil && strings.TrimSpace(string(data)) == "allow")
}

// mappedRange is ownRange if this user namespace maps all of it, else the
// largest range of ids it maps with at least 3 ids.
func mappedRange(mapFile string) (idRange, error) {
	data, err := os.ReadFile(mapFile)
	if err != nil {
		return idRange{}, err
	}
	var best idRange
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		inside, err1 := strconv.ParseUint(f[0], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		if inside <= ownRange.start && ownRange.start+ownRange.count <= inside+count {
			return ownRange, nil
		}
		if count > best.count {
			best = idRange{start: inside, count: count}
		}
	}
	if best.count < 3 {
		return idRange{}, fmt.Errorf("%s: no range of 3 ids or more", mapFile)
	}
	return best, nil
}

// subordinate looks for subordinate ids of the executor's user and the
// tools that map them; it returns IdentitySubordinate, or
// IdentityExecutor and what is missing.
func (p *idPlan) subordinate(f planFacts) (kind, why string) {
	var missing []string
	for _, t := range []struct{ name, path string }{{"newuidmap", f.newuidmap}, {"newgidmap", f.newgidmap}} {
		if t.path == "" {
			missing = append(missing, t.name+" is not installed (Debian package uidmap)")
		}
	}
	if f.userErr != "" {
		missing = append(missing, f.userErr)
	}
	var err error
	if p.uids, err = subordinateRange(f.subuid, f.names); err != nil {
		missing = append(missing, err.Error())
	}
	if p.gids, err = subordinateRange(f.subgid, f.names); err != nil {
		missing = append(missing, err.Error())
	}
	if len(missing) > 0 {
		return IdentityExecutor, strings.Join(missing, "; ")
	}
	return IdentitySubordinate, ""
}

// subordinateRange is the first range of /etc/subuid or /etc/subgid owned
// by one of names (user name or uid) with at least 3 ids.
func subordinateRange(file string, names []string) (idRange, error) {
	f, err := os.Open(file)
	if err != nil {
		return idRange{}, fmt.Errorf("no %s (%v)", file, errors.Unwrap(err))
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || !slices.Contains(names, parts[0]) {
			continue
		}
		start, err1 := strconv.ParseUint(parts[1], 10, 32)
		count, err2 := strconv.ParseUint(parts[2], 10, 32)
		if err1 == nil && err2 == nil && count >= 3 && start+count <= 1<<32-1 {
			return idRange{start: start, count: count}, nil
		}
	}
	return idRange{}, fmt.Errorf("%s has no range of 3 ids or more for %s", file, strings.Join(names, " or "))
}

// identity is the identity of a run whose supervisor has pid; not
// confined runs keep the executor's. A confined one is never uid 0 or
// gid 0: the plan refuses it (refusal), and the last check here keeps
// any later way to 0 from reaching a worker.
func (p *idPlan) identity(pid int, confined bool) (Identity, error) {
	own := Identity{UID: p.uid, GID: p.gid, Kind: IdentityExecutor}
	switch {
	case !confined:
		return own, nil
	case p.refused != nil:
		return own, p.refused
	}
	id := own
	if p.kind != IdentityExecutor {
		id = Identity{UID: p.uids.pick(pid, p.uid), GID: p.gids.pick(pid, p.gid), Kind: p.kind}
	}
	if id.UID == 0 || id.GID == 0 {
		return id, &WorkerIDsError{UID: id.UID, GID: id.GID, Why: fmt.Sprintf("the %s ids picked are uid %d, gid %d", id.Kind, id.UID, id.GID)}
	}
	return id, nil
}

// mapTimeout bounds newuidmap and newgidmap.
const mapTimeout = 10 * time.Second

// writeMaps writes the id maps of the user namespace of the process pid
// (the supervisor, just exec'd) so that the executor's ids map to
// themselves and, for a worker of its own, the worker's ids to
// themselves. It reports whether the worker may drop its supplementary
// groups (setgroups is allowed in that namespace). Errors name the step.
func (p *idPlan) writeMaps(pid int, id Identity) (dropGroups bool, err error) {
	proc := "/proc/" + strconv.Itoa(pid)
	own := id.UID == p.uid && id.GID == p.gid
	switch {
	case p.canMap:
		uids, gids := fmt.Sprintf("%d %d 1\n", p.uid, p.uid), fmt.Sprintf("%d %d 1\n", p.gid, p.gid)
		if !own {
			uids += fmt.Sprintf("%d %d 1\n", id.UID, id.UID)
			gids += fmt.Sprintf("%d %d 1\n", id.GID, id.GID)
		}
		if err := writeProcFile(proc+"/uid_map", uids); err != nil {
			return false, err
		}
		if err := writeProcFile(proc+"/gid_map", gids); err != nil {
			return false, err
		}
		return setgroupsAllowed(proc + "/setgroups"), nil
	case !own:
		// newuidmap and newgidmap check the ranges against /etc/subuid
		// and /etc/subgid; the executor's own id may always be mapped.
		for _, m := range []struct {
			tool      string
			own, work int
		}{{p.newuidmap, p.uid, id.UID}, {p.newgidmap, p.gid, id.GID}} {
			if err := runMapTool(m.tool, pid, m.own, m.work); err != nil {
				return false, err
			}
		}
		return setgroupsAllowed(proc + "/setgroups"), nil
	default:
		// An unprivileged process may map only its own ids, and its gid
		// only with setgroups denied.
		if err := writeProcFile(proc+"/setgroups", "deny"); err != nil {
			return false, err
		}
		if err := writeProcFile(proc+"/uid_map", fmt.Sprintf("%d %d 1\n", p.uid, p.uid)); err != nil {
			return false, err
		}
		return false, writeProcFile(proc+"/gid_map", fmt.Sprintf("%d %d 1\n", p.gid, p.gid))
	}
}

// writeProcFile writes data in one write(2), as the id map files need.
func writeProcFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, errors.Unwrap(err))
	}
	_, err = f.Write([]byte(data))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", strings.TrimSpace(data), path, errors.Unwrap(err))
	}
	return nil
}

func runMapTool(tool string, pid, own, work int) error {
	ctx, cancel := context.WithTimeout(context.Background(), mapTimeout)
	defer cancel()
	args := []string{strconv.Itoa(pid), strconv.Itoa(own), strconv.Itoa(own), "1", strconv.Itoa(work), strconv.Itoa(work), "1"}
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = []string{"PATH=" + DefaultPath, "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %.300s", tool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

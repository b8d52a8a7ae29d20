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
// executor's own id) nor 0.
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
}

var planOnce = sync.OnceValue(makePlan)

// currentPlan is this process's plan, worked out once.
func currentPlan() *idPlan { return planOnce() }

func makePlan() *idPlan {
	p := &idPlan{kind: IdentityExecutor, uid: os.Geteuid(), gid: os.Getegid(), setgroups: setgroupsAllowed("/proc/self/setgroups")}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) == nil {
		has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
		p.canMap = has(unix.CAP_SETUID) && has(unix.CAP_SETGID)
		p.canNamespace = has(unix.CAP_SYS_ADMIN)
	}
	if p.canMap {
		uids, uerr := mappedRange("/proc/self/uid_map", p.uid)
		gids, gerr := mappedRange("/proc/self/gid_map", p.gid)
		if uerr == nil && gerr == nil {
			p.kind, p.uids, p.gids = IdentityOwnRange, uids, gids
			return p
		}
		p.why = fmt.Sprintf("this user namespace maps no ids but the executor's own (%v)", errors.Join(uerr, gerr))
		return p
	}
	p.kind, p.why = p.subordinate()
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
func mappedRange(mapFile string, own int) (idRange, error) {
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
func (p *idPlan) subordinate() (kind, why string) {
	var missing []string
	for _, tool := range []*string{&p.newuidmap, &p.newgidmap} {
		name := "newuidmap"
		if tool == &p.newgidmap {
			name = "newgidmap"
		}
		path, err := exec.LookPath(name)
		if err != nil {
			if _, serr := os.Stat("/usr/bin/" + name); serr == nil {
				path, err = "/usr/bin/"+name, nil
			}
		}
		if err != nil {
			missing = append(missing, name+" is not installed (Debian package uidmap)")
		}
		*tool = path
	}
	owner := strconv.Itoa(p.uid)
	names := []string{owner}
	if u, err := user.LookupId(owner); err == nil {
		names = append(names, u.Username)
	} else {
		missing = append(missing, fmt.Sprintf("uid %d has no entry in the user database, which newuidmap needs", p.uid))
	}
	var err error
	if p.uids, err = subordinateRange("/etc/subuid", names, p.uid); err != nil {
		missing = append(missing, err.Error())
	}
	if p.gids, err = subordinateRange("/etc/subgid", names, p.gid); err != nil {
		missing = append(missing, err.Error())
	}
	if len(missing) > 0 {
		return IdentityExecutor, strings.Join(missing, "; ")
	}
	return IdentitySubordinate, ""
}

// subordinateRange is the first range of /etc/subuid or /etc/subgid owned
// by one of names (user name or uid) with at least 3 ids.
func subordinateRange(file string, names []string, own int) (idRange, error) {
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
// confined runs keep the executor's.
func (p *idPlan) identity(pid int, confined bool) Identity {
	if !confined || p.kind == IdentityExecutor {
		return Identity{UID: p.uid, GID: p.gid, Kind: IdentityExecutor}
	}
	return Identity{UID: p.uids.pick(pid, p.uid), GID: p.gids.pick(pid, p.gid), Kind: p.kind}
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

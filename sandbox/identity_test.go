//go:build linux

package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// planCase is a made-up process for planFrom: its ids, capabilities and
// groups, and the contents of its uid_map, gid_map, subuid and subgid.
type planCase struct {
	name                 string
	uid, gid             int
	groups               []int
	canMap, noSetgroups  bool
	uidMap, gidMap       string
	subuid, subgid       string
	noNewuidmap          bool
	kind                 string   // the plan's kind
	refused              []string // what the refusal says; nil: not refused
	uidsFrom, uidsTo     int      // where the worker's uids come from (not for IdentityExecutor)
	gidsFrom, gidsTo     int
	workerUID, workerGID int // for IdentityExecutor not refused
	checkPicksBesides0   bool
}

func (c planCase) facts(t *testing.T) planFacts {
	t.Helper()
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	name := "u"
	if c.uid == 0 {
		name = "root"
	}
	f := planFacts{uid: c.uid, gid: c.gid, groups: c.groups, canMap: c.canMap, setgroups: !c.noSetgroups,
		uidMap: file("uid_map", c.uidMap), gidMap: file("gid_map", c.gidMap),
		subuid: file("subuid", c.subuid), subgid: file("subgid", c.subgid),
		names: []string{strconv.Itoa(c.uid), name}, newuidmap: "/usr/bin/newuidmap", newgidmap: "/usr/bin/newgidmap"}
	if c.noNewuidmap {
		f.newuidmap = ""
	}
	return f
}

const fullMap = "0 0 4294967295\n"

// The id choice on made-up uid_map, gid_map, subuid and subgid contents:
// a confined worker never runs as uid 0 or gid 0, whatever the namespace
// maps (issue 38): where the executor's own ids are all there is and one
// is 0, or where the worker would keep a group 0, the plan refuses; ids of
// the worker's own skip 0 (and the executor's) in every range.
func TestWorkerIDChoice(t *testing.T) {
	for _, c := range []planCase{
		{name: "root in the initial namespace", canMap: true, uidMap: fullMap, gidMap: fullMap, groups: []int{0},
			kind: IdentityOwnRange, uidsFrom: 0x70000000, uidsTo: 0x703FFFFF, gidsFrom: 0x70000000, gidsTo: 0x703FFFFF},
		{name: "root in a container whose uid_map is 0 0 1", canMap: true, uidMap: "0 0 1\n", gidMap: "0 0 1\n", groups: []int{0},
			kind: IdentityExecutor, refused: []string{"the executor runs as uid 0", "maps no ids but the executor's own", "no range of 3 ids"}},
		{name: "root of unshare -r (0 1000 1)", canMap: true, uidMap: "0 1000 1\n", gidMap: "0 1000 1\n", noSetgroups: true,
			kind: IdentityExecutor, refused: []string{"the executor runs as uid 0"}},
		{name: "root, only ranges of 1 and 2 ids", canMap: true, uidMap: "0 0 1\n1000 1000 2\n", gidMap: fullMap,
			kind: IdentityExecutor, refused: []string{"the executor runs as uid 0", "uid_map: no range of 3 ids"}},
		{name: "root, uid_map whole but gid_map only 0", canMap: true, uidMap: fullMap, gidMap: "0 0 1\n",
			kind: IdentityExecutor, refused: []string{"the executor runs as uid 0", "gid_map: no range of 3 ids"}},
		{name: "root in a userns-remap container (0 100000 65536)", canMap: true, uidMap: "0 100000 65536\n", gidMap: "0 100000 65536\n",
			kind: IdentityOwnRange, uidsFrom: 0, uidsTo: 65535, gidsFrom: 0, gidsTo: 65535, checkPicksBesides0: true},
		{name: "root in a rootless container (0 1000 1, 1 100000 65536)", canMap: true, uidMap: "0 1000 1\n1 100000 65536\n", gidMap: "0 1000 1\n1 100000 65536\n",
			kind: IdentityOwnRange, uidsFrom: 1, uidsTo: 65536, gidsFrom: 1, gidsTo: 65536},
		{name: "root, the largest range is 0-2", canMap: true, uidMap: "0 0 3\n", gidMap: "0 0 3\n",
			kind: IdentityOwnRange, uidsFrom: 0, uidsTo: 2, gidsFrom: 0, gidsTo: 2, checkPicksBesides0: true},
		{name: "root, malformed lines skipped", canMap: true, uidMap: "garbage\n0 0\n0 0 x\n5 5 10\n", gidMap: "5 5 10\n",
			kind: IdentityOwnRange, uidsFrom: 5, uidsTo: 14, gidsFrom: 5, gidsTo: 14},
		{name: "root without CAP_SETUID, no subordinate ids", uidMap: fullMap, gidMap: fullMap,
			kind: IdentityExecutor, refused: []string{"the executor runs as uid 0", "no CAP_SETUID and CAP_SETGID", "has no range of 3 ids or more for 0 or root"}},
		{name: "root without CAP_SETUID, a subordinate range starting at 0", uidMap: fullMap, gidMap: fullMap,
			subuid: "root:0:65536\n", subgid: "root:0:65536\n",
			kind: IdentitySubordinate, uidsFrom: 0, uidsTo: 65535, gidsFrom: 0, gidsTo: 65535, checkPicksBesides0: true},
		{name: "a user, subordinate ids 0-2", uid: 1000, gid: 1000, uidMap: fullMap, gidMap: fullMap, subuid: "u:0:3\n", subgid: "u:0:3\n",
			kind: IdentitySubordinate, uidsFrom: 0, uidsTo: 2, gidsFrom: 0, gidsTo: 2, checkPicksBesides0: true},
		{name: "a user whose subordinate range holds its own uid", uid: 1000, gid: 1000, uidMap: fullMap, gidMap: fullMap,
			subuid: "1000:999:3\n", subgid: "1000:999:3\n",
			kind: IdentitySubordinate, uidsFrom: 999, uidsTo: 1001, gidsFrom: 999, gidsTo: 1001, checkPicksBesides0: true},
		{name: "a user without subordinate ids", uid: 1000, gid: 1000, groups: []int{1000, 27}, uidMap: fullMap, gidMap: fullMap,
			kind: IdentityExecutor, workerUID: 1000, workerGID: 1000},
		{name: "a user without newuidmap", uid: 1000, gid: 1000, uidMap: fullMap, gidMap: fullMap, subuid: "u:100000:65536\n", subgid: "u:100000:65536\n",
			noNewuidmap: true, kind: IdentityExecutor, workerUID: 1000, workerGID: 1000},
		{name: "a user with gid 0, no subordinate ids", uid: 1000, gid: 0, uidMap: fullMap, gidMap: fullMap,
			kind: IdentityExecutor, refused: []string{"(uid 1000) runs with gid 0", "nor subordinate ids"}},
		{name: "a user with gid 0 and subordinate ids", uid: 1000, gid: 0, uidMap: fullMap, gidMap: fullMap,
			subuid: "u:0:65536\n", subgid: "u:0:65536\n",
			kind: IdentitySubordinate, uidsFrom: 0, uidsTo: 65535, gidsFrom: 0, gidsTo: 65535, checkPicksBesides0: true},
		{name: "a user in group 0, no subordinate ids", uid: 1000, gid: 1000, groups: []int{1000, 0}, uidMap: fullMap, gidMap: fullMap,
			kind: IdentityExecutor, refused: []string{"(uid 1000) is in group 0"}},
		{name: "a user in group 0 with subordinate ids: the worker drops it", uid: 1000, gid: 1000, groups: []int{0}, uidMap: fullMap, gidMap: fullMap,
			subuid: "u:100000:65536\n", subgid: "u:100000:65536\n",
			kind: IdentitySubordinate, uidsFrom: 100000, uidsTo: 165535, gidsFrom: 100000, gidsTo: 165535},
		{name: "a user in group 0 with subordinate ids, setgroups denied", uid: 1000, gid: 1000, groups: []int{0}, noSetgroups: true,
			uidMap: "1000 1000 1\n100000 100000 65536\n", gidMap: "1000 1000 1\n100000 100000 65536\n",
			subuid: "u:100000:65536\n", subgid: "u:100000:65536\n",
			kind: IdentitySubordinate, refused: []string{"is in group 0", "setgroups is denied"}},
		{name: "a user mapped alone with CAP_SETUID (unshare --map-current-user --keep-caps)", uid: 4242, gid: 4242, groups: []int{4242}, canMap: true, noSetgroups: true,
			uidMap: "4242 1000 1\n", gidMap: "4242 1000 1\n", kind: IdentityExecutor, workerUID: 4242, workerGID: 4242},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := planFrom(c.facts(t))
			if p.kind != c.kind {
				t.Fatalf("kind %q (why %q), want %q", p.kind, p.why, c.kind)
			}
			if c.refused != nil {
				if p.refused == nil {
					t.Fatalf("not refused (kind %q, why %q)", p.kind, p.why)
				}
				for _, s := range c.refused {
					if !strings.Contains(p.refused.Error(), s) {
						t.Errorf("the refusal %q does not say %q", p.refused, s)
					}
				}
				id, err := p.identity(4242, true)
				var we *WorkerIDsError
				if !errors.As(err, &we) || !errors.Is(err, ErrNotIsolated) {
					t.Fatalf("a confined run's identity: %v, %v; want a *WorkerIDsError matching ErrNotIsolated", id, err)
				}
				if id, err := p.identity(4242, false); err != nil || id.UID != c.uid || id.GID != c.gid {
					t.Errorf("an unconfined run's identity: %v, %v; want the executor's", id, err)
				}
				return
			}
			if p.refused != nil {
				t.Fatalf("refused: %v", p.refused)
			}
			if c.kind == IdentityExecutor {
				id, err := p.identity(4242, true)
				if err != nil || id.UID != c.workerUID || id.GID != c.workerGID {
					t.Fatalf("identity %v, %v; want %d:%d", id, err, c.workerUID, c.workerGID)
				}
				return
			}
			if got := [4]int{int(p.uids.start), int(p.uids.start + p.uids.count - 1), int(p.gids.start), int(p.gids.start + p.gids.count - 1)}; got != [4]int{c.uidsFrom, c.uidsTo, c.gidsFrom, c.gidsTo} {
				t.Fatalf("ranges uids %v gids %v, want %d-%d and %d-%d", p.uids, p.gids, c.uidsFrom, c.uidsTo, c.gidsFrom, c.gidsTo)
			}
			// Every pid a supervisor may have, where the range is small
			// enough to go round it many times; a sample otherwise.
			pids := []int{1, 2, 3, 65535, 65536, 4194303, 4194304}
			if p.uids.count <= 1<<16 {
				pids = pids[:0]
				for pid := 1; pid <= 3*int(p.uids.count)+3; pid++ {
					pids = append(pids, pid)
				}
			}
			seen := map[int]bool{}
			for _, pid := range pids {
				id, err := p.identity(pid, true)
				if err != nil || id.UID == 0 || id.GID == 0 || id.UID == c.uid || id.GID == c.gid || id.Kind != c.kind {
					t.Fatalf("pid %d: identity %v, %v; want ids of its own, never 0 nor the executor's %d:%d", pid, id, err, c.uid, c.gid)
				}
				seen[id.UID] = true
			}
			if c.checkPicksBesides0 && len(seen) < 2 && p.uids.count > 3 {
				t.Errorf("only %v picked", seen)
			}
		})
	}
}

// pick never gives 0 nor the id to avoid, from a range of 3 holding both,
// for every pid.
func TestPickSkipsZeroAndOwn(t *testing.T) {
	r := idRange{start: 0, count: 3}
	for avoid := range 3 {
		var got []int
		for pid := range 10 {
			id := r.pick(pid, avoid)
			if id == 0 || id == avoid || id > 2 {
				t.Fatalf("avoid %d, pid %d: picked %d", avoid, pid, id)
			}
			if !slices.Contains(got, id) {
				got = append(got, id)
			}
		}
		t.Logf("avoid %d: picks %v", avoid, got)
	}
}

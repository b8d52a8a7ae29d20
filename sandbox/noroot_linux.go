//go:build linux

package sandbox

import (
	"fmt"
	"slices"
)

// refusal says why a confined worker of this plan could only run as uid 0
// or gid 0, or nil. Only the executor's own ids can bring 0 (pick skips it
// in ranges of the worker's own): where they are all there is (the plan's
// kind is IdentityExecutor) and one of them is 0, or where the worker
// keeps the executor's supplementary groups and 0 is one of them. Uid 0
// without capabilities still owns every file of root's, and gid 0 is
// root's group: "confined" would mean little.
func (p *idPlan) refusal(groups []int) *WorkerIDsError {
	// What a user namespace would have needed for ids of the worker's own.
	missing := p.why
	if !p.canMap {
		missing = "it has no CAP_SETUID and CAP_SETGID to map ids itself, nor subordinate ids: " + p.why
	}
	// The worker keeps the supplementary groups where it cannot drop
	// them: setgroups is denied in this user namespace (and so in every
	// one below), or the worker's namespace is one an unprivileged
	// executor maps, which must deny it.
	keepsGroups := !p.setgroups || p.kind == IdentityExecutor && !p.canMap
	var why string
	switch {
	case p.kind == IdentityExecutor && p.uid == 0:
		why = "the executor runs as uid 0, and " + missing
	case p.kind == IdentityExecutor && p.gid == 0:
		why = fmt.Sprintf("the executor (uid %d) runs with gid 0, and %s", p.uid, missing)
	case keepsGroups && slices.Contains(groups, 0):
		how := "setgroups is denied in this user namespace"
		if p.setgroups {
			how = "a user namespace the executor maps itself must deny setgroups, and " + missing
		}
		why = fmt.Sprintf("the executor (uid %d) is in group 0, which its workers would keep: %s", p.uid, how)
	default:
		return nil
	}
	return &WorkerIDsError{UID: p.uid, GID: p.gid, Why: why}
}

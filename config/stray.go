package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A variable the programs do not read is ignored, so a misspelt one
// (POOL_CAPACITY=gpu=1, LEASE_TTLS=3s) or one only a newer version reads
// used to change nothing and say nothing: the node started with defaults.
// Strays finds such variables so that both programs can say so at start.
// They warn rather than refuse: a variable of another program that merely
// looks like ours, or one a newer version of slotlease reads, must not stop
// a setup that works.

// Stray is an environment variable that looks like one of Vars but is not.
type Stray struct {
	Name    string // as set
	Closest string // the variable of Vars nearest to it by edit distance
}

func (s Stray) String() string {
	return fmt.Sprintf("%s is set but is not a variable slotlease reads (misspelt, or one a newer version reads); did you mean %s?", s.Name, s.Closest)
}

// strayPrefixes are the first words of slotlease's variables that few
// other programs' variables begin with: a variable starting with one of
// them is taken to be meant for slotlease. Words that many others use too
// (NODE_, LOG_, HTTP_, MAX_, EVENT_, OTEL_) are left to the edit distance.
var strayPrefixes = []string{"POOL_", "LEASE_", "NATS_", "EXECUTOR_", "TENANT_", "JOBS_", "LEADER_", "DISCONNECT_"}

// notStrays are variables with those prefixes that belong to someone
// else and are set where slotlease runs: the nats CLI's own (its docs'
// NATS_CA, NATS_CERT and NATS_KEY are slotlease's NATS_TLS_CA,
// NATS_TLS_CERT and NATS_TLS_KEY), and what the executor gives the
// commands it runs, in whose environment `executor submit` runs.
var notStrays = []string{
	"NATS_CA", "NATS_CERT", "NATS_KEY", "NATS_COLOR", "NATS_CONTEXT", "NATS_JWT", "NATS_SEED", "NATS_SOCKS_PROXY", "NATS_TIMEOUT", "NATS_TOKEN",
	"LEASE_ID", "LEASE_TOKEN", "LEASE_POOL", "LEASE_SLOTS", "LEASE_NODE", "LEASE_POOLS",
}

// workerLeaseVar is LEASE_<POOL>_ID, _TOKEN, _SLOTS and _NODE, which a
// command holding several pools gets for each.
var workerLeaseVar = regexp.MustCompile(`^LEASE_[A-Z0-9_]+_(ID|TOKEN|SLOTS|NODE)$`)

// Strays returns the variables of environ (os.Environ's form, KEY=VALUE)
// that look like slotlease's but are not, in environ's order: those with
// one of its prefixes, and those within a small edit distance of one of
// its names (in any case: pool_capacities is a stray of POOL_CAPACITIES).
func Strays(environ []string) []Stray {
	var out []Stray
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == "" || known(name) {
			continue
		}
		closest, d := closestVar(name)
		if hasStrayPrefix(name) || d <= nearDistance(closest) {
			out = append(out, Stray{Name: name, Closest: closest})
		}
	}
	return out
}

func known(name string) bool {
	return slices.ContainsFunc(Vars, func(v Var) bool { return v.Name == name }) ||
		slices.ContainsFunc(Aliases, func(a Alias) bool { return a.Name == name }) ||
		slices.Contains(notStrays, name) || workerLeaseVar.MatchString(name)
}

func hasStrayPrefix(name string) bool {
	return slices.ContainsFunc(strayPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// nearDistance is how many edits from name still count as a misspelling
// of it: one in five characters, from one to three. More would take in
// other programs' variables (NODE_ENV is three edits from NODE_ID).
func nearDistance(name string) int { return min(max(1, len(name)/5), 3) }

// closestVar is the variable of Vars with the fewest edits from name
// (compared in upper case), the first in Vars' order on a tie, and that
// number of edits.
func closestVar(name string) (string, int) {
	upper := strings.ToUpper(name)
	best, bestD := "", -1
	for _, v := range Vars {
		if d := editDistance(upper, v.Name); bestD < 0 || d < bestD {
			best, bestD = v.Name, d
		}
	}
	return best, bestD
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of two neighbours, each
// one edit (a swap is the commonest typo, LAESE_TTL).
func editDistance(a, b string) int {
	// d[i][j] is the distance of a[:i] and b[:j]; three rows suffice.
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

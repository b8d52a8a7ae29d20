package config

import (
	"errors"
	"fmt"
	"maps"
)

// Aliases are other systems' names for slotlease's variables, honoured so
// that a node configured for the system slotlease replaces is neither
// silently ignored nor silently different: the executor-pool system's
// MIRROR_NEURON_EXECUTOR_* names. Each is read as the variable it stands
// for, with a note at start (Manager.Notes); set beside that variable with
// another value, it is refused, naming both.
var Aliases = []Alias{
	{Name: EnvMirrorNeuronPoolCapacities, Of: EnvPoolCapacities},
	{Name: EnvMirrorNeuronMaxConcurrency, Of: EnvExecutorMaxConcurrency},
}

// The executor-pool system's variables that Aliases honour.
const (
	EnvMirrorNeuronPoolCapacities = "MIRROR_NEURON_EXECUTOR_POOL_CAPACITIES"
	EnvMirrorNeuronMaxConcurrency = "MIRROR_NEURON_EXECUTOR_MAX_CONCURRENCY"
)

// Alias is another name (Name) for one of slotlease's variables (Of).
type Alias struct {
	Name, Of string
}

// applyAliases returns m with every alias set in it read as its
// variable, a note for each, an error for each alias set beside its
// variable with another value, and which variables took their value from
// an alias (variable -> alias), for blame (blameAliases). m itself is not
// changed.
func applyAliases(m map[string]string) (out map[string]string, notes []string, from map[string]string, errs []error) {
	out = m
	for _, a := range Aliases {
		v, ok := m[a.Name]
		if !ok {
			continue
		}
		if own, set := m[a.Of]; set {
			if own != v {
				errs = append(errs, varErr(a.Name, v, reason(fmt.Sprintf(
					"conflicts with %s=%q: %s is honoured as an alias of %s; set one of them, or both alike", a.Of, own, a.Name, a.Of))))
				continue
			}
			notes = append(notes, fmt.Sprintf("%s and %s are both set, alike: read as %s=%s", a.Name, a.Of, a.Of, v))
			continue
		}
		if from == nil {
			out, from = maps.Clone(m), map[string]string{}
		}
		out[a.Of], from[a.Of] = v, a.Name
		notes = append(notes, fmt.Sprintf("%s is read as %s=%s (an alias, for the executor-pool system's configuration)", a.Name, a.Of, v))
	}
	return out, notes, from, errs
}

// blameAliases makes the errors about a variable that took its value from
// an alias name the alias, which is what the user set.
func blameAliases(errs []error, from map[string]string) {
	for _, err := range errs {
		var ve *VarError
		if errors.As(err, &ve) && from[ve.Var] != "" {
			ve.Var = fmt.Sprintf("%s (read as %s)", from[ve.Var], ve.Var)
		}
	}
}

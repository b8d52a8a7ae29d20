package config

import (
	"errors"
	"fmt"

	"github.com/slotlease/slotlease/rules"
)

// ErrInvalid is matched (errors.Is) by every error this package returns for
// a bad setting, so callers can tell configuration mistakes from other
// failures without parsing messages.
var ErrInvalid = rules.ErrInvalid

// VarError reports one bad environment variable, or one bad entry of a list
// variable such as POOL_CAPACITIES. Its message names the variable and the
// value so that it can be printed as is:
//
//	NODE_ID: "a.b": must contain only letters, digits, '-' and '_'
//	POOL_CAPACITIES: entry "gpu=0": capacity must be a positive integer
type VarError struct {
	Var    string // environment variable, e.g. "LEASE_TTL"
	Value  string // the offending value, or the offending entry (trimmed) if Entry
	Entry  bool   // Value is one entry of a list, not the whole value
	Reason string // what is wrong, e.g. "must be at least 1s"
	Err    error  // underlying cause (strconv, os, env), if any
}

func (e *VarError) Error() string {
	if e.Entry {
		return fmt.Sprintf("%s: entry %q: %s", e.Var, e.Value, e.Reason)
	}
	return fmt.Sprintf("%s: %q: %s", e.Var, e.Value, e.Reason)
}

// Unwrap returns ErrInvalid and the cause, so that both errors.Is(err,
// ErrInvalid) and, say, errors.Is(err, fs.ErrNotExist) hold.
func (e *VarError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}

// reason is a context-free validation failure ("must not be empty") that
// matches ErrInvalid. ValidToken returns one so callers can prefix it with
// the variable and value without repeating them.
type reason = rules.Reason

// joinErrs returns nil, the only error, or all of them joined; a single
// error is returned as is so its message has no extra structure.
func joinErrs(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	default:
		return errors.Join(errs...)
	}
}

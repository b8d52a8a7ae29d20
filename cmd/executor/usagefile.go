package main

import (
	"context"
	"fmt"
	"io"

	"github.com/slotlease/slotlease/jobs/usagefile"
	"github.com/slotlease/slotlease/lease"
)

// checkUnitsFlag checks --units: 0 (none) or an estimate 1..MaxUnits.
func checkUnitsFlag(units int64) error {
	if units < 0 || units > lease.MaxUnits {
		return fmt.Errorf("--units %d: must be an integer from 1 to %d", units, int64(lease.MaxUnits))
	}
	return nil
}

// runUsage is the usage file of a run with --units (package usagefile),
// named in env; lend is what a confined worker is lent of it. Without
// --units it changes nothing.
type runUsage struct {
	file     *usagefile.File
	estimate int64
}

func newRunUsage(f *runFlags, hide []string, env map[string]string) (*runUsage, []string, map[string]string, error) {
	if f.units == 0 {
		return nil, nil, env, nil
	}
	file, err := usagefile.New()
	if err != nil {
		return nil, nil, nil, err
	}
	env[usagefile.Env] = file.Path()
	var lend []string
	if len(hide) > 0 {
		lend = []string{file.Dir()} // the worker's own identity writes it
	}
	return &runUsage{file: file, estimate: f.units}, lend, env, nil
}

// release releases set, settling what the command wrote, or else (and
// stderr says why) the estimate. A nil u is a run without --units.
func (u *runUsage) release(ctx context.Context, set *lease.LeaseSet, stderr io.Writer) error {
	if u == nil {
		return set.Release(ctx)
	}
	return usagefile.Settle(ctx, u.file, set, u.estimate, func(s string) { fmt.Fprintf(stderr, "executor: %s\n", s) })
}

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/slotlease/slotlease/lease"
)

// groupFlags are the concurrency group flags of run and submit.
type groupFlags struct {
	group            string
	cancelInProgress bool
	cancelPending    bool
}

func (g *groupFlags) define(fs *pflag.FlagSet) {
	fs.StringVar(&g.group, "group", "", "concurrency group (per pool, tenant and credential); see --cancel-in-progress, --cancel-pending")
	fs.BoolVar(&g.cancelInProgress, "cancel-in-progress", false, "with --group: replace the group's queued runs and stop its running ones (exit 77); only the newest runs")
	fs.BoolVar(&g.cancelPending, "cancel-pending", false, "with --group: replace the group's queued runs (exit 77); running ones run on")
}

// check refuses contradicting or incomplete group flags.
func (g *groupFlags) check() error {
	switch {
	case len(g.group) > lease.MaxGroupLen:
		return fmt.Errorf("--group: longer than %d bytes", lease.MaxGroupLen)
	case g.cancelInProgress && g.cancelPending:
		return errors.New("--cancel-in-progress and --cancel-pending: give one of them")
	case (g.cancelInProgress || g.cancelPending) && g.group == "":
		return errors.New("--cancel-in-progress and --cancel-pending need --group")
	}
	return nil
}

// onGroup is the protocol's on_group of the flags.
func (g *groupFlags) onGroup() string {
	switch {
	case g.cancelInProgress:
		return lease.OnGroupCancelInProgress
	case g.cancelPending:
		return lease.OnGroupCancelPending
	}
	return ""
}

// options are the acquire options of the flags.
func (g *groupFlags) options() []lease.AcquireOption {
	if g.group == "" {
		return nil
	}
	return []lease.AcquireOption{lease.InGroup(g.group, g.onGroup())}
}

// stopOnRequest is ctx, cancelled when any lease of set is asked to stop
// by a newer request of its group; stop ends its watcher and waits for it.
func stopOnRequest(ctx context.Context, set *lease.LeaseSet) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-set.StopRequested():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel()
		<-done
	}
}

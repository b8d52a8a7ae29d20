package manager

import (
	"context"
	"errors"
	"fmt"
)

// Run starts the manager, serves until ctx ends or the manager is deposed
// (see Deposed), and closes it: on every path, a failed Start included, so
// nothing it started outlives Run. serving, if set, is told true once the
// manager serves and false as soon as it stops, before it closes. A
// deposed manager's Run returns an error wrapping ErrLeadershipLost.
func (m *Manager) Run(ctx context.Context, serving func(bool)) error {
	if serving == nil {
		serving = func(bool) {}
	}
	if err := m.Start(ctx); err != nil {
		return err // Start has closed the manager
	}
	serving(true)
	var err error
	select {
	case <-ctx.Done():
		m.announceStop() // told to stop: tell the holders first
	case <-m.Deposed():
		err = fmt.Errorf("%w: a later term wrote to this node", ErrLeadershipLost)
	}
	serving(false)
	return errors.Join(err, m.Close())
}

// Serving reports whether this manager may answer requests now: it
// started, is not closing, was not deposed, and its fence (if any) is
// valid. Readiness probes use it.
func (m *Manager) Serving() bool {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	return !closed && m.lead.serving()
}

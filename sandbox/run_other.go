//go:build !linux

package sandbox

import (
	"context"
	"os"
)

// Init is a no-op outside Linux.
func Init() {}

// Run is only implemented on Linux.
func Run(ctx context.Context, spec Spec, lost <-chan struct{}) (*Result, error) {
	return nil, ErrUnsupported
}

// CheckConfine is always ErrUnsupported outside Linux.
func CheckConfine() (Confinement, error) { return Confinement{}, ErrUnsupported }

// Prefixes of the temporary directories slotlease makes (tempdir_linux.go).
const (
	TempWorkdir = "slotlease-sandbox-"
	TempProbe   = "slotlease-probe-"
	TempJob     = "slotlease-job-"
)

// MkdirTemp makes a fresh directory in os.TempDir() outside Linux, with
// no owner in its name.
func MkdirTemp(prefix string) (string, error) { return os.MkdirTemp("", prefix) }

// SweepTemp does nothing outside Linux.
func SweepTemp(prefix string) []string { return nil }

// DisableDumping does nothing outside Linux.
func DisableDumping() error { return nil }

//go:build !linux

package sandbox

import "context"

// Init is a no-op outside Linux.
func Init() {}

// Run is only implemented on Linux.
func Run(ctx context.Context, spec Spec, lost <-chan struct{}) (*Result, error) {
	return nil, ErrUnsupported
}

// CheckConfine is always ErrUnsupported outside Linux.
func CheckConfine() (Confinement, error) { return Confinement{}, ErrUnsupported }

// DisableDumping does nothing outside Linux.
func DisableDumping() error { return nil }

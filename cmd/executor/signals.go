package main

import "syscall"

// signalNumber maps the sandbox's signal name back to its number, for the
// shell's 128+N exit code convention.
func signalNumber(name string) (int, bool) {
	for sig := syscall.Signal(1); sig < 32; sig++ {
		if sig.String() == name {
			return int(sig), true
		}
	}
	return 0, false
}

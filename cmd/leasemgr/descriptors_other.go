//go:build !unix

package main

// descriptorLimit is unknown here: the embedded server keeps its default
// connection limit, and the accounts' caps their defaults.
func descriptorLimit() int { return 0 }

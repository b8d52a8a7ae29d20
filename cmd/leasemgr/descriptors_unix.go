//go:build unix

package main

import "syscall"

// descriptorLimit raises the soft RLIMIT_NOFILE to the hard limit where
// the Go runtime has not (it raises it at start to one below the hard
// limit, which is kept: a raise of ours would also reach the processes
// leasemgr starts), and returns the soft limit, or 0 if unknown.
func descriptorLimit() int {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	if lim.Cur < lim.Max-1 {
		raised := lim
		raised.Cur = lim.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	return int(min(lim.Cur, 1<<30))
}

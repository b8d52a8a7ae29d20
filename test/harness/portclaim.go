package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Ports of one range are handed out by one Ports per process, but a
// second copy of the suite (a developer's run beside CI's, or two
// worktrees) runs the same packages with the same ranges. A port handed
// out is therefore also claimed for the whole machine: an exclusive flock
// on a file named after it, in a directory every test process of this
// user shares, held until this process exits (the kernel drops the lock
// then, however it ends). Another process's Ports skips a claimed port.

var claims struct {
	once sync.Once
	dir  string // "" if claims cannot be made here
	mu   sync.Mutex
	held []*os.File // open for the process's life: closing drops the lock
}

func claimDir() string {
	claims.once.Do(func() {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("slotlease-test-ports-%d", os.Getuid()))
		if err := os.MkdirAll(dir, 0o700); err == nil {
			claims.dir = dir
		}
	})
	return claims.dir
}

// claimPort claims port for this process, and reports false if another
// process holds it. Where no claim can be made (no temporary directory),
// it claims nothing and says yes: the range and the listen check still
// keep the packages of one run apart.
func claimPort(port int) bool {
	dir := claimDir()
	if dir == "" {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	claims.mu.Lock()
	claims.held = append(claims.held, f)
	claims.mu.Unlock()
	return true
}

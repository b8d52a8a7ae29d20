package jetstream

import (
	"os"
	"syscall"
)

// freeDescriptors reports how many more descriptors this process may open,
// and its limit (RLIMIT_NOFILE); free is 0 when not even the count can be
// taken, -1 when the limit is unknown.
func freeDescriptors() (free, limit int) {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil || lim.Cur > 1<<30 {
		return -1, 0
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		// No descriptor to open the directory with (or no /proc: then
		// the limit says nothing and the reload is tried).
		if os.IsNotExist(err) {
			return -1, int(lim.Cur)
		}
		return 0, int(lim.Cur)
	}
	return max(int(lim.Cur)-len(open), 0), int(lim.Cur)
}

package jetstream

import (
	"strings"
	"testing"

	"github.com/slotlease/slotlease/config"
)

func TestConnectionLimits(t *testing.T) {
	const reserved = 1152 // cmd/leasemgr's: the HTTP API, the store, its own
	for _, tc := range []struct {
		name               string
		descriptors        int
		set                AccountLimits
		server, exe, reads int
	}{
		{"plenty: the defaults", 20000, AccountLimits{}, 20000 - reserved, config.DefaultExecutorsMaxConnections, config.DefaultReadersMaxConnections},
		{"more than the server's own default", 1 << 20, AccountLimits{}, config.MaxAccountConnections, 4096, 256},
		{"4096, a common hard limit: the defaults shrink", 4096, AccountLimits{}, 4096 - reserved, 4096 - reserved - ManagerConnections - 180, 180},
		{"below the reserve: a quarter is the server's", 1024, AccountLimits{}, 256, 256 - ManagerConnections - 12, 12},
		{"set, and fitting", 4096, AccountLimits{ExecutorConnections: 2000, ReaderConnections: 100}, 4096 - reserved, 2000, 100},
		{"one set, the other shrinks to fit", 4096, AccountLimits{ExecutorConnections: 2500}, 4096 - reserved, 2500, 180},
	} {
		server, l, err := ConnectionLimits(tc.descriptors, reserved, tc.set)
		if err != nil || server != tc.server || l.ExecutorConnections != tc.exe || l.ReaderConnections != tc.reads {
			t.Errorf("%s: server %d, executors %d, readers %d, %v; want %d, %d, %d", tc.name, server, l.ExecutorConnections, l.ReaderConnections, err, tc.server, tc.exe, tc.reads)
			continue
		}
		if l.ExecutorConnections+l.ReaderConnections+ManagerConnections > server {
			t.Errorf("%s: the caps leave the managers no room", tc.name)
		}
	}
	// Caps set beyond what the descriptors allow are refused, naming
	// them, the limit and the fix.
	_, _, err := ConnectionLimits(4096, reserved, AccountLimits{ExecutorConnections: 4096})
	if err == nil || !strings.Contains(err.Error(), config.EnvNATSExecutorsMaxConnections+"=4096") || !strings.Contains(err.Error(), "ulimit -n") {
		t.Fatalf("executors' cap over the descriptors: %v", err)
	}
	_, _, err = ConnectionLimits(4096, reserved, AccountLimits{ExecutorConnections: 2000, ReaderConnections: 1000})
	if err == nil || !strings.Contains(err.Error(), config.EnvNATSExecutorsMaxConnections+"=2000 and "+config.EnvNATSReadersMaxConnections+"=1000") {
		t.Fatalf("both caps over the descriptors: %v", err)
	}
	if _, _, err := ConnectionLimits(200, reserved, AccountLimits{}); err == nil || !strings.Contains(err.Error(), "raise it") {
		t.Fatalf("a descriptor limit of 200: %v", err)
	}
}

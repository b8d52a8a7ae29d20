package jetstream

import (
	"fmt"
	"strings"

	"github.com/slotlease/slotlease/config"
)

// ConnectionLimits derives an embedded server's max_connections from the
// descriptors its process may open, less reserved (what the process holds
// besides the server's clients: its HTTP API, the store's files, its own
// connections), and fills in the executors' and readers' connection caps
// left zero in l. Every client connection costs the server one
// descriptor, also one it refuses (until it has said why), so a server
// allowed as many connections as the process has descriptors lets a
// flood starve the process of them: executors could not connect, and the
// HTTP API stopped answering.
//
// The defaults (config.DefaultExecutorsMaxConnections and
// config.DefaultReadersMaxConnections) shrink to fit a low descriptor
// limit: readers to 1/16 of the server's connections, executors to the
// rest but the managers' room (ManagerConnections). Caps that were set
// must fit as they are; the error names their variables.
func ConnectionLimits(descriptors, reserved int, l AccountLimits) (maxConns int, _ AccountLimits, err error) {
	maxConns = min(max(descriptors-reserved, descriptors/4), config.MaxAccountConnections)
	free := maxConns - ManagerConnections
	if free < 2 {
		return 0, l, fmt.Errorf("the descriptor limit (%d, ulimit -n) leaves the embedded server %d connections, not even room for the managers' %d: raise it",
			descriptors, maxConns, ManagerConnections)
	}
	setExe, setRead := l.ExecutorConnections > 0, l.ReaderConnections > 0
	if !setRead {
		l.ReaderConnections = max(1, min(config.DefaultReadersMaxConnections, free/16))
	}
	if !setExe {
		l.ExecutorConnections = max(1, min(config.DefaultExecutorsMaxConnections, free-l.ReaderConnections))
	}
	if l.ExecutorConnections+l.ReaderConnections > free {
		var named []string
		if setExe {
			named = append(named, fmt.Sprintf("%s=%d", config.EnvNATSExecutorsMaxConnections, l.ExecutorConnections))
		}
		if setRead {
			named = append(named, fmt.Sprintf("%s=%d", config.EnvNATSReadersMaxConnections, l.ReaderConnections))
		}
		return 0, l, fmt.Errorf("%s: the executors' %d and the readers' %d connections, with the managers' room of %d, exceed the %d the embedded server may take of leasemgr's %d descriptors (ulimit -n; %d are kept for its HTTP API, store and own connections): lower them or raise the limit",
			strings.Join(named, " and "), l.ExecutorConnections, l.ReaderConnections, ManagerConnections, maxConns, descriptors, descriptors-maxConns)
	}
	return maxConns, l, nil
}

package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Ports hands out loopback ports for servers and programs a test starts
// on a port of its own choosing, from [Lo, Hi). Keep the range below
// Linux's ephemeral ports (32768 up), so that no outgoing connection of a
// parallel test takes a port between its choice and its use, and give each
// test package that runs beside others a range of its own: a port is never
// handed out twice by one Ports, packages are separate processes, and a
// port handed out is claimed for the machine (portclaim.go), so that a
// second copy of the suite running at the same time skips it. In
// use: test/integration 20000-25999, test/cluster 26000-31999, the
// TypeScript client's suite 14000-19999, test/deploy 11000-11999.
type Ports struct {
	Lo, Hi int

	mu    sync.Mutex
	given map[int]bool
}

// Free returns a port in the range that nobody listens on right now and
// that p never handed out before.
func (p *Ports) Free() (int, error) { return p.FreeRun(1) }

// Take is Free for a test, which fails if there is none.
func (p *Ports) Take(tb testing.TB) int {
	tb.Helper()
	port, err := p.Free()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// FreeRun returns the first of n consecutive ports in the range that
// nobody listens on right now and that p never handed out before: for a
// program that puts its servers on a base port and the ones after it
// (leasemgr layout).
func (p *Ports) FreeRun(n int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.given == nil {
		p.given = make(map[int]bool)
	}
	for range 1000 {
		base := p.Lo + rand.IntN(p.Hi-p.Lo-n+1)
		free := true
		for port := base; port < base+n && free; port++ {
			if p.given[port] || !claimPort(port) {
				free = false
				break
			}
			p.given[port] = true // claimed (portclaim.go): never handed out by anyone else
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if free = err == nil; ln != nil {
				ln.Close()
			}
		}
		if free {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d free consecutive loopback port(s) in [%d, %d)", n, p.Lo, p.Hi)
}

package harness

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to one address, so a test can break a
// client's connection the way a network or a middlebox does, which the
// server cannot tell from the client's own doing:
//
//   - Reset closes every connection at both ends at once: the server sees
//     the client's end close it ("Client Closed" or "Read Error"), as for
//     a client that died, while the client lives.
//   - Refuse makes new connections fail at once (and Accept takes them
//     again), so a client cannot reconnect through the proxy.
//   - Stall holds every byte both ways until Resume delivers them, in
//     order, late: a stalled server or path, the connection left open.
//
// The test's cleanup closes it.
type Proxy struct {
	ln   net.Listener
	addr string

	mu      sync.Mutex
	cond    *sync.Cond
	conns   map[net.Conn]struct{} // both ends of every live connection
	refuse  bool
	stalled bool
	closed  bool
	wg      sync.WaitGroup
}

// StartProxy forwards a free port of 127.0.0.1 to addr (host:port).
func StartProxy(tb testing.TB, addr string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, addr: addr, conns: make(map[net.Conn]struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

// URL is what a client connects to.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse || p.closed
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.addr)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies src to dst, holding each chunk while the proxy is stalled,
// and closes both when either ends.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = src.Close()
		_ = dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Reset closes every connection at both ends.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not an orderly close
		}
		_ = c.Close()
	}
}

// Refuse makes the proxy close new connections at once.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = true
}

// Accept makes the proxy forward new connections again.
func (p *Proxy) Accept() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
}

// Stall holds every byte until Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Resume delivers what Stall held and forwards again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = false
	p.cond.Broadcast()
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

package cluster

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Proxy forwards TCP connections from one NATS client to a server of the
// cluster, so a test can break that one client's network without touching
// anyone else's:
//
//   - Cut resets the client's connections at once; the client notices and
//     reconnects (through the proxy again).
//   - Blackhole silently drops every byte both ways, on the open
//     connections and on new ones, as a partition does: the client notices
//     only through its own timeouts. Heal ends it by resetting the
//     blackholed connections, as a partition that outlived TCP does.
//   - Stall holds every byte (nothing is lost) until Heal, which delivers
//     them late, in order, as TCP does after a partition heals in time.
//     StallOn does the same from the first chunk the client sends that
//     contains a given string, e.g. the subject of one KV write.
//   - CutOn delivers the first chunk the client sends that contains a
//     given string and resets the connection right after: the server acts
//     on the message, its answer is lost.
//   - DropOn drops the first chunk the client sends that contains a given
//     string and resets the connection: the server never gets it.
//   - CutOnServer drops the first chunk the server sends that contains a
//     given string and resets the connection: the client never gets it.
//
// Each accepted connection dials the first reachable address that
// upstreams returns, so a client survives a server kill by reconnecting.
// Clients must not learn other addresses from the servers (the cluster
// servers run with NoAdvertise, and clients use IgnoreDiscoveredServers).
type Proxy struct {
	ln        net.Listener
	upstreams func() []string

	mu    sync.Mutex
	cond  *sync.Cond // broadcast when mode changes
	mode  proxyMode  // guarded by mu
	epoch int        // guarded by mu; bumped by Heal and Cut
	conns map[*proxyConn]struct{}
	// guarded by mu: StallOn's, CutOn's or DropOn's trigger, nil if none,
	// and what it does
	match         []byte
	cutOn, dropOn bool
	// guarded by mu: CutOnServer's trigger, matched on what the server sends
	serverMatch []byte
	// guarded by mu: FilterServer's predicate; connections accepted while
	// it is set parse what the server sends into protocol frames
	filter func(subject string, payload []byte) bool
	closed bool
	wg     sync.WaitGroup
}

type proxyMode int

const (
	modeForward proxyMode = iota
	modeBlackhole
	modeStall
)

type proxyConn struct {
	client, server net.Conn
	stalled        bool // guarded by Proxy.mu: this connection is stalled on its own (StallOn)
}

// NewProxy listens on a free port of 127.0.0.1.
func NewProxy(upstreams func() []string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstreams: upstreams, conns: make(map[*proxyConn]struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL is what the client connects to.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	var server net.Conn
	for _, addr := range p.upstreams() {
		s, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			server = s
			break
		}
	}
	if server == nil {
		_ = client.Close()
		return
	}
	pc := &proxyConn{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[pc] = struct{}{}
	epoch := p.epoch
	frames := p.filter != nil
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(pc, epoch, client, server, true) })
	if frames {
		wg.Go(func() { p.pipeFrames(epoch, server, client) })
	} else {
		wg.Go(func() { p.pipe(pc, epoch, server, client, false) })
	}
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// pipe copies src to dst, one read at a time, obeying the proxy's mode.
func (p *Proxy) pipe(pc *proxyConn, epoch int, src, dst net.Conn, fromClient bool) {
	defer func() {
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	var tail []byte // end of the previous chunk, for a match across reads
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			p.mu.Lock()
			cutAfter := false
			if !fromClient && p.serverMatch != nil {
				if bytes.Contains(append(tail, chunk...), p.serverMatch) {
					p.serverMatch = nil
					p.resetLocked()
					p.mu.Unlock()
					return
				}
				keep := min(len(chunk), 256)
				tail = append(tail[:0], chunk[len(chunk)-keep:]...)
			}
			if fromClient && p.match != nil {
				if bytes.Contains(append(tail, chunk...), p.match) {
					switch {
					case p.dropOn:
						p.match = nil
						p.resetLocked()
						p.mu.Unlock()
						return
					case p.cutOn:
						cutAfter = true
					default:
						pc.stalled = true
					}
					p.match = nil
				}
				keep := min(len(chunk), 256)
				tail = append(tail[:0], chunk[len(chunk)-keep:]...)
			}
			for (p.mode == modeStall || pc.stalled) && p.epoch == epoch && !p.closed {
				p.cond.Wait()
			}
			reset := p.epoch != epoch || p.closed
			drop := p.mode == modeBlackhole
			p.mu.Unlock()
			if reset {
				return // the bytes are lost with the connection
			}
			if drop {
				continue
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
			if cutAfter {
				p.Cut()
				return
			}
		}
		if err != nil {
			return // EOF or a reset: the deferred closes pass it on
		}
	}
}

// pipeFrames copies what the server sends to the client frame by frame
// (INFO, PING, MSG, HMSG, ...), dropping the messages the filter names.
func (p *Proxy) pipeFrames(epoch int, src, dst net.Conn) {
	defer func() {
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	var pending []byte
	for {
		n, err := src.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			size, subject, payload := nextFrame(pending)
			if size == 0 {
				break
			}
			p.mu.Lock()
			reset := p.epoch != epoch || p.closed
			drop := p.mode == modeBlackhole || (p.filter != nil && subject != "" && p.filter(subject, payload))
			p.mu.Unlock()
			if reset {
				return
			}
			if !drop {
				if _, werr := dst.Write(pending[:size]); werr != nil {
					return
				}
			}
			pending = pending[size:]
		}
		if err != nil {
			return
		}
	}
}

// nextFrame returns the length of the first complete frame in b (0 if
// none yet) and, for MSG and HMSG, its subject and payload.
func nextFrame(b []byte) (size int, subject string, payload []byte) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return 0, "", nil
	}
	line := string(b[:i])
	f := strings.Fields(line)
	if len(f) == 0 || (f[0] != "MSG" && f[0] != "HMSG") {
		return i + 2, "", nil
	}
	total, err := strconv.Atoi(f[len(f)-1])
	if err != nil || len(f) < 4 {
		return i + 2, "", nil
	}
	end := i + 2 + total + 2
	if len(b) < end {
		return 0, "", nil
	}
	return end, f[1], b[i+2 : i+2+total]
}

// FilterServer drops every message the server sends that drop names, on
// connections accepted from now on (Cut the current ones to apply it to
// the client's next connection). nil stops parsing new connections.
func (p *Proxy) FilterServer(drop func(subject string, payload []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.filter = drop
}

// resetLocked closes every open connection and starts a new epoch.
func (p *Proxy) resetLocked() {
	p.epoch++
	for pc := range p.conns {
		_ = pc.client.Close()
		_ = pc.server.Close()
		pc.stalled = false
	}
	p.cond.Broadcast()
}

// Cut resets the client's connections now. New connections work.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetLocked()
}

// Blackhole drops every byte both ways from now until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = modeBlackhole
	p.cond.Broadcast()
}

// Stall holds every byte both ways from now until Heal.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = modeStall
	p.cond.Broadcast()
}

// StallOn stalls the connection that next sends a chunk containing s, from
// that chunk on, until Heal. Other connections and directions go on.
func (p *Proxy) StallOn(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match, p.cutOn, p.dropOn = []byte(s), false, false
}

// CutOn resets the connection right after delivering the next chunk the
// client sends that contains s.
func (p *Proxy) CutOn(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match, p.cutOn, p.dropOn = []byte(s), true, false
}

// DropOn drops the next chunk the client sends that contains s, and resets
// the connection: the server never gets the message.
func (p *Proxy) DropOn(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match, p.cutOn, p.dropOn = []byte(s), false, true
}

// CutOnServer resets the connection instead of delivering the next chunk
// the server sends that contains s.
func (p *Proxy) CutOnServer(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serverMatch = []byte(s)
}

// Stalled reports whether a StallOn has triggered and not been healed.
func (p *Proxy) Stalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		if pc.stalled {
			return true
		}
	}
	return false
}

// Heal ends a blackhole or a stall. A blackhole ends with a reset of the
// connections it broke (their lost bytes cannot be replayed); a stall
// delivers what it held.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == modeBlackhole {
		p.resetLocked()
	}
	p.mode = modeForward
	p.match = nil
	for pc := range p.conns {
		pc.stalled = false
	}
	p.cond.Broadcast()
}

// Close stops listening and resets every connection abruptly.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.resetLocked()
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

package httpapi

import (
	"net"
	"sync"
)

// DefaultMaxConns bounds the HTTP connections leasemgr holds at once,
// well below the process's descriptor limit: the process also hosts the
// embedded NATS server, whose executors must always be able to connect.
const DefaultMaxConns = 512

// LimitListener accepts at most n connections at a time. Past that it
// stops accepting until one closes: new connections wait in the kernel's
// backlog, costing this process no descriptor.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{} // closed by Close: Accept waits no more
	once  sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once, on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

package manager

import (
	"fmt"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
)

// errorf builds an error whose message may quote client input: every
// string and error argument is bounded (echo.Args), so no request makes an
// answer or an event larger than a few hundred bytes. Pass values as they
// came: one clipped already (echo.Clip) is longer than echo.Max with its
// marker and would be clipped again, its marker then counting the first
// marker's bytes instead of the value's (a 200-byte pool name said
// "…(+14 bytes)", not "…(+72 bytes)").
func errorf(code lease.Code, format string, args ...any) *lease.Error {
	return &lease.Error{Code: code, Message: fmt.Sprintf(format, echo.Args(args)...)}
}

// conn names a client connection: its server's id and the client id the
// server gave it. The zero conn is "not said".
type conn struct {
	server string
	id     uint64
}

func (c conn) known() bool { return c.server != "" }

// recordConn is the connection a lease record is bound to.
func recordConn(r *lease.Record) conn { return conn{r.ConnServer, r.ConnID} }

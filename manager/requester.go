package manager

import (
	"encoding/json"
	"strconv"

	"github.com/nats-io/nats.go"
)

// A requester is the client connection a request came on, as far as the
// manager can tell. What one connection may do is bounded by it: its
// queued acquires (connqueue.go) and its wrong secrets (guesses.go).
//
// A request that crossed a service import carries the requester's account,
// server and client id in its Nats-Request-Info header, which the server
// sets over whatever the client sent (jetstream/accounts.go imports every
// lease verb with share): the server vouches for that name. Where the
// holders share the managers' account there is no import and no header the
// server vouches for; the request's own conn_server and conn_id (acquire,
// renew) stand in, which a client can vary, or name another client's
// connection with. Such a client has the managers' rights anyway (it may
// delete any lease record), so the bounds are about honest mistakes there,
// and must never hurt a holder whose connection it names.

// clientInfoHeader is the server's Nats-Request-Info header.
const clientInfoHeader = "Nats-Request-Info"

// maxClientInfo bounds the header decoded: the server's is a few hundred
// bytes (more with a JWT).
const maxClientInfo = 16 << 10

// requester names a request's connection. The zero requester is "not
// known": nothing is counted against it.
type requester struct {
	key string
	// vouched: key is from the Nats-Request-Info header, so a request
	// bearing it came on that connection (in an account reached through
	// an import, where the server sets the header).
	vouched bool
	// origin is that connection as the server's disconnect advisory names
	// it (server name and client id), and cred the credential it
	// authenticated with (account and user): both only when vouched.
	origin origin
	cred   string
}

// origin is a client connection by its server's name and its client id:
// what Nats-Request-Info says of the requester, and a disconnect advisory
// of it (whose server id the header lacks).
type origin struct {
	server string // the server's name
	id     uint64
}

func (o origin) known() bool { return o.server != "" }

// requesterOf names the connection msg came on: the server's header if
// any, else the connection the request says it was sent on (server and id
// from its body; "" and 0 for a verb without them).
func requesterOf(msg *nats.Msg, connServer string, connID uint64) requester {
	if h := msg.Header.Get(clientInfoHeader); h != "" && len(h) <= maxClientInfo {
		var ci struct {
			Account string `json:"acc"`
			Server  string `json:"server"`
			ID      uint64 `json:"id"`
			User    string `json:"user"`
		}
		if json.Unmarshal([]byte(h), &ci) == nil && ci.ID != 0 {
			r := requester{key: ci.Account + " " + ci.Server + " " + strconv.FormatUint(ci.ID, 10), vouched: true,
				origin: origin{server: ci.Server, id: ci.ID}}
			if ci.User != "" {
				r.cred = ci.Account + " " + ci.User
			}
			return r
		}
	}
	if connServer != "" {
		return requester{key: "conn " + connServer + " " + strconv.FormatUint(connID, 10)}
	}
	return requester{}
}

package natsconn

import (
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/lease"
)

// Auth is how a process proves who it is to NATS, how it checks the
// server, and where its replies arrive. The zero value connects
// anonymously, without TLS, with nats.go's default inbox prefix (a test
// server's way: leasemgr's embedded server admits no anonymous client,
// see ConnectLocal).
//
// At most one of Creds, NKeySeed and User may be set. Credentials in the
// URL (nats://user:pass@host) are used by nats.go as well; do not mix
// them with these. docs/security.md shows a server configuration these
// settings fit.
type Auth struct {
	// Creds is a .creds file (a user JWT and its nkey seed), for servers
	// with decentralised (operator/account) auth.
	Creds string
	// NKeySeed is a file holding a user nkey seed (SU...); the public user
	// key is derived from it and the server's nonce is signed with it.
	NKeySeed string
	// User and Password are plain user credentials.
	User, Password string
	// TLSCA is a PEM file of CAs that verify the server's certificate.
	// Setting it requires TLS even for a nats:// URL.
	TLSCA string
	// TLSCert and TLSKey are a PEM client certificate and its key, for
	// servers that verify clients (tls { verify: true }). Both or neither.
	TLSCert, TLSKey string
	// InboxPrefix replaces "_INBOX" in every reply subject this
	// connection makes (requests, JetStream API calls, KV watchers, lease
	// acquires), so that a server can let a user subscribe only to
	// "<InboxPrefix>.>". Empty means "_INBOX".
	InboxPrefix string
}

// options turns a into nats.go options, checking what can be checked
// without dialing: conflicting settings, and a seed file that must parse
// now because nats.NkeyOptionFromSeed reads it eagerly.
func (a Auth) options() ([]nats.Option, error) {
	set := 0
	for _, s := range []string{a.Creds, a.NKeySeed, a.User} {
		if s != "" {
			set++
		}
	}
	if set > 1 {
		return nil, errors.New("jetstream: set at most one of creds, nkey seed and user")
	}
	if a.Password != "" && a.User == "" {
		return nil, errors.New("jetstream: password without user")
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return nil, errors.New("jetstream: a TLS client certificate needs both the certificate and the key")
	}
	var opts []nats.Option
	switch {
	case a.Creds != "":
		opts = append(opts, nats.UserCredentials(a.Creds))
	case a.NKeySeed != "":
		o, err := nats.NkeyOptionFromSeed(a.NKeySeed)
		if err != nil {
			return nil, fmt.Errorf("jetstream: nkey seed %s: %w", a.NKeySeed, err)
		}
		opts = append(opts, o)
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	if a.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(a.InboxPrefix))
	}
	return opts, nil
}

// Connect dials NATS for a long-running process: it reconnects forever, so a
// NATS restart or failover costs a delay, not the process. auth supplies
// credentials, TLS and the inbox prefix; extra options come last and win.
func Connect(url string, auth Auth, name string, extra ...nats.Option) (*nats.Conn, error) {
	authOpts, err := auth.options()
	if err != nil {
		return nil, err
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		// Soon: a holder with fast release whose connection dropped has
		// about 0.5 s (3/4 of the disconnect grace, less the time since
		// its last answered PING) to be back and move its leases.
		nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond),
		nats.RetryOnFailedConnect(false),
		// A server in lame duck mode (a rolling restart) says so before it
		// closes its clients: holders then take their leases off fast
		// release, so its close costs them nothing (lease/lameduck.go).
		lease.LameDuck(),
	}
	opts = append(opts, authOpts...)
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(url), err)
	}
	return nc, nil
}

// RedactURL hides the credentials a NATS URL list may carry
// (nats://user:pass@host or nats://token@host), so that an error or a log
// line can name the servers without giving away the password.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		p, err := neturl.Parse(strings.TrimSpace(u))
		if err != nil || p.User == nil {
			continue
		}
		p.User = neturl.User("REDACTED")
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

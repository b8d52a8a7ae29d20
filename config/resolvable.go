package config

import (
	"context"
	"errors"
	"net"
	"time"
)

// resolveTimeout bounds the name lookup of checkResolvable.
const resolveTimeout = 10 * time.Second

// checkResolvable looks up the host of a valid host:port, so that a name
// that does not resolve fails at start-up, naming the variable, instead of
// after the embedded NATS server has started. An empty host (all
// interfaces) and IP addresses need no lookup.
func checkResolvable(addr string) error {
	host, _, _ := net.SplitHostPort(addr)
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
		msg := err.Error()
		var de *net.DNSError
		if errors.As(err, &de) {
			msg = de.Err // without the name, which the message already shows
		}
		return reason("host " + host + " does not resolve: " + msg)
	}
	return nil
}

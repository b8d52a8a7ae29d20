package jetstream

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Connect dials NATS for a long-running process: it reconnects forever, so a
// NATS restart or failover costs a delay, not the process.
func Connect(url, creds, name string, extra ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
	}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return nc, nil
}

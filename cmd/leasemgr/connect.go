package main

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/natsconn"
)

// connect dials the NATS this node's manager uses: NATS_URL, or the embedded
// server at NATS_LISTEN, as role when the embedded server's credentials are
// found (config.LoadCommonAs).
func connect(name string, role config.Role) (*nats.Conn, *config.Common, error) {
	cfg, err := config.LoadCommonAs(role)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("configuration:\n%w", err)}
	}
	nc, err := natsconn.Connect(cfg.NATSAddress(), natsconn.ConfigAuth(cfg), name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (is leasemgr running?)", err)
	}
	return nc, cfg, nil
}

package natsconn

import (
	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/config"
)

// ConnectLocal connects a client program as `executor` does: it reads the
// environment (NATS_URL, NATS_LISTEN, NODE_ID, NATS_CREDS, NATS_NKEY,
// NATS_USER, LEASE_SUBJECT_PREFIX, ...) and, where no credential is named,
// uses the executor role's credentials the embedded server of leasemgr on
// this host made (docs/security.md, "The embedded server"), with the
// role's inbox prefix. It returns the connection and the configuration,
// whose NodeID and SubjectPrefix a lease.Client wants:
//
//	nc, cfg, err := natsconn.ConnectLocal("my-program")
//	client, err := lease.NewClient(nc, cfg.NodeID, lease.WithPrefix(cfg.SubjectPrefix))
//
// Bad settings and credentials others can read are errors naming the
// variable or the path, as for the binaries.
func ConnectLocal(name string, extra ...nats.Option) (*nats.Conn, *config.Common, error) {
	cfg, err := config.LoadCommonAs(config.RoleExecutor)
	if err != nil {
		return nil, nil, err
	}
	nc, err := Connect(cfg.NATSAddress(), ConfigAuth(cfg), name, extra...)
	if err != nil {
		return nil, nil, err
	}
	return nc, cfg, nil
}

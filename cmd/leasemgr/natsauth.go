package main

import (
	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
)

// natsAuth is how this process authenticates to NATS: NATS_CREDS,
// NATS_NKEY, NATS_USER and NATS_PASSWORD, NATS_TLS_CA, NATS_TLS_CERT and
// NATS_TLS_KEY, NATS_INBOX_PREFIX. config has checked them already.
func natsAuth(c *config.Common) jetstream.Auth {
	return jetstream.Auth{
		Creds: c.NATSCreds, NKeySeed: c.NATSNKey,
		User: c.NATSUser, Password: c.NATSPassword,
		TLSCA: c.NATSTLSCA, TLSCert: c.NATSTLSCert, TLSKey: c.NATSTLSKey,
		InboxPrefix: c.NATSInboxPrefix,
	}
}

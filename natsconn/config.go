package natsconn

import "github.com/slotlease/slotlease/config"

// ConfigAuth is how a process configured by the environment authenticates
// to NATS: NATS_CREDS, NATS_NKEY, NATS_USER and NATS_PASSWORD, NATS_TLS_CA,
// NATS_TLS_CERT and NATS_TLS_KEY, NATS_INBOX_PREFIX. config has checked
// them already.
func ConfigAuth(c *config.Common) Auth {
	return Auth{
		Creds: c.NATSCreds, NKeySeed: c.NATSNKey,
		User: c.NATSUser, Password: c.NATSPassword,
		TLSCA: c.NATSTLSCA, TLSCert: c.NATSTLSCert, TLSKey: c.NATSTLSKey,
		InboxPrefix: c.NATSInboxPrefix,
	}
}

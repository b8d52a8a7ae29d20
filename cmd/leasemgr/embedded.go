package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jetstream"
)

// embeddedServer is the part of the embedded nats-server runManager uses.
type embeddedServer interface {
	ClientURL() string
	Shutdown()
	WaitForShutdown()
}

// startEmbedded starts the embedded nats-server of a leasemgr without
// NATS_URL: a private store directory, credentials for every role in
// NATS_AUTH_DIR (made on first start), no anonymous access. cfg is switched
// to the manager role's seed file and inbox prefix: the server admits no
// one else with full rights, so NATS_CREDS, NATS_NKEY and NATS_USER mean
// nothing for the manager of its own embedded server.
func startEmbedded(cfg *config.Manager) (embeddedServer, error) {
	base := "" // an explicit NATS_STORE_DIR: only it is checked
	if cfg.NATSStoreDir == config.DefaultStoreDir(cfg.NodeID) {
		base = os.TempDir() // the default: also leasemgr/ and leasemgr/<node>/ in the shared temp dir
	}
	if err := config.MakePrivateDir(base, cfg.NATSStoreDir); err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", config.EnvNATSStoreDir, err)}
	}
	dir, err := cfg.EmbeddedAuthDir()
	if err != nil {
		return nil, usageError{err}
	}
	keys, err := jetstream.EnsureCredentials(dir)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", config.EnvNATSAuthDir, err)}
	}
	srv, err := jetstream.StartServer(jetstream.ServerConfig{
		Listen: cfg.NATSListen, StoreDir: cfg.NATSStoreDir, Name: "leasemgr-" + cfg.NodeID,
		Users: jetstream.EmbeddedUsers(keys, cfg.SubjectPrefix),
	})
	if err != nil {
		return nil, err
	}
	cfg.NATSCreds, cfg.NATSUser, cfg.NATSPassword = "", "", ""
	cfg.NATSNKey = config.AuthFile(dir, config.RoleManager)
	cfg.NATSInboxPrefix = config.RoleManager.InboxPrefix()
	return srv, nil
}

// replyPrefixes are the inbox prefixes the manager answers besides
// "_INBOX": NATS_REPLY_PREFIXES, this process's own NATS_INBOX_PREFIX
// (leasemgr pools and resize run with the manager's settings get their
// answers there), and behind an embedded server every role's prefix, so
// the zero-configuration leasemgr pools (reader) and resize (manager)
// are answered.
func replyPrefixes(c *config.Common, listed []string, embedded bool) []string {
	out := append(slices.Clone(listed), c.NATSInboxPrefix)
	if embedded {
		for _, p := range config.EmbeddedReplyPrefixes() {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

package main

import (
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/nats-io/nats.go"

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
// NATS_AUTH_DIR (made on first start), each role in its own account, no
// anonymous access. cfg is switched to the manager role's seed file and
// inbox prefix: the server admits no one else into the managers' account,
// so NATS_CREDS, NATS_NKEY and NATS_USER mean nothing for the manager of
// its own embedded server. jobs authenticates the process's connection to
// the executors' account, where the job queue lives (NewJobsAdmin).
func startEmbedded(cfg *config.Manager, log *slog.Logger) (srv embeddedServer, jobs nats.Option, err error) {
	base := "" // an explicit NATS_STORE_DIR: only it is checked
	if cfg.NATSStoreDir == config.DefaultStoreDir(cfg.NodeID) {
		base = os.TempDir() // the default: also leasemgr/ and leasemgr/<node>/ in the shared temp dir
	}
	if err := config.MakePrivateDir(base, cfg.NATSStoreDir); err != nil {
		return nil, nil, usageError{fmt.Errorf("%s: %w", config.EnvNATSStoreDir, err)}
	}
	dir, err := cfg.EmbeddedAuthDir()
	if err != nil {
		return nil, nil, usageError{err}
	}
	keys, err := jetstream.EnsureCredentials(dir)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("%s: %w", config.EnvNATSAuthDir, err)}
	}
	moved, err := jetstream.MoveJobQueue(cfg.NATSStoreDir, cfg.SubjectPrefix)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", config.EnvNATSStoreDir, err)
	}
	if len(moved) > 0 {
		log.Info("job queue moved to the executors' account", "streams", moved, "store", cfg.NATSStoreDir)
	}
	admin, jobs, err := jetstream.NewJobsAdmin()
	if err != nil {
		return nil, nil, err
	}
	s, err := jetstream.StartServer(jetstream.ServerConfig{
		Listen: cfg.NATSListen, StoreDir: cfg.NATSStoreDir, Name: "leasemgr-" + cfg.NodeID, Prefix: cfg.SubjectPrefix,
		Users: append(jetstream.EmbeddedUsers(keys, cfg.SubjectPrefix), admin),
	})
	if err != nil {
		return nil, nil, err
	}
	cfg.NATSCreds, cfg.NATSUser, cfg.NATSPassword = "", "", ""
	cfg.NATSNKey = config.AuthFile(dir, config.RoleManager)
	cfg.NATSInboxPrefix = config.RoleManager.InboxPrefix()
	return s, jobs, nil
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

package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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
	if cfg.NATSStoreDirDefault {
		// The default: also the directories between it and the state
		// directory (slotlease/ and slotlease/<node>/, or <node>/ in
		// STATE_DIRECTORY).
		base = cfg.NATSStoreBase
		if err := carryOldStore(cfg, base, log); err != nil {
			return nil, nil, err
		}
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
	maxConns, limits, err := embeddedLimits(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	s, err := jetstream.StartServer(jetstream.ServerConfig{
		Listen: cfg.NATSListen, StoreDir: cfg.NATSStoreDir, Name: "leasemgr-" + cfg.NodeID, Prefix: cfg.SubjectPrefix,
		Users:          append(jetstream.EmbeddedUsers(keys, cfg.SubjectPrefix), admin),
		MaxConnections: maxConns, Limits: limits,
	})
	if err != nil {
		return nil, nil, err
	}
	cfg.NATSCreds, cfg.NATSUser, cfg.NATSPassword = "", "", ""
	cfg.NATSNKey = config.AuthFile(dir, config.RoleManager)
	cfg.NATSInboxPrefix = config.RoleManager.InboxPrefix()
	// A store that met a write error (no descriptor free for a moment) takes
	// no write until it is loaded again: the healer does that, so the node
	// serves again after an overload without a restart.
	return jetstream.HealStores(s, log), jobs, nil
}

// embeddedLimits are the embedded server's connection limit and the
// executors' and readers' account limits (docs/security.md, "Limits per
// account"): the variables as set, the connection limits derived from
// this process's descriptor limit (raised to its hard limit first) where
// they are not.
func embeddedLimits(cfg *config.Manager, log *slog.Logger) (int, jetstream.AccountLimits, error) {
	limits := jetstream.AccountLimits{
		ExecutorStore: cfg.ExecutorsMaxStore, ExecutorConsumers: cfg.ExecutorsMaxConsumers,
		ExecutorConnections: cfg.ExecutorsMaxConnections, ReaderConnections: cfg.ReadersMaxConnections,
	}
	descriptors, maxConns := descriptorLimit(), 0
	if descriptors > 0 {
		var err error
		if maxConns, limits, err = jetstream.ConnectionLimits(descriptors, reservedDescriptors, limits); err != nil {
			return 0, limits, usageError{err}
		}
		if maxConns < config.DefaultExecutorsMaxConnections+config.DefaultReadersMaxConnections+jetstream.ManagerConnections {
			log.Warn("the descriptor limit leaves the embedded server fewer connections than the defaults: raise it (ulimit -n, or LimitNOFILE= for a service)",
				"descriptors", descriptors, "max_connections", maxConns)
		}
	}
	log.Info("embedded NATS server limits", "descriptors", descriptors, "max_connections", maxConns,
		"executors_store", limits.ExecutorStore, "executors_consumers_per_stream", limits.ExecutorConsumers,
		"executors_connections", limits.ExecutorConnections, "readers_connections", limits.ReaderConnections)
	return maxConns, limits, nil
}

// carryOldStore moves the default store of a version before the state
// directory, <TempDir>/leasemgr/<node>/jetstream, to the default now,
// <StateHome>/slotlease/<node>/jetstream (docs/configuration.md,
// NATS_STORE_DIR): a leasemgr upgraded in place keeps its leases, queue and
// job queue. It moves only a store of this user's, private as leasemgr made
// it, and only into a place with no store yet; the old place is left alone
// when a store is in the new one (it says so), or when NATS_LISTEN is taken
// (an old leasemgr may be serving from it: the server's start then fails on
// the address, as it would have).
func carryOldStore(cfg *config.Manager, stateHome string, log *slog.Logger) error {
	old, store := config.OldDefaultStoreDir(cfg.NodeID), cfg.NATSStoreDir
	if _, err := os.Lstat(old); err != nil {
		return nil // none (or none to see): nothing to carry
	}
	if err := config.CheckPrivateTree(os.TempDir(), old); err != nil {
		log.Warn("an old default store is left where it is: it is not this user's private directory", "old_store", old, "err", err)
		return nil
	}
	if ents, err := os.ReadDir(store); err == nil && len(ents) > 0 {
		log.Warn("an old default store is left where it is, unused: a store exists in the new place; remove the old one once you need nothing from it",
			"old_store", old, "store", store)
		return nil
	}
	ln, err := net.Listen("tcp", cfg.NATSListen)
	if err != nil {
		return nil // taken: the server's start reports it
	}
	ln.Close()
	if err := config.MakePrivateDir(stateHome, filepath.Dir(store)); err != nil {
		return usageError{fmt.Errorf("%s: %w", config.EnvNATSStoreDir, err)}
	}
	if err := jetstream.MoveStore(old, store); err != nil {
		return fmt.Errorf("the default store moved from %s to %s, and carrying it over failed: %w; "+
			"move it yourself while leasemgr is stopped (mv %s %s), or keep it where it is with %s=%s",
			old, store, err, old, store, config.EnvNATSStoreDir, old)
	}
	// Its parents, leasemgr/<node>/ and leasemgr/, if nothing else is in them.
	_ = os.Remove(filepath.Dir(old))
	_ = os.Remove(filepath.Dir(filepath.Dir(old)))
	log.Info("moved the store out of the temp directory into the state directory", "old_store", old, "store", store)
	return nil
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

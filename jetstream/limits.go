package jetstream

import (
	"fmt"

	"github.com/slotlease/slotlease/config"
)

// AccountLimits bound what the executors' and readers' accounts of a
// server with users may take of it (docs/security.md, "Limits per
// account"). Executor credentials are held by untrusted parties, and the
// managers share the server with them: an executor that filled the store
// stopped the manager from renewing its leadership, and one that opened
// thousands of connections took the descriptors of leasemgr, which hosts
// the embedded server. So each of those accounts is capped, and the
// managers' account is left without caps of its own: it has whatever the
// server's limits leave beyond the others' caps, which no executor or
// reader can take. An explicit cap on the managers (the server's store
// less the executors') would do no more, and would break a restart: a
// standalone server checks each account's cap, as it enables it, against
// the streams of the accounts it enabled before, so a job queue whose caps
// exceed a lowered executors' cap (an operator lowering
// NATS_EXECUTORS_MAX_STORE) would make the sum overflow, and the server
// refuses to start ("Can't start JetStream: ... insufficient storage
// resources"; tried against nats-server v2.15.2).
//
// Zero fields get the defaults of package config.
type AccountLimits struct {
	// ExecutorStore caps ExecutorAccount's JetStream file store: the job
	// queue's stream and buckets, whose own caps take 7/8 of it
	// (jobs.MaxBytesFor). On a cluster it counts every replica.
	ExecutorStore int64
	// ExecutorConsumers caps the consumers of each stream of
	// ExecutorAccount.
	ExecutorConsumers int
	// ExecutorConnections and ReaderConnections cap each account's client
	// connections (on a cluster, on all its servers together). In the
	// embedded server each role is one user, alone in its account but for
	// the job queue's administrator beside the executors, so this bounds
	// that user.
	ExecutorConnections int
	ReaderConnections   int
}

// Fixed limits, the same in docs/security.md's layout.
const (
	// ExecutorStreams is the job queue's stream and two buckets. Executors
	// may create no stream (embeddedroles.go); the cap holds for whoever
	// administers the account too.
	ExecutorStreams = 3
	// ExecutorSubscriptions and ReaderSubscriptions cap each connection's
	// subscriptions (the server counts them per connection). An executor
	// uses a few per lease client and job watch; 1000 is a hundred lease
	// clients sharing one connection, as the scale test's do.
	ExecutorSubscriptions = 1000
	ReaderSubscriptions   = 100
	// ManagerConnections is the least room the server's max_connections
	// keeps beyond the executors' and readers' caps, for the managers
	// (their account has no cap of its own) and the handshakes of clients
	// not yet admitted.
	ManagerConnections = 64
)

// withDefaults fills in the zero fields.
func (l AccountLimits) withDefaults() AccountLimits {
	if l.ExecutorStore == 0 {
		l.ExecutorStore = config.DefaultExecutorsMaxStore
	}
	if l.ExecutorConsumers == 0 {
		l.ExecutorConsumers = config.DefaultExecutorsMaxConsumers
	}
	if l.ExecutorConnections == 0 {
		l.ExecutorConnections = config.DefaultExecutorsMaxConnections
	}
	if l.ReaderConnections == 0 {
		l.ReaderConnections = config.DefaultReadersMaxConnections
	}
	return l
}

// check refuses limits that leave the managers no share of a server with
// maxStore bytes of file store and maxConns connections (0: the server's
// default, which the caps need not fit).
func (l AccountLimits) check(maxStore int64, maxConns int) error {
	if l.ExecutorStore <= 0 || l.ExecutorStore >= maxStore {
		return fmt.Errorf("jetstream: the executors' store cap (%d bytes) must be positive and below the server's store (%d bytes), whose rest is the managers'", l.ExecutorStore, maxStore)
	}
	if l.ExecutorConsumers <= 0 || l.ExecutorConnections <= 0 || l.ReaderConnections <= 0 {
		return fmt.Errorf("jetstream: account limits must be positive: %+v", l)
	}
	if maxConns > 0 && l.ExecutorConnections+l.ReaderConnections+ManagerConnections > maxConns {
		return fmt.Errorf("jetstream: the executors' (%d) and readers' (%d) connections and the managers' room (%d) exceed the server's %d connections",
			l.ExecutorConnections, l.ReaderConnections, ManagerConnections, maxConns)
	}
	return nil
}

// The JSON shapes of an account's limits in the server configuration.
type (
	// jsLimits is an account's "jetstream" block. MaxMemory is 0, not
	// omitted: the job queue is on disk, and an omitted limit is none.
	jsLimits struct {
		MaxMemory    int64 `json:"max_mem"`
		MaxFile      int64 `json:"max_file"`
		MaxStreams   int   `json:"max_streams"`
		MaxConsumers int   `json:"max_consumers"`
	}
	// connLimits is an account's "limits" block.
	connLimits struct {
		MaxConnections   int `json:"max_connections"`
		MaxSubscriptions int `json:"max_subscriptions"`
	}
)

// executorJetStream is ExecutorAccount's "jetstream" block. The store cap
// does not require max_bytes of every stream (max_bytes_required): a
// stream without it, as the job queue's buckets were before they had
// caps, would not be recovered at all when the server restarts; the
// account's cap bounds such a stream anyway, and leasemgr gives the
// buckets their caps (jobs.Queue.ApplyCaps).
func (l AccountLimits) executorJetStream() jsLimits {
	return jsLimits{MaxMemory: 0, MaxFile: l.ExecutorStore, MaxStreams: ExecutorStreams, MaxConsumers: l.ExecutorConsumers}
}

func (l AccountLimits) executorConns() *connLimits {
	return &connLimits{MaxConnections: l.ExecutorConnections, MaxSubscriptions: ExecutorSubscriptions}
}

func (l AccountLimits) readerConns() *connLimits {
	return &connLimits{MaxConnections: l.ReaderConnections, MaxSubscriptions: ReaderSubscriptions}
}

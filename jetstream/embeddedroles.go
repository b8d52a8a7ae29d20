package jetstream

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
)

// EmbeddedUsers are the users of the embedded server for subject prefix p,
// with the public keys from EnsureCredentials, each in its role's account
// (accounts.go). docs/security.md explains every right;
// test/integration/embedded_auth_test.go shows what each role can and
// cannot do.
//
//   - manager: every right in ManagerAccount (it owns the buckets and the
//     event stream, serves the protocol, resizes), where no other role's
//     user lives.
//   - executor: in ExecutorAccount, the lease verbs, stats and the
//     discovery ping (imported), "_INBOX.>" and events, plus the job
//     queue's stream, consumers and buckets, named in full. No stream or
//     bucket creation: leasemgr creates the job queue's at start (with
//     NewJobsAdmin), since a stream capturing "<p>.*.*.acquire" in the
//     executors' account would record every executor's acquire secrets.
//   - reader: in ReaderAccount, stats, snapshots, discovery, events, and
//     direct gets on the event stream (the replay of watch --since).
func EmbeddedUsers(keys map[config.Role]string, p string) []User {
	return []User{
		{Role: config.RoleManager, NKey: keys[config.RoleManager]},
		ExecutorUser(keys[config.RoleExecutor], config.RoleExecutor.InboxPrefix(), p),
		ReaderUser(keys[config.RoleReader], config.RoleReader.InboxPrefix(), p),
	}
}

// ExecutorUser is an executor's user with public key nkey, whose replies
// come under inbox (its NATS_INBOX_PREFIX), for subject prefix p. Where
// executors have users of their own (leasemgr layout, docs/security.md's
// layout), each has its own inbox, so none reads another's grants.
func ExecutorUser(nkey, inbox, p string) User {
	return User{Role: config.RoleExecutor, NKey: nkey, Publish: executorPublish(p), Subscribe: []string{
		inbox + ".>",
		p + ".events.>",
		jobs.NamesFor(p).AllSubjects(),   // executor serve hears submits
		jobs.NamesFor(p).EventSubjects(), // cancels and purges
	}}
}

// ReaderUser is a reader's user with public key nkey, whose replies come
// under inbox, for subject prefix p.
func ReaderUser(nkey, inbox, p string) User {
	return User{Role: config.RoleReader, NKey: nkey, Publish: readerPublish(p), Subscribe: []string{
		inbox + ".>",
		p + ".events.>",
		jobs.NamesFor(p).EventSubjects(),
	}}
}

// NewJobsAdmin makes a user with every right in ExecutorAccount, whose
// seed lives only in this process's memory: leasemgr gives it to its
// embedded server at each start and connects with the option returned, to
// create the job queue's stream and buckets (which executors may not) and
// to read the queue's figures for /metrics. No file, argument or
// environment ever holds it.
func NewJobsAdmin() (User, nats.Option, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return User{}, nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return User{}, nil, err
	}
	sign := func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }
	return User{Role: config.RoleExecutor, NKey: pub}, nats.Nkey(pub, sign), nil
}

func executorPublish(p string) []string {
	pub := []string{
		p + ".*.*.acquire", p + ".*.*.renew", p + ".*.*.release", p + ".*.*.cancel",
		p + ".*.stats",
	}
	pub = append(pub, lease.DiscoverySubjects()...)
	n := jobs.NamesFor(p)
	pub = append(pub, n.AllSubjects(), n.EventSubjects()) // submit; job events
	// The broker (jobs/broker.go): consumers, fetches and outcomes go
	// through it. No consumer of any kind: one credential could make one
	// that takes every job, or use up a stream's consumers for everyone.
	pub = append(pub, n.BrokerSubjects())
	// The job stream: bind, read a waiting job's time, list the consumers'
	// figures, keep, give back or end a delivery the broker fetched.
	s := n.Stream
	pub = append(pub,
		"$JS.API.STREAM.INFO."+s, "$JS.API.STREAM.MSG.GET."+s, "$JS.API.CONSUMER.LIST."+s, "$JS.ACK."+s+".>",
		// cancel and purge: a cancelled job's message leaves the stream.
		"$JS.API.STREAM.MSG.DELETE."+s,
	)
	// The results and dead-letter buckets: get, put, create, and read in
	// order without a consumer (batched direct gets, jobs/scan.go).
	for _, b := range []string{n.Results, n.Dead} {
		pub = append(pub, kvRights(b)...)
		pub = append(pub, "$KV."+b+".>")
	}
	return pub
}

// kvRights are the JetStream API subjects to read bucket b: its status, a
// key's value, a batch of values in stream order.
func kvRights(b string) []string {
	s := "KV_" + b
	return []string{"$JS.API.STREAM.INFO." + s, "$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".>"}
}

func readerPublish(p string) []string {
	return append([]string{
		p + ".*.stats",
		p + ".*.snapshot", // the operator's page: holders, waiters, history
		// leasemgr watch --since: direct gets on the event stream, the
		// one JetStream request readers have (accounts.go).
		"$JS.API.DIRECT.GET." + NamesFor(p).Events,
	}, lease.DiscoverySubjects()...)
}

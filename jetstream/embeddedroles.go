package jetstream

import (
	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/lease"
)

// EmbeddedUsers are the users of the embedded server for subject prefix p,
// with the public keys from EnsureCredentials. docs/security.md explains
// every right; test/integration/embedded_auth_test.go shows what each
// role can and cannot do.
//
//   - manager: every right in the account (it owns the buckets and the
//     event stream, serves the protocol, resizes). Its inbox prefix is not
//     "_INBOX", so executors cannot read its JetStream replies.
//   - executor: the executor role of docs/security.md (publish the lease
//     verbs and stats, discovery ping; subscribe to "_INBOX.>" and events)
//     plus the job queue's stream, consumers and buckets, named in full.
//     No lease, leader or pool bucket, no event publishing, no stream or
//     bucket creation (leasemgr creates the job queue's at start).
//   - reader: stats, snapshots, discovery, events, and replaying the event
//     stream.
func EmbeddedUsers(keys map[config.Role]string, p string) []User {
	return []User{
		{Role: config.RoleManager, NKey: keys[config.RoleManager]},
		{Role: config.RoleExecutor, NKey: keys[config.RoleExecutor], Publish: executorPublish(p), Subscribe: []string{
			config.RoleExecutor.InboxPrefix() + ".>",
			p + ".events.>",
			jobs.NamesFor(p).AllSubjects(),   // executor serve hears submits
			jobs.NamesFor(p).EventSubjects(), // cancels and purges
		}},
		{Role: config.RoleReader, NKey: keys[config.RoleReader], Publish: readerPublish(p), Subscribe: []string{
			config.RoleReader.InboxPrefix() + ".>",
			p + ".events.>",
			jobs.NamesFor(p).EventSubjects(),
		}},
	}
}

func executorPublish(p string) []string {
	pub := []string{
		p + ".*.*.acquire", p + ".*.*.renew", p + ".*.*.release", p + ".*.*.cancel",
		p + ".*.stats",
		"$SRV.PING." + lease.ServiceName,
	}
	n := jobs.NamesFor(p)
	pub = append(pub, n.AllSubjects(), n.EventSubjects()) // submit; job events
	// The job stream: bind, read a waiting job's time, durable pull
	// consumers per pool and priority, fetch, ack.
	s := n.Stream
	pub = append(pub,
		"$JS.API.STREAM.INFO."+s, "$JS.API.STREAM.MSG.GET."+s,
		"$JS.API.CONSUMER.CREATE."+s+".>", "$JS.API.CONSUMER.INFO."+s+".*", "$JS.API.CONSUMER.LIST."+s,
		"$JS.API.CONSUMER.MSG.NEXT."+s+".*", "$JS.ACK."+s+".>",
		// cancel and purge: a cancelled job's message leaves the stream.
		"$JS.API.STREAM.MSG.DELETE."+s,
	)
	// The results and dead-letter buckets: get, put, create, watch (an
	// ordered push consumer, deleted when the watch stops; $JS.FC answers
	// its flow control when a listing is large).
	for _, b := range []string{n.Results, n.Dead} {
		pub = append(pub, kvRights(b)...)
		pub = append(pub, "$KV."+b+".>")
	}
	return pub
}

// kvRights are the JetStream API subjects to read and watch bucket b.
func kvRights(b string) []string {
	s := "KV_" + b
	return []string{
		"$JS.API.STREAM.INFO." + s, "$JS.API.DIRECT.GET." + s + ".>",
		"$JS.API.CONSUMER.CREATE." + s + ".>", "$JS.API.CONSUMER.DELETE." + s + ".*",
		"$JS.FC." + s + ".>",
	}
}

func readerPublish(p string) []string {
	s := NamesFor(p).Events
	return []string{
		p + ".*.stats",
		p + ".*.snapshot", // the operator's page: holders, waiters, history
		"$SRV.PING." + lease.ServiceName,
		// leasemgr watch --since: an ordered pull consumer on the event
		// stream, which deletes and recreates itself when it falls behind.
		"$JS.API.CONSUMER.CREATE." + s + ".>", "$JS.API.CONSUMER.DELETE." + s + ".*",
		"$JS.API.CONSUMER.MSG.NEXT." + s + ".*",
		// The cluster page's last events: where the stream ends.
		"$JS.API.STREAM.INFO." + s,
	}
}

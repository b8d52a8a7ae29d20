// Package config reads the lease manager's and the executors' settings from
// environment variables into validated structs.
//
// [LoadManager] and [LoadCommon] read the process environment;
// [LoadManagerFrom] and [LoadCommonFrom] read only the map they are given,
// so tests need not touch os.Environ. Parsing is done with
// github.com/caarlos0/env, and every value is then checked, so that a bad
// setting stops the process at start-up with a message naming the variable
// and the offending value rather than surfacing later as a NATS or
// JetStream error. When several variables are bad, all of them are reported
// (joined with [errors.Join], one per line). Every validation error matches
// [ErrInvalid] with errors.Is and is a [*VarError] for errors.As.
//
// # Variables
//
// [Vars] is the one list of them, with defaults and meanings; the usage
// texts of leasemgr and executor are printed from it ([Usage]), and
// docs/configuration.md's tables, in full, and this list name the same
// variables (vars_test.go checks both).
//
// Read by both the lease manager and its clients (executor, leasemgr
// pools, watch and resize) ([Common]):
//
//	NODE_ID               node identity; default: the host name with every
//	                      character outside [A-Za-z0-9_-] replaced by '-'
//	                      (see SanitizeNodeID)
//	NATS_URL              NATS server URL(s); empty: the lease manager runs an
//	                      embedded server and executors connect to NATS_LISTEN
//	NATS_CREDS            optional .creds file; must exist and be readable
//	NATS_NKEY             optional user nkey seed file (SU...); not with NATS_CREDS
//	NATS_USER             optional user name; not with NATS_CREDS or NATS_NKEY
//	NATS_PASSWORD         password of NATS_USER
//	NATS_TLS_CA           optional PEM CA file that verifies the server; requires TLS
//	NATS_TLS_CERT         optional PEM client certificate; with NATS_TLS_KEY
//	NATS_TLS_KEY          the client certificate's PEM key; with NATS_TLS_CERT
//	NATS_INBOX_PREFIX     prefix of reply subjects; default "_INBOX"
//	NATS_AUTH_DIR         the embedded server's credentials; default
//	                      <os.UserConfigDir>/slotlease/embedded-<host>-<port>,
//	                      or <STATE_DIRECTORY>/embedded-<host>-<port>
//	STATE_DIRECTORY       systemd's StateDirectory= (first entry, absolute): the
//	                      default store and NATS_AUTH_DIR go there
//	CREDENTIALS_DIRECTORY systemd's LoadCredential= directory: a relative path in
//	                      NATS_CREDS, NATS_NKEY, NATS_TLS_*, JOBS_NATS_NKEY is there
//	NATS_LISTEN           host:port of the embedded server; default 127.0.0.1:4222
//	LEASE_SUBJECT_PREFIX  dot-separated subject tokens; default "lease"
//	LOG_LEVEL             debug, info, warn or error; default info
//	LOG_FORMAT            text or json; default text
//	OTEL_TRACES_EXPORTER  none, otlp or console (package telemetry reads it,
//	                      and the other OTEL_* variables)
//	OTEL_METRICS_EXPORTER none, otlp or console: push metrics besides /metrics
//
// Every file named by a NATS_* variable is opened and parsed at load time
// (seed, PEM certificates, key pair), so a wrong path or file stops the
// process at start-up. Error messages never show NATS_PASSWORD.
// docs/security.md shows how the variables fit a server's permissions.
//
// Read by the lease manager only ([Manager]):
//
//	POOL_CAPACITIES           comma-separated name=capacity, e.g. "gpu=1,io=16"
//	CLUSTER_POOLS             pools shared by every node, same syntax, e.g.
//	                          "api=50"; a name may not also be a node pool
//	POOL_RATES                start rates, e.g. "api=60/m,embed=5/s" (units s,
//	                          m, h); a name in no list above becomes a node
//	                          pool with a rate and no concurrency limit
//	POOL_RATE_BURST           most slots a rate starts at once, e.g. "api=5";
//	                          default one second's worth, at least 1
//	POOL_BUDGETS              usage budgets, units per sliding window, e.g.
//	                          "llm=100000/m" (units s, m, h); a name in no
//	                          list above becomes a node pool with a budget
//	EXECUTOR_MAX_CONCURRENCY  capacity of the default pool; default 4
//	NATS_STORE_DIR            JetStream storage directory; default
//	                          <StateHome>/slotlease/<NODE_ID>/jetstream, or
//	                          <STATE_DIRECTORY>/<NODE_ID>/jetstream
//	NATS_REPLICAS             replicas of the buckets and the event stream; default 1
//	NATS_EXECUTORS_MAX_STORE  the embedded server's cap on the executors' JetStream
//	                          store, 64MiB to 8GiB; default 2GiB (embeddedlimits.go)
//	NATS_EXECUTORS_MAX_CONSUMERS
//	                          ... on consumers per stream of the executors'
//	                          account; default 1000
//	NATS_EXECUTORS_MAX_CONNECTIONS
//	                          ... on the executors' connections; default 4096,
//	                          less if leasemgr's descriptor limit leaves less
//	NATS_READERS_MAX_CONNECTIONS
//	                          ... on the readers' connections; default 256, less
//	                          likewise
//	JOBS_NATS_NKEY            with NATS_URL: the job queue administrator's nkey
//	                          seed file, for the job broker (jobsadmin.go)
//	JOBS_NATS_USER            ... or its user,
//	JOBS_NATS_PASSWORD        ... and password
//	LEASE_TTL                 lease time-to-live, whole seconds, 1s to 24h; default 15s
//	LEADER_TTL                leadership key TTL, whole seconds, 1s to 24h; default 5s
//	HTTP_ADDR                 host:port of the HTTP endpoint; default
//	                          127.0.0.1:8080; set but empty disables it
//	DISCONNECT_EVENTS         fast release's advisory subject, or "off"
//	                          (fastrelease.go)
//	DISCONNECT_GRACE          fast release's delay; default 800ms
//	NATS_REPLY_PREFIXES       inbox prefixes answered besides _INBOX and _R_
//	                          (replyprefixes.go)
//	EVENT_RETENTION           how long events are kept; default 24h, 0 none
//	POOL_POLICIES             per pool fifo, lifo, priority or fair (policies.go)
//	POOL_MAX_QUEUE            per pool, most queued requests; default 10000;
//	                          0: no queue, fail fast
//	POOL_ON_FULL              per pool, refuse (default) or drop_oldest
//	MAX_QUEUED_PER_CONNECTION most requests one connection may have waiting;
//	                          default 1000
//	MAX_QUEUED_PER_CREDENTIAL most requests one credential may have waiting
//	                          over all its connections; default 2500
//	TENANT_WEIGHTS            fair pools: tenant:weight pairs
//	TENANT_DEFAULT_WEIGHT     fair pools: weight of other tenants; default 1
//	TENANT_CAPS               fair pools: most slots per tenant, per pool
//	PRIORITY_AGING            priority pools: the wait worth one level; default 10s
//	POOL_KEY_LIMITS           fair pools: most slots in flight per fairness key
//	                          (per tenant without a key), per pool (fairness.go)
//	POOL_FAIR_QUANTUM         fair pools: credit per turn of weight 1; default 1
//	POOL_STARVATION_AGE       fair pools: a ready request waiting this long goes
//	                          next; default none
//	POOL_SHADOW               pools in shadow mode: granted at once, their limits
//	                          counted, not enforced (shadow.go); default none
//
// Read by the executor only (cmd/executor):
//
//	EXECUTOR_UNCONFINED       1: run workers unconfined on a machine that
//	                          cannot confine them
//	EXECUTOR_METRICS_ADDR     host:port of executor serve's /metrics; default
//	                          none (ExecutorMetricsAddr)
//
// For every variable except HTTP_ADDR, a variable set to the empty string is
// treated as unset and gets its default.
//
// # Form
//
// Every variable has one form (strict.go): no spaces around a value and
// none in a list entry (NATS_PASSWORD alone is taken as is), numbers
// without a '+' sign or leading zeros, durations without a '+' sign, and
// bounds where a value would overflow (capacities at most [MaxCapacity],
// TTLs at most [MaxTTL]). HTTP_ADDR's host must resolve at load time.
//
// # Tokens
//
// Node ids, pool names and each dot-separated part of LEASE_SUBJECT_PREFIX
// must be tokens (see [ValidToken]): 1 to 64 characters from [A-Za-z0-9_-].
// They end up inside NATS subjects and JetStream KV keys, where '.', '*',
// '>' and whitespace have meaning or are not allowed.
//
// # The default pool
//
// A pool named "default" always exists. Its capacity is N from a
// "default=N" entry in POOL_CAPACITIES if there is one (this overrides
// EXECUTOR_MAX_CONCURRENCY), else EXECUTOR_MAX_CONCURRENCY, else 4.
package config

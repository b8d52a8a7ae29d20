package config

import (
	"fmt"
	"slices"
	"strings"
)

// Reader says which program reads a variable.
type Reader uint8

const (
	// ReadByManager: leasemgr run (the lease manager).
	ReadByManager Reader = 1 << iota
	// ReadByClients: executor and the leasemgr subcommands that talk to a
	// manager (pools, watch, resize).
	ReadByClients
	// ReadByExecutor: executor only.
	ReadByExecutor
	// ReadByAll: every program.
	ReadByAll = ReadByManager | ReadByClients | ReadByExecutor
)

// Var is one environment variable the programs read.
type Var struct {
	Name    string
	Default string // as a user reads it: "15s", "empty", "the host name"
	Meaning string // one line
	Readers Reader
}

// Vars is the one list of the environment variables slotlease reads. The
// usage texts of leasemgr and executor are made from it (Usage); the
// tables of docs/configuration.md and this package's doc list the same
// names, which vars_test.go checks, as it checks that every variable the
// loaders read (commonVars, managerVars) is here.
var Vars = []Var{
	{EnvNodeID, "the host name, other characters than A-Za-z0-9_- made '-'", "this node's name in subjects and keys", ReadByAll},
	{EnvPoolCapacities, "empty", "node pools, name=capacity pairs, e.g. gpu=1,io=16", ReadByManager},
	{EnvClusterPools, "empty", "pools shared by every node, same syntax, e.g. api=50", ReadByManager},
	{EnvPoolBudgets, "none", "usage budgets, units per sliding window, e.g. openai=100000/m (units s, m, h)", ReadByManager},
	{EnvPoolRates, "none", "start rates, e.g. api=60/m,embed=5/s (units s, m, h)", ReadByManager},
	{EnvPoolRateBurst, "one second's worth, at least 1", "per rated pool, most slots started at once, e.g. api=5", ReadByManager},
	{EnvExecutorMaxConcurrency, "4", "capacity of the default pool", ReadByManager},
	{EnvNATSURL, "empty: leasemgr runs an embedded server", "NATS server URL(s) to join", ReadByAll},
	{EnvNATSListen, DefaultNATSListen, "the embedded server's address (executors find it there)", ReadByAll},
	{EnvNATSStoreDir, "$XDG_STATE_HOME/slotlease/<NODE_ID>/jetstream (~/.local/state/...); $STATE_DIRECTORY/<NODE_ID>/jetstream", "the embedded server's JetStream store: leases and queue", ReadByManager},
	{EnvNATSAuthDir, "$XDG_CONFIG_HOME/slotlease/embedded-<host>-<port> (~/.config/...); $STATE_DIRECTORY/embedded-<host>-<port>", "the embedded server's credentials (nkey seeds per role)", ReadByAll},
	{EnvStateDirectory, "empty (systemd sets it: StateDirectory=)", "a service's state directory: default store and credentials there", ReadByAll},
	{EnvCredentialsDirectory, "empty (systemd sets it: LoadCredential=)", "relative NATS_NKEY, NATS_CREDS, JOBS_NATS_NKEY, NATS_TLS_* name files there", ReadByAll},
	{EnvReplicas, "1", "replicas of the lease buckets and event stream (3 on a cluster)", ReadByManager},
	{EnvNATSExecutorsMaxStore, "2GiB", "the embedded server: the executors' account's JetStream store (job queue)", ReadByManager},
	{EnvNATSExecutorsMaxConsumers, fmt.Sprint(DefaultExecutorsMaxConsumers), "the embedded server: consumers per stream of the executors' account", ReadByManager},
	{EnvNATSExecutorsMaxConnections, "4096, less if the descriptor limit leaves less", "the embedded server: connections of the executors' account", ReadByManager},
	{EnvNATSReadersMaxConnections, "256, less if the descriptor limit leaves less", "the embedded server: connections of the readers' account", ReadByManager},
	{EnvJobsNATSNKey, "empty", "with NATS_URL: the job queue administrator's nkey seed file (the job broker's rights)", ReadByManager},
	{EnvJobsNATSUser, "empty", "with NATS_URL: the job queue administrator's user, instead of JOBS_NATS_NKEY", ReadByManager},
	{EnvJobsNATSPassword, "empty", "its password", ReadByManager},
	{EnvLeaseTTL, "15s", "lease TTL, whole seconds up to 24h, longer than LEADER_TTL", ReadByManager},
	{EnvLeaderTTL, "5s", "TTL of a node's leadership key, whole seconds, 1s to 24h", ReadByManager},
	{EnvSubjectPrefix, DefaultSubjectPrefix, "first token(s) of every subject", ReadByAll},
	{EnvHTTPAddr, DefaultHTTPAddr, "HTTP API, web page and /metrics; empty disables it", ReadByManager},
	{EnvDisconnectEvents, "the embedded server's advisories; none with NATS_URL", "fast release: subject of disconnect advisories; off turns it off", ReadByManager},
	{EnvDisconnectGrace, "800ms", "fast release: a closed holder's leases are freed this long after", ReadByManager},
	{EnvNATSReplyPrefixes, "empty", "inbox prefixes answered besides _INBOX and _R_, comma-separated", ReadByManager},
	{EnvEventRetention, "24h", "how long events are kept for watch --since; 0 keeps none", ReadByManager},
	{EnvPoolPolicies, "fifo", "per pool fifo, lifo, priority or fair, e.g. gpu=fair", ReadByManager},
	{EnvPoolMaxQueue, fmt.Sprint(DefaultMaxQueue), "per pool, most queued requests, e.g. gpu=100; 0: no queue (fail fast)", ReadByManager},
	{EnvPoolOnFull, "refuse", "per pool, a full queue refuses the newcomer or drops the oldest waiter: gpu=drop_oldest", ReadByManager},
	{EnvMaxQueuedPerConnection, fmt.Sprint(DefaultMaxQueuedPerConnection), "most requests one connection may have waiting on the node", ReadByManager},
	{EnvMaxQueuedPerCredential, fmt.Sprint(DefaultMaxQueuedPerCredential), "most requests one credential (user), over all its connections, may have waiting on the node", ReadByManager},
	{EnvTenantWeights, "all 1", "fair pools: tenant:weight pairs, e.g. team-a:3,team-b:1", ReadByManager},
	{EnvTenantDefaultWeight, "1", "fair pools: weight of tenants not in TENANT_WEIGHTS", ReadByManager},
	{EnvTenantCaps, "none", "fair pools: most slots one tenant holds at once, e.g. gpu=2", ReadByManager},
	{EnvPriorityAging, "10s", "priority pools: waiting this long is worth one level", ReadByManager},
	{EnvPoolKeyLimits, "none", "fair pools: most slots in flight per fairness key (per tenant without a key), e.g. gpu=2", ReadByManager},
	{EnvPoolFairQuantum, "1", "fair pools: slots of credit per turn for weight 1, e.g. gpu=4", ReadByManager},
	{EnvPoolStarvationAge, "none", "fair pools: a ready request waiting this long goes next, e.g. gpu=30s", ReadByManager},
	{EnvPoolShadow, "none", "pools in shadow mode: their limits are counted, not enforced, e.g. gpu,api", ReadByManager},
	{EnvExecutorUnconfined, "0", "1: run workers unconfined where this machine cannot confine them", ReadByExecutor},
	{EnvExecutorMetricsAddr, "empty: none", "executor serve: host:port of its /metrics (or --metrics-addr)", ReadByExecutor},
	{EnvNATSCreds, "empty", ".creds file (user JWT and nkey seed)", ReadByAll},
	{EnvNATSNKey, "empty", "user nkey seed file (SU...); not with NATS_CREDS", ReadByAll},
	{EnvNATSUser, "empty", "NATS user name; not with NATS_CREDS or NATS_NKEY", ReadByAll},
	{EnvNATSPassword, "empty", "password of NATS_USER; never printed", ReadByAll},
	{EnvNATSTLSCA, "the system's roots", "PEM CA file that verifies the server; requires TLS", ReadByAll},
	{EnvNATSTLSCert, "empty", "PEM client certificate; with NATS_TLS_KEY", ReadByAll},
	{EnvNATSTLSKey, "empty", "the client certificate's PEM key; with NATS_TLS_CERT", ReadByAll},
	{EnvNATSInboxPrefix, DefaultInboxPrefix, "prefix of this process's reply subjects", ReadByAll},
	{EnvLogLevel, DefaultLogLevel, "debug, info, warn or error", ReadByAll},
	{EnvLogFormat, DefaultLogFormat, "text or json", ReadByAll},
	{EnvOTELTracesExporter, "none", "otlp or console: export traces (OTEL_EXPORTER_OTLP_*)", ReadByAll},
	{EnvOTELMetricsExporter, "none", "otlp or console: push metrics besides /metrics", ReadByAll},
}

// Variables read outside this package's loaders: by the executor
// (cmd/executor) and by package telemetry.
const (
	EnvExecutorUnconfined  = "EXECUTOR_UNCONFINED"
	EnvOTELTracesExporter  = "OTEL_TRACES_EXPORTER"
	EnvOTELMetricsExporter = "OTEL_METRICS_EXPORTER"
)

// Usage is the environment part of a program's usage text: every variable
// r reads, and those named in also, with its default and meaning.
func Usage(r Reader, also ...string) string {
	var b strings.Builder
	in := func(v Var) bool { return v.Readers&r != 0 || slices.Contains(also, v.Name) }
	width := 0
	for _, v := range Vars {
		if in(v) {
			width = max(width, len(v.Name))
		}
	}
	for _, v := range Vars {
		if !in(v) {
			continue
		}
		fmt.Fprintf(&b, "  %-*s  %s\n", width, v.Name, v.Meaning)
		if v.Default != "empty" && v.Default != "none" {
			fmt.Fprintf(&b, "  %-*s  default: %s\n", width, "", v.Default)
		}
	}
	return b.String()
}

// VarNames are the names of the variables r reads, in Vars' order.
func VarNames(r Reader) []string {
	var out []string
	for _, v := range Vars {
		if v.Readers&r != 0 {
			out = append(out, v.Name)
		}
	}
	return out
}

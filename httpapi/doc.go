// Package httpapi is the lease manager's HTTP face for operators and probes:
// health and readiness, the node's pools and leases as JSON, lease events as
// server-sent events, an optional /metrics handler, and a self-contained live
// web page at "/" that needs nothing from the internet.
//
// It reads everything through Source, so it does not care whether this
// process is the node's active manager: while it stands by, /readyz and the
// JSON endpoints answer 503 with the reason, and the page says so. NATSSource
// is the Source the leasemgr command uses.
//
// Endpoints:
//
//	GET /healthz     200 "ok": the process is alive
//	GET /readyz      200 "ready", or 503 and the reason (standing by, NATS down,
//	                 the leadership term over: checked on every probe); when
//	                 ready, a "warning: ..." line for each warning (cluster
//	                 pool candidates that disagree on their pools)
//	GET /v1/status   {"node", "ready", "reason", "warnings"}
//	GET /v1/pools    lease.NodePools: {"node", "pools": [lease.PoolStats]}, pools sorted by name (as leasemgr pools --json
//	                 and the "pools" snapshot of /v1/events); "cluster": the
//	                 cluster pools, apart, when a manager serves any
//	GET /v1/leases   [lease.Record]: holder, slots, token, expires_at, ...
//	GET /v1/events   text/event-stream: "event: <kind>" + "data: <lease.Event>",
//	                 a "pools" snapshot first, a comment heartbeat every 15s
//	GET /v1/cluster  Cluster: every node serving the prefix (found as
//	                 leasemgr pools --all finds them), each pool with its
//	                 holders and waiters in grant order (lease.NodeSnapshot);
//	                 ?history=1 adds each pool's last hour (5 s apart);
//	                 ?node=<id> asks one node only. A node that stops
//	                 answering stays listed, "stale", for an hour
//	GET /v1/cluster/events  [lease.Event]: every node's last ?limit= (100,
//	                 at most 500) events from the event stream, oldest first
//	GET /v1/cluster/stream  text/event-stream: every node's events, live
//	                 (/v1/cluster and /v1/cluster/events: at most 4 under
//	                 way at once; more get 503 "busy" with Retry-After: 1)
//	    /metrics     the handler given WithMetrics, if any
//	GET /            the node's live page (assets under /assets/)
//	GET /cluster     the operator's page: the whole cluster, live
//
// JSON errors have the shape {"error": {"code": "...", "message": "..."}}.
package httpapi

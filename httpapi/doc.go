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
//	                 the leadership term over: checked on every probe)
//	GET /v1/status   {"node", "ready", "reason"}
//	GET /v1/pools    lease.NodePools: {"node", "pools": [lease.PoolStats]}, pools sorted by name (as leasemgr pools --json
//	                 and the "pools" snapshot of /v1/events)
//	GET /v1/leases   [lease.Record]: holder, slots, token, expires_at, ...
//	GET /v1/events   text/event-stream: "event: <kind>" + "data: <lease.Event>",
//	                 a "pools" snapshot first, a comment heartbeat every 15s
//	    /metrics     the handler given WithMetrics, if any
//	GET /            the live page (assets under /assets/)
//
// JSON errors have the shape {"error": {"code": "...", "message": "..."}}.
package httpapi

// Package telemetry is how slotlease reports what it does: OpenTelemetry
// traces that follow an executor's acquire across the NATS hop into the
// lease manager, and metrics served to Prometheus on /metrics (per-pool
// metrics are made by the leasemetrics subpackage from lease events).
//
// # Turning it on
//
// Both programs call otelsetup.Setup at start; it reads the standard
// environment:
//
//	OTEL_TRACES_EXPORTER=otlp                          # none (default), otlp, console; comma-separated
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318  # OTLP over HTTP, protobuf
//	OTEL_METRICS_EXPORTER=otlp                         # none (default): /metrics only
//	OTEL_SERVICE_NAME=leasemgr-eu1                     # default: leasemgr or executor
//	OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod
//	OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.1
//
// The OTLP exporters also read OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
// OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT and the rest of the
// standard OTLP variables. Only http/protobuf is compiled in: setting
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc is an error at start, not a silent no-op.
// Console exporters write to stderr, since an executor's stdout belongs to
// the command it runs. OTEL_SDK_DISABLED=true turns tracing and the push
// exporters off.
//
// # What it costs when off
//
// With no trace exporter configured the global tracer provider stays the
// OpenTelemetry no-op one. The span helpers then cost what the no-op API
// costs (a context holding a non-recording span, tens of nanoseconds) and
// no more: attributes are only copied onto recording spans, and
// natstrace.InjectMsg adds no header to a message when there is no trace to carry, so
// requests stay plain PUBs. BenchmarkServerSpanNoop measures it.
// Metrics are always on: a counter add or histogram record per lease event,
// with attribute sets built once per pool.
//
// # Traces
//
// Trace context travels in NATS message headers as W3C traceparent,
// tracestate and baggage, written under exactly those lowercase names by
// HeaderCarrier (NATS headers are case-sensitive; other clients look for the
// names as the W3C spells them). The spans:
//
//	executor.run          executor: acquire, run the command, release
//	lease.acquire         client: the whole Acquire call, polls included;
//	                      server: one acquire request (each poll is one)
//	lease.acquire.queued  server: the wait in the queue, child of the
//	                      request that queued it
//	lease.grant           server: the grant's store write and reply, in the
//	                      acquire's trace, linked to the queued span
//	lease.renew           client and server: one heartbeat
//	lease.release         client and server: one release
//	lease.expire          server: a lease whose TTL lapsed was freed
//
// Attributes: lease.node, lease.pool, lease.slots, lease.id,
// lease.request_id, lease.holder, lease.token, lease.queue_position and, on
// failures, lease.code (the wire error code).
//
// # Metrics
//
// otelsetup.MetricsHandler serves the Prometheus registry fed by the global meter
// provider, with Go runtime (go_*) and process (process_*) figures. The
// per-pool series (lease_capacity, lease_in_use, lease_queued,
// lease_grants_total, lease_rejections_total{code}, lease_queue_wait_seconds,
// lease_grant_latency_seconds, ...) are listed in package leasemetrics.
package telemetry

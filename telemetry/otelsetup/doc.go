// Package otelsetup installs the OpenTelemetry SDK for a program: the
// exporters the standard OTEL_* environment names, the Prometheus registry
// behind /metrics (MetricsHandler), and histograms shown at zero before
// their first observation (DeclareHistograms). Only the binaries import it;
// libraries (lease, jobs) use the OpenTelemetry API through package
// telemetry and never pull in an SDK or exporter.
package otelsetup

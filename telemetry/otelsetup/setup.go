package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/slotlease/slotlease/buildinfo"
	"github.com/slotlease/slotlease/telemetry/natstrace"
)

// The environment variables Setup reads itself. The exporters read the rest
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS, ...), and the
// SDK reads OTEL_TRACES_SAMPLER, OTEL_BSP_* and OTEL_METRIC_EXPORT_INTERVAL.
const (
	envTracesExporter  = "OTEL_TRACES_EXPORTER"
	envMetricsExporter = "OTEL_METRICS_EXPORTER"
	envSDKDisabled     = "OTEL_SDK_DISABLED"
	envProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol  = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envMetricsProtocol = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
)

// promHandler serves the Prometheus registry of the latest Setup; nil
// before the first.
var promHandler atomic.Pointer[http.Handler]

// Setup configures OpenTelemetry for a process from the standard OTEL_*
// environment and returns a shutdown that flushes and stops the exporters.
//
//   - The W3C TraceContext and Baggage propagator is always installed, so a
//     process that exports nothing still passes an incoming trace on.
//   - Traces: OTEL_TRACES_EXPORTER is a comma-separated list of none
//     (the default), otlp and console. With none, no SDK is set up: the
//     global tracer provider is the API's no-op one, spans record nothing,
//     and an incoming trace context is still passed on.
//   - Metrics: a meter provider is always installed and feeds a Prometheus
//     registry served by MetricsHandler. OTEL_METRICS_EXPORTER (none by
//     default; otlp, console; prometheus means just the registry) adds push
//     exporters.
//   - OTLP is sent as protobuf over HTTP (OTEL_EXPORTER_OTLP_PROTOCOL
//     http/protobuf, the default); grpc is refused with an error rather than
//     silently ignored.
//   - OTEL_SDK_DISABLED=true turns traces and push exporters off; /metrics
//     still works.
//   - The resource's service.name is serviceName unless OTEL_SERVICE_NAME
//     or OTEL_RESOURCE_ATTRIBUTES say otherwise.
//
// Setup replaces the global providers; call it once, early in main.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	disabled := strings.EqualFold(strings.TrimSpace(os.Getenv(envSDKDisabled)), "true")
	traceExporters, err := exporterNames(envTracesExporter, disabled, "otlp", "console")
	if err != nil {
		return nil, err
	}
	metricExporters, err := exporterNames(envMetricsExporter, disabled, "otlp", "console", "prometheus")
	if err != nil {
		return nil, err
	}

	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(buildinfo.Get().SemVer())),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: building the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}

	// Build every exporter first: they start nothing, so a failure leaves
	// nothing running and the globals as they were.
	var spanExps []sdktrace.SpanExporter
	var metricExps []sdkmetric.Exporter
	defer func() {
		if err != nil {
			for _, e := range spanExps {
				_ = e.Shutdown(ctx)
			}
			for _, e := range metricExps {
				_ = e.Shutdown(ctx)
			}
		}
	}()
	for _, name := range traceExporters {
		var exp sdktrace.SpanExporter
		switch name {
		case "otlp":
			if err := checkProtocol(envTracesProtocol); err != nil {
				return nil, err
			}
			exp, err = otlptracehttp.New(ctx)
		case "console":
			// stderr: an executor's stdout belongs to the command it runs.
			exp, err = stdouttrace.New(stdouttrace.WithWriter(os.Stderr))
		}
		if err != nil {
			return nil, fmt.Errorf("telemetry: %s trace exporter: %w", name, err)
		}
		spanExps = append(spanExps, exp)
	}
	for _, name := range metricExporters {
		var exp sdkmetric.Exporter
		switch name {
		case "prometheus":
			continue // always on: the registry below
		case "otlp":
			if err := checkProtocol(envMetricsProtocol); err != nil {
				return nil, err
			}
			exp, err = otlpmetrichttp.New(ctx)
		case "console":
			exp, err = stdoutmetric.New(stdoutmetric.WithWriter(os.Stderr))
		}
		if err != nil {
			return nil, fmt.Errorf("telemetry: %s metric exporter: %w", name, err)
		}
		metricExps = append(metricExps, exp)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	prom, err := promexporter.New(promexporter.WithRegisterer(reg), promexporter.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}

	// Nothing below fails.
	var shutdowns []func(context.Context) error
	if len(spanExps) > 0 {
		opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
		for _, exp := range spanExps {
			opts = append(opts, sdktrace.WithBatcher(exp))
		}
		tp := sdktrace.NewTracerProvider(opts...)
		shutdowns = append(shutdowns, tp.Shutdown)
		otel.SetTracerProvider(tp)
	} else {
		// No SDK, nothing recorded. The explicit no-op provider rather than
		// the global default: the default's placeholder spans cost three
		// allocations each (about 3x the time), this one's a single
		// context. (It also opts out of eBPF auto-instrumentation, which
		// hooks the default.)
		otel.SetTracerProvider(noop.NewTracerProvider())
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom)}
	for _, exp := range metricExps {
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	mp := sdkmetric.NewMeterProvider(mopts...)
	shutdowns = append(shutdowns, mp.Shutdown)
	buildInfo(mp.Meter(natstrace.ScopeName))
	otel.SetMeterProvider(mp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	h := promhttp.HandlerFor(zeroFill{reg}, promhttp.HandlerOpts{})
	promHandler.Store(&h)

	return func(ctx context.Context) error {
		var errs []error
		for _, s := range shutdowns {
			errs = append(errs, s(ctx))
		}
		return errors.Join(errs...)
	}, nil
}

// buildInfo makes slotlease_build_info{version,revision,goversion}, always
// 1, the Prometheus convention for what a binary was built from: there
// from the first scrape, the same version as `version` prints.
func buildInfo(meter metric.Meter) {
	bi := buildinfo.Get()
	attrs := metric.WithAttributes(attribute.String("version", bi.Version), attribute.String("revision", bi.Revision),
		attribute.String("goversion", bi.GoVersion))
	// Its only error is an invalid name or option, which this one is not.
	_, _ = meter.Int64ObservableGauge("slotlease.build_info",
		metric.WithDescription("Always 1: the version and VCS revision this binary was built from (labels)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(1, attrs)
			return nil
		}))
}

// exporterNames parses an OTEL_*_EXPORTER list. Unset or "none" selects
// nothing; an unknown name is an error, so a typo does not silently turn
// telemetry off.
func exporterNames(env string, disabled bool, known ...string) ([]string, error) {
	if disabled {
		return nil, nil
	}
	var names []string
	for name := range strings.SplitSeq(os.Getenv(env), ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		switch {
		case name == "" || name == "none":
		case contains(known, name):
			if !contains(names, name) {
				names = append(names, name)
			}
		default:
			return nil, fmt.Errorf("telemetry: %s=%q: unknown exporter %q, want none or one of %s", env, os.Getenv(env), name, strings.Join(known, ", "))
		}
	}
	return names, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// checkProtocol accepts only OTLP over HTTP with protobuf, the one transport
// compiled in.
func checkProtocol(signalEnv string) error {
	env, proto := signalEnv, os.Getenv(signalEnv)
	if proto == "" {
		env, proto = envProtocol, os.Getenv(envProtocol)
	}
	if proto != "" && proto != "http/protobuf" {
		return fmt.Errorf("telemetry: %s=%q: only http/protobuf is supported (send to the collector's port 4318)", env, proto)
	}
	return nil
}

// MetricsHandler serves the Prometheus text format of every instrument made
// from the global meter provider Setup installed, plus Go runtime and
// process figures. It may be mounted before Setup runs; until then it
// answers 503.
func MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := promHandler.Load()
		if h == nil {
			http.Error(w, "metrics are not set up", http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, r)
	})
}

package otelsetup_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
	colmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/slotlease/slotlease/telemetry"
	"github.com/slotlease/slotlease/telemetry/natstrace"
	"github.com/slotlease/slotlease/telemetry/otelsetup"
	"github.com/slotlease/slotlease/test/harness"
)

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	return harness.GetOK(t, srv.URL)
}

// With no OTEL_* variables, Setup leaves tracing off (the no-op tracer
// provider, even if a recording one was installed before; no span recorded),
// installs the W3C propagator, and still serves Prometheus metrics.
func TestSetupWithoutEnvInstallsNoTraceExporter(t *testing.T) {
	harness.ClearOTelEnv(t)
	harness.RecordSpans(t) // a recording provider Setup must not keep

	shutdown, err := otelsetup.Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()

	if _, ok := otel.GetTracerProvider().(noop.TracerProvider); !ok {
		t.Fatalf("tracer provider %T with no exporter configured, want the no-op one", otel.GetTracerProvider())
	}
	_, span := natstrace.StartClient(context.Background(), otel.Tracer(natstrace.ScopeName), natstrace.SpanAcquire)
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatal("a span records with tracing off")
	}
	span.End()
	if f := otel.GetTextMapPropagator().Fields(); !slices.Contains(f, "traceparent") || !slices.Contains(f, "baggage") {
		t.Fatalf("propagator fields %v, want traceparent and baggage", f)
	}
	if _, ok := otel.GetMeterProvider().(*sdkmetric.MeterProvider); !ok {
		t.Fatalf("meter provider %T, want the SDK's", otel.GetMeterProvider())
	}
	c, err := telemetry.Meter().Int64Counter("setup.test")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	body := scrape(t, otelsetup.MetricsHandler())
	for _, want := range []string{"setup_test_total 3", "go_goroutines ", `target_info{`, `service_name="test"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// collector is an OTLP/HTTP receiver that keeps what it is sent.
type collector struct {
	mu      sync.Mutex
	traces  []*coltrace.ExportTraceServiceRequest
	metrics []*colmetric.ExportMetricsServiceRequest
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch r.URL.Path {
	case "/v1/traces":
		req := &coltrace.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.traces = append(c.traces, req)
	case "/v1/metrics":
		req := &colmetric.ExportMetricsServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.metrics = append(c.metrics, req)
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// With OTEL_TRACES_EXPORTER=otlp and an endpoint, spans and metrics reach an
// OTLP/HTTP collector, under the service name from the environment.
func TestSetupOTLPExportsToCollector(t *testing.T) {
	harness.ClearOTelEnv(t)
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_METRICS_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "leasemgr-test")
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	shutdown, err := otelsetup.Setup(context.Background(), "not-this-name")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); !ok {
		t.Fatalf("tracer provider %T, want the SDK's", otel.GetTracerProvider())
	}
	ctx, run := telemetry.StartSpan(context.Background(), natstrace.SpanExecutorRun)
	_, acq := natstrace.StartClient(ctx, otel.Tracer(natstrace.ScopeName), natstrace.SpanAcquire, natstrace.Pool("gpu"))
	acq.End()
	run.End()
	c, err := telemetry.Meter().Int64Counter("otlp.test")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 1)
	if err := shutdown(context.Background()); err != nil { // flushes both
		t.Fatal(err)
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	var names []string
	var service string
	for _, req := range col.traces {
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.Resource.Attributes {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{natstrace.SpanExecutorRun, natstrace.SpanAcquire}) { // sorted
		t.Fatalf("collector got spans %q", names)
	}
	if service != "leasemgr-test" {
		t.Fatalf("service.name %q, want OTEL_SERVICE_NAME's", service)
	}
	var metricNames []string
	for _, req := range col.metrics {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					metricNames = append(metricNames, m.Name)
				}
			}
		}
	}
	if !slices.Contains(metricNames, "otlp.test") {
		t.Fatalf("collector got metrics %q, want otlp.test", metricNames)
	}
}

// Misconfiguration is an error at start, and leaves the globals alone.
func TestSetupRejectsBadEnv(t *testing.T) {
	for _, tc := range []struct{ env, value, want string }{
		{"OTEL_TRACES_EXPORTER", "zipkin", "unknown exporter"},
		{"OTEL_METRICS_EXPORTER", "otlp,statsd", "unknown exporter"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "only http/protobuf"},
		{"OTEL_RESOURCE_ATTRIBUTES", "no-equals-sign", "OTEL_RESOURCE_ATTRIBUTES"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			harness.ClearOTelEnv(t)
			t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(tc.env, tc.value)
			otel.SetTracerProvider(noop.NewTracerProvider())
			before := otel.GetTracerProvider()
			shutdown, err := otelsetup.Setup(context.Background(), "test")
			if err == nil {
				_ = shutdown(context.Background())
				t.Fatalf("%s=%s: no error", tc.env, tc.value)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to mention %q", err, tc.want)
			}
			if otel.GetTracerProvider() != before {
				t.Fatal("a failed Setup replaced the tracer provider")
			}
		})
	}
}

// OTEL_SDK_DISABLED wins over configured exporters.
func TestSetupSDKDisabled(t *testing.T) {
	harness.ClearOTelEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	harness.RecordSpans(t)
	shutdown, err := otelsetup.Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	if _, ok := otel.GetTracerProvider().(noop.TracerProvider); !ok {
		t.Fatalf("tracer provider %T although OTEL_SDK_DISABLED=true", otel.GetTracerProvider())
	}
}

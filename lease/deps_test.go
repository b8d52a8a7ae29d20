package lease_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The client library pulls in nats.go and the OpenTelemetry trace and
// propagation API, and nothing of the daemon: no manager, no NATS server,
// no OpenTelemetry SDK or exporter, no global provider (go.opentelemetry.io/otel
// itself, which brings a logger and metrics), no Prometheus client, no
// environment parser (issue 32). A program that only acquires a slot was
// 21 MB with them, 10 MB without.
func TestClientDependencies(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		for _, banned := range []string{
			"github.com/nats-io/nats-server", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters",
			"github.com/prometheus/", "github.com/caarlos0/env", "github.com/slotlease/slotlease/config",
			"github.com/slotlease/slotlease/jetstream", "github.com/slotlease/slotlease/telemetry/otelsetup",
			"github.com/slotlease/slotlease/manager", "go.opentelemetry.io/otel/metric",
		} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("lease depends on %s", d)
			}
		}
		if d == "go.opentelemetry.io/otel" || d == "github.com/slotlease/slotlease/telemetry" {
			t.Errorf("lease depends on %s", d)
		}
	}
	// 39 today: nats.go with nkeys and its crypto (18), the OpenTelemetry
	// trace and propagation API with what they import (15), and five small
	// packages of this module. A new dependency of the client should be a
	// decision.
	if len(deps) > 40 {
		t.Errorf("lease has %d non-standard dependencies, more than 40:\n%s", len(deps), strings.Join(deps, "\n"))
	}
}

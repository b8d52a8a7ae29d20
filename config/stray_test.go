package config

import (
	"strings"
	"testing"
)

// The misspellings, and a variable a newer version might read, are
// reported with the variable meant; slotlease's own are not.
func TestStraysNameTheClosestVariable(t *testing.T) {
	for _, tt := range []struct{ set, closest string }{
		{"POOL_CAPACITY", EnvPoolCapacities},
		{"LEASE_TTLS", EnvLeaseTTL},
		{"LAESE_TTL", EnvLeaseTTL},             // two letters swapped: one edit
		{"pool_capacities", EnvPoolCapacities}, // the wrong case
		{"NODEID", EnvNodeID},                  // no prefix of ours: by distance
		{"MAX_QUEUE_PER_CONNECTION", EnvMaxQueuedPerConnection},
		{"DISCONNECT_GRACE_PERIOD", EnvDisconnectGrace}, // a prefix of ours
		{"NATS_TLS_CA_FILE", EnvNATSTLSCA},
	} {
		got := Strays([]string{tt.set + "=1"})
		if len(got) != 1 || got[0].Name != tt.set || got[0].Closest != tt.closest {
			t.Errorf("%s: got %+v, want it reported as a stray of %s", tt.set, got, tt.closest)
			continue
		}
		if s := got[0].String(); !strings.HasPrefix(s, tt.set+" ") || !strings.HasSuffix(s, "did you mean "+tt.closest+"?") || strings.Contains(s, "\n") {
			t.Errorf("%s: the warning %q is not one line naming it and ending \"did you mean %s?\"", tt.set, s, tt.closest)
		}
	}
	var own []string
	for _, v := range Vars {
		own = append(own, v.Name+"=x")
	}
	if got := Strays(own); len(got) != 0 {
		t.Errorf("slotlease's own variables reported: %+v", got)
	}
}

// What is commonly set where slotlease runs is not reported: a shell's,
// CI's, Go's, Kubernetes', the OpenTelemetry SDK's, the nats CLI's, and
// what the executor gives the commands it runs.
func TestStraysLeaveOthersAlone(t *testing.T) {
	environ := []string{
		"HOME=/root", "PATH=/bin", "USER=u", "LOGNAME=u", "SHELL=/bin/sh", "TERM=xterm", "LANG=C", "LC_ALL=C", "TZ=UTC", "PWD=/", "OLDPWD=/",
		"HOSTNAME=h", "TMPDIR=/tmp", "EDITOR=vi", "DISPLAY=:0", "XDG_CONFIG_HOME=/c", "XDG_STATE_HOME=/s", "SSH_AUTH_SOCK=/s",
		"HTTP_PROXY=x", "HTTPS_PROXY=x", "NO_PROXY=x", "http_proxy=x",
		"GOFLAGS=", "GOPROXY=x", "GOPATH=/go", "CGO_ENABLED=1", "CI=true", "GITHUB_ACTIONS=true", "GITHUB_EVENT_NAME=push", "RUNNER_OS=Linux",
		"KUBERNETES_SERVICE_HOST=10.0.0.1", "NODE_NAME=n", "POD_NAME=p", "POD_NAMESPACE=ns", "NODE_ENV=production",
		"OTEL_EXPORTER_OTLP_ENDPOINT=x", "OTEL_SERVICE_NAME=x", "OTEL_LOGS_EXPORTER=none", "OTEL_TRACES_SAMPLER=always_on",
		"OTEL_RESOURCE_ATTRIBUTES=x", "OTEL_SDK_DISABLED=false", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"NATS_CONTEXT=x", "NATS_CA=x", "NATS_CERT=x", "NATS_KEY=x", "NATS_TIMEOUT=5s", "NATS_TOKEN=x",
		"LEASE_ID=x", "LEASE_TOKEN=1", "LEASE_POOL=gpu", "LEASE_SLOTS=1", "LEASE_NODE=n", "LEASE_POOLS=gpu,io",
		"LEASE_GPU_ID=x", "LEASE_GPU_TOKEN=1", "LEASE_IO_SLOTS=2", "LEASE_IO_NODE=n",
		"SLOTLEASE_JOB_SOCKET=/s", "SLOTLEASE_JOB_TOKEN=x", "SLOTLEASE_SKIP_BROWSER=1", "_SLOTLEASE_SANDBOX_INIT=1",
		"=weird", "NOVALUE",
	}
	if got := Strays(environ); len(got) != 0 {
		t.Errorf("reported: %+v", got)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "ABC", 3}, {"ABC", "", 3}, {"ABC", "ABC", 0},
		{"LEASE_TTL", "LEASE_TTLS", 1}, {"LAESE_TTL", "LEASE_TTL", 1}, {"POOL_CAPACITY", "POOL_CAPACITIES", 3},
		{"KITTEN", "SITTING", 3}, {"CA", "ABC", 3}, // optimal string alignment: no edit of a swapped pair
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := editDistance(tt.b, tt.a); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d (symmetric)", tt.b, tt.a, got, tt.want)
		}
	}
}

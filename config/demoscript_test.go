package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// scripts/cluster-demo.sh states the TTL rule for those who change its
// TTLs, and picks default TTLs of its own: both must be the rule config
// warns by (its header once said + 3s where leasemgr warns below + 4s, so
// a demo run at LEASE_TTL=5s was warned of by the managers it started).
func TestClusterDemoStatesTheTTLRule(t *testing.T) {
	b, err := os.ReadFile("../scripts/cluster-demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	rule := "LEASE_TTL >= 2 x LEADER_TTL + " + TTLRuleMargin.String()
	if !strings.Contains(script, rule) {
		t.Errorf("scripts/cluster-demo.sh does not state the rule as config enforces it: %q", rule)
	}
	if m := regexp.MustCompile(`LEASE_TTL >= 2 x LEADER_TTL \+ \S+`).FindAllString(script, -1); len(m) != 1 {
		t.Errorf("scripts/cluster-demo.sh states the rule %d times (%q), want once", len(m), m)
	}
	defaults := map[string]time.Duration{}
	for _, name := range []string{EnvLeaseTTL, EnvLeaderTTL} {
		m := regexp.MustCompile(`(?m)^` + name + `=\$\{` + name + `:-([0-9a-z.]+)\}$`).FindStringSubmatch(script)
		if m == nil {
			t.Fatalf("scripts/cluster-demo.sh: no default for %s", name)
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatalf("scripts/cluster-demo.sh: %s default %q: %v", name, m[1], err)
		}
		defaults[name] = d
	}
	c, err := LoadManagerFrom(map[string]string{EnvLeaseTTL: defaults[EnvLeaseTTL].String(), EnvLeaderTTL: defaults[EnvLeaderTTL].String(),
		EnvNATSURL: "nats://127.0.0.1:4222"})
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("scripts/cluster-demo.sh's default TTLs are warned of: %q", w)
	}
}

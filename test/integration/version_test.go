package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/slotlease/slotlease/buildinfo"
	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
)

// Both binaries say what they were built from, and a running leasemgr
// says the same in its NATS service info (nats micro info leasemgr) and
// in slotlease_build_info on /metrics, from the first scrape (issue 31).
func TestVersionAgreesEverywhere(t *testing.T) {
	t.Parallel()
	versions := map[string]buildinfo.JSON{}
	for _, bin := range []string{"leasemgr", "executor"} {
		out, errOut, code := runHelp(t, bin, "version", "--json")
		var v buildinfo.JSON
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Version == "" || v.SemVer == "" || v.GoVersion == "" {
			t.Fatalf("%s version --json: exit %d, %v, stderr %q:\n%s", bin, code, err, errOut, out)
		}
		versions[bin] = v
		plain, _, code := runHelp(t, bin, "version")
		if code != 0 || !strings.HasPrefix(plain, bin+" "+v.Version) {
			t.Errorf("%s version: exit %d, want %q first:\n%s", bin, code, bin+" "+v.Version, plain)
		}
	}
	if versions["leasemgr"] != versions["executor"] {
		t.Errorf("the two binaries of one build differ: %+v, %+v", versions["leasemgr"], versions["executor"])
	}
	v := versions["leasemgr"]

	env, httpAddr := managerEnv(t, "ver", "gpu=1", "15s")
	startManager(t, env, httpAddr)
	// At once: the first scrape has it.
	labels := []string{"version", v.Version, "goversion", v.GoVersion}
	if v.Revision != "" { // a build without VCS information has none
		labels = append(labels, "revision", v.Revision)
	}
	if got := metricValue(t, httpAddr, "slotlease_build_info", labels...); got != 1 {
		t.Errorf("slotlease_build_info%q = %v, want 1:\n%s", labels, got, scrapeMetrics(t, httpAddr))
	}
	nc, err := connectAs(t, envValue(env, "HOME"), natsURL(env), config.RoleReader) // the least role: discovery is imported for readers
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg, err := nc.Request("$SRV.INFO."+lease.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != v.SemVer {
		t.Errorf("nats micro info shows version %q, leasemgr version says %q", info.Version, v.SemVer)
	}
}

package integration

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// Two nodes share one NATS: the first runs the embedded server, the second
// joins it with NATS_URL. pools --all finds both through the micro service,
// and watch --since replays what happened before it started.
func TestPoolsAllAndWatchSince(t *testing.T) {
	t.Parallel()
	env1, http1 := managerEnv(t, "alpha", "gpu=1", "15s")
	startManager(t, env1, http1)
	var url string
	for _, e := range env1 {
		if v, ok := strings.CutPrefix(e, "NATS_LISTEN="); ok {
			url = "nats://" + v
		}
	}
	env2, http2 := managerEnv(t, "beta", "io=3", "15s")
	env2 = append(env2, "NATS_URL="+url)
	startManager(t, env2, http2)

	run := start(t, env1, "executor", "run", "--pool", "gpu", "--", "true")
	if code := run.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("executor exit %d:\n%s", code, run.Output())
	}

	all := start(t, env1, "leasemgr", "pools", "--all")
	if code := all.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("pools --all exit %d:\n%s", code, all.Output())
	}
	for _, re := range []string{`alpha\s+gpu\s+1\s`, `alpha\s+default\s+4\s`, `beta\s+io\s+3\s`, `beta\s+default\s+4\s`} {
		if !regexp.MustCompile(re).MatchString(all.Output()) {
			t.Fatalf("pools --all lacks %s:\n%s", re, all.Output())
		}
	}

	// --json: an array of {node, pools}, one per node, sorted by node.
	allJSON := start(t, env1, "leasemgr", "pools", "--all", "--json")
	if code := allJSON.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("pools --all --json exit %d:\n%s", code, allJSON.Output())
	}
	var nodes []lease.NodePools
	if err := json.Unmarshal([]byte(allJSON.Output()), &nodes); err != nil || len(nodes) != 2 ||
		nodes[0].Node != "alpha" || len(nodes[0].Pools) != 2 || nodes[1].Node != "beta" || len(nodes[1].Pools) != 2 ||
		nodes[1].Pools[1].Name != "io" || nodes[1].Pools[1].Capacity != 3 {
		t.Fatalf("pools --all --json: %v\n%s", err, allJSON.Output())
	}

	watch := start(t, env1, "leasemgr", "watch", "--since", "1h", "--node", "*")
	eventually(t, 10*time.Second, "replayed events", func() bool {
		out := watch.Output()
		return strings.Contains(out, "granted") && strings.Contains(out, "released") && strings.Contains(out, "alpha/gpu")
	})
	// ...and then it follows.
	run2 := start(t, env2, "executor", "run", "--pool", "io", "--slots", "2", "--", "true")
	run2.Wait(t, 20*time.Second)
	eventually(t, 10*time.Second, "a live event after the replay", func() bool {
		return strings.Contains(watch.Output(), "beta/io") && strings.Contains(watch.Output(), fmt.Sprintf("slots=%d", 2))
	})
}

package integration

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sljs "github.com/slotlease/slotlease/jetstream"
	"github.com/slotlease/slotlease/manager"

	"github.com/slotlease/slotlease/config"
	"github.com/slotlease/slotlease/lease"
)

// refusedCount reads lease_records_refused_total{node,reason} from the
// manager's /metrics; -1 if the series is not there.
func refusedCount(t *testing.T, httpAddr, node, reason string) float64 {
	t.Helper()
	return metricValue(t, httpAddr, "lease_records_refused_total", "node", node, "reason", reason)
}

// A record put into the lease bucket by someone else, naming a manager
// and holding the only gpu slot but stored without a TTL, is refused by
// the real leasemgr while it serves and again when it restarts: the slot
// stays free, an executor gets it, and /metrics counts the refusals.
func TestForgedRecordIsRefusedByLeasemgr(t *testing.T) {
	t.Parallel()
	const node = "forged"
	env, httpAddr := managerEnv(t, node, "gpu=1", "15s")
	m := startManager(t, env, httpAddr)
	for _, r := range manager.RefusalReasons {
		if v := refusedCount(t, httpAddr, node, r); v != 0 {
			t.Fatalf("lease_records_refused_total reason %s before any refusal: %v, want a series at 0", r, v)
		}
	}

	// Only the manager role may write the bucket of the embedded server:
	// the forger uses its credentials, and the manager must still refuse a
	// record without a TTL.
	nc := mustConnectAs(t, envValue(env, "HOME"), natsURL(env), config.RoleManager)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, sljs.NamesFor(lease.DefaultPrefix).Leases)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(lease.Record{ID: "forged", Node: node, Pool: "gpu", Slots: 1, Holder: "attacker", TTLMs: 15000, Manager: "anyone"})
	if _, err := kv.Put(ctx, lease.RecordKey(node, "gpu", "forged"), rec); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the live refusal on /metrics", func() bool { return refusedCount(t, httpAddr, node, manager.RefusedNoTTL) == 1 })
	if s := httpPools(t, httpAddr)["gpu"]; s.InUse != 0 {
		t.Fatalf("gpu after the forged record: %+v, want nothing in use", s)
	}

	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := m.Wait(t, 15*time.Second); code != 0 {
		t.Fatalf("leasemgr exit %d after SIGTERM", code)
	}
	m = startManager(t, env, httpAddr)
	if v := refusedCount(t, httpAddr, node, manager.RefusedNoTTL); v != 1 {
		t.Fatalf("no_ttl refusals after the restart's rebuild: %v, want 1", v)
	}
	if s := httpPools(t, httpAddr)["gpu"]; s.InUse != 0 {
		t.Fatalf("gpu after the restart: %+v, want nothing in use", s)
	}
	if code, out := runExecutor(t, env, "run", "--pool", "gpu", "--wait", "10s", "--", "true"); code != 0 {
		t.Fatalf("executor run on the free slot: exit %d\n%s", code, out)
	}
	if !strings.Contains(m.Output(), "refusing a lease record") {
		t.Fatalf("no log line for the refused record:\n%s", m.Output())
	}
}

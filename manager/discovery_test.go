package manager_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/test/harness"
)

// Discovery is answered in every form micro answers it, with micro's JSON,
// and resize errors carry micro's error headers.
func TestDiscoveryAnswersLikeMicro(t *testing.T) {
	t.Parallel()
	srv, _ := startNode(t, 5*time.Second, manager.PoolConfig{Name: "p", Capacity: 1})
	nc := harness.Connect(t, srv.URL)
	ask := func(subject string, data []byte, v any) {
		t.Helper()
		msg, err := nc.Request(subject, data, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		if err := json.Unmarshal(msg.Data, v); err != nil {
			t.Fatalf("%s: %q: %v", subject, msg.Data, err)
		}
	}
	var ping micro.Ping
	ask("$SRV.PING", nil, &ping)
	if ping.Type != micro.PingResponseType || ping.Name != lease.ServiceName || ping.ID == "" || ping.Version != lease.Version || ping.Metadata["node"] != node {
		t.Fatalf("ping %+v", ping)
	}
	var byID micro.Ping
	ask("$SRV.PING."+lease.ServiceName+"."+ping.ID, nil, &byID)
	if byID.ID != ping.ID {
		t.Fatalf("ping by id answered by %q, want %q", byID.ID, ping.ID)
	}
	var info micro.Info
	ask("$SRV.INFO."+lease.ServiceName+"."+ping.ID, nil, &info)
	if info.Type != micro.InfoResponseType || len(info.Endpoints) != 3 || info.Endpoints[1].Subject != lease.ResizeSubject(lease.DefaultPrefix, node) ||
		info.Endpoints[2].Subject != lease.SnapshotSubject(lease.DefaultPrefix, node) {
		t.Fatalf("info %+v", info)
	}

	// One stats request and one failing resize, then the figures.
	var r lease.Reply
	ask(lease.StatsSubject(lease.DefaultPrefix, node), []byte("{}"), &r)
	msg, err := nc.Request(lease.ResizeSubject(lease.DefaultPrefix, node), []byte(`{"remove":["nope"]}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, desc := msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader); code != "404" || desc == "" {
		t.Fatalf("resize error headers: code %q, description %q", code, desc)
	}
	var stats micro.Stats
	ask("$SRV.STATS."+lease.ServiceName, nil, &stats)
	if stats.Type != micro.StatsResponseType || stats.ID != ping.ID || len(stats.Endpoints) != 3 {
		t.Fatalf("stats %+v", stats)
	}
	st, rs := stats.Endpoints[0], stats.Endpoints[1]
	if st.Name != "stats" || st.NumRequests != 1 || st.NumErrors != 0 ||
		rs.Name != "resize" || rs.NumRequests != 1 || rs.NumErrors != 1 || rs.LastError == "" {
		t.Fatalf("endpoint stats %+v %+v", st, rs)
	}
}

package lease

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/slotlease/slotlease/buildinfo"
)

// ServiceName is the NATS service name every lease manager answers
// discovery under (discovery.go), so $SRV.PING.leasemgr, $SRV.INFO and
// $SRV.STATS (and `nats micro ls`) find every node's active manager.
const ServiceName = "leasemgr"

// DiscoverySubjects are the service discovery subjects for the managers
// by name, as patterns: $SRV.PING, $SRV.INFO and $SRV.STATS with
// ServiceName, and with ServiceName and an instance id. What an account of
// clients imports from the managers' (`nats micro ls leasemgr`, `nats
// micro info leasemgr`); the bare $SRV.PING is answered too, but asks
// every service of an account, so it is not exported.
func DiscoverySubjects() []string {
	return []string{"$SRV.*." + ServiceName, "$SRV.*." + ServiceName + ".*"}
}

// DiscoveryVerbs are the $SRV verbs the managers answer (discovery.go).
var DiscoveryVerbs = []string{"PING", "INFO", "STATS"}

// Version is the version the managers' service info shows (`nats micro
// info leasemgr`): this binary's, from its build information, in the
// semantic-versioning form the NATS service API wants
// (buildinfo.Info.SemVer), the same as `leasemgr version` prints and
// slotlease_build_info carries.
var Version = buildinfo.Get().SemVer()

// DiscoverNodes returns the nodes whose active managers answer a micro
// service ping for prefix, sorted. It waits until ctx ends (give it a short
// deadline, e.g. 500ms) to hear every node.
func DiscoverNodes(ctx context.Context, nc *nats.Conn, prefix string) ([]string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.PING."+ServiceName, inbox, nil); err != nil {
		return nil, err
	}
	var nodes []string
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break // the deadline: everyone who answers has answered
		}
		var ping micro.Ping
		if json.Unmarshal(msg.Data, &ping) != nil || ping.Metadata["prefix"] != prefix {
			continue
		}
		if n := ping.Metadata["node"]; n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return nodes, nil
}

package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/slotlease/slotlease/lease"
)

// discovery answers the NATS service discovery requests ($SRV.PING, $SRV.INFO
// and $SRV.STATS, each bare, with the service name, and with name and id)
// with the JSON micro.AddService would send, so `nats micro ls/info/stats`
// and DiscoverNodes find the manager. It is the project's own rather than
// micro's because micro answers whatever reply subject a request names, and
// every answer the manager sends must pass the reply rule (replyto.go): its
// handlers run under outbox.guard like the lease verbs, and it answers
// through the outbox.
//
// The admin endpoints (stats, resize, snapshot) are plain subscriptions,
// listed and counted here as micro endpoints; the lease verbs stay off this
// list, on the hot path, and are named in the metadata.
//
// discovery owns the admin side: the endpoints and their figures (each its
// own lock), the pools' utilisation history (its own lock) and the
// goroutine that samples it (start, wait). It asks the Manager through
// admin, whose methods take m.mu themselves: discovery holds no lock of
// its own while it calls them.
type discovery struct {
	ping, info []byte // static answers, encoded once
	identity   micro.ServiceIdentity
	started    time.Time

	stats, resize, snapshot *endpoint

	out   *outbox
	admin admin

	hist history        // the pools' utilisation history (history.go): its own lock
	wg   sync.WaitGroup // the history's sampling goroutine
}

// admin is what the admin endpoints need of the Manager.
type admin interface {
	NodePools() lease.NodePools
	Snapshot(history bool) lease.NodeSnapshot
	handleResize(msg *nats.Msg)
	poolPoints(now time.Time) map[string]lease.HistoryPoint // history's sample
}

var _ admin = (*Manager)(nil)

// endpoint is one admin endpoint and its figures for $SRV.STATS.
type endpoint struct {
	name, subject string

	mu         sync.Mutex // guards the figures below
	requests   int
	errors     int
	lastError  string
	processing time.Duration
}

// newDiscovery encodes the static answers of the manager cfg configures.
func newDiscovery(cfg Config, out *outbox, a admin) (*discovery, error) {
	d := &discovery{
		identity: micro.ServiceIdentity{
			Name:    lease.ServiceName,
			ID:      nuid.Next(),
			Version: lease.Version,
			Metadata: map[string]string{
				"node":     cfg.Node,
				"prefix":   cfg.Prefix,
				"instance": cfg.Instance,
				"acquire":  lease.Subject(cfg.Prefix, cfg.Node, "<pool>", lease.VerbAcquire),
				"events":   lease.EventFilter(cfg.Prefix, cfg.Node, "", ""),
			},
		},
		started: time.Now().UTC(),
		stats:   &endpoint{name: "stats", subject: lease.StatsSubject(cfg.Prefix, cfg.Node)},
		resize:  &endpoint{name: "resize", subject: lease.ResizeSubject(cfg.Prefix, cfg.Node)},
		// snapshot.go: holders, waiters and history for the operator's page.
		snapshot: &endpoint{name: "snapshot", subject: lease.SnapshotSubject(cfg.Prefix, cfg.Node)},
		out:      out,
		admin:    a,
	}
	if cfg.ServedBy != "" {
		d.identity.Metadata["served_by"] = cfg.ServedBy
	}
	var err error
	if d.ping, err = json.Marshal(micro.Ping{ServiceIdentity: d.identity, Type: micro.PingResponseType}); err != nil {
		return nil, fmt.Errorf("lease: service ping: %w", err)
	}
	info := micro.Info{ServiceIdentity: d.identity, Type: micro.InfoResponseType,
		Description: "slot-lease manager for node " + cfg.Node}
	for _, e := range d.endpoints() {
		info.Endpoints = append(info.Endpoints, micro.EndpointInfo{Name: e.name, Subject: e.subject})
	}
	if d.info, err = json.Marshal(info); err != nil {
		return nil, fmt.Errorf("lease: service info: %w", err)
	}
	return d, nil
}

// subscribe subscribes the admin endpoints and the $SRV subjects. The
// subscriptions are the outbox's, so its unsubscribe ends them all.
func (d *discovery) subscribe() error {
	subscribe := func(subject string, h nats.MsgHandler) error {
		_, err := d.out.subscribe(subject, d.out.guard(h))
		return err
	}
	admin := map[*endpoint]nats.MsgHandler{d.stats: d.handleStats, d.resize: d.admin.handleResize, d.snapshot: d.handleSnapshot}
	for _, e := range d.endpoints() {
		if err := subscribe(e.subject, e.timed(admin[e])); err != nil {
			return err
		}
	}
	answers := []struct {
		verb string
		h    nats.MsgHandler
	}{
		{"PING", func(msg *nats.Msg) { d.out.answer(msg, d.ping) }},
		{"INFO", func(msg *nats.Msg) { d.out.answer(msg, d.info) }},
		{"STATS", d.serviceStats},
	}
	for _, a := range answers {
		for _, subject := range []string{
			"$SRV." + a.verb,
			"$SRV." + a.verb + "." + lease.ServiceName,
			"$SRV." + a.verb + "." + lease.ServiceName + "." + d.identity.ID,
		} {
			if err := subscribe(subject, a.h); err != nil {
				return err
			}
		}
	}
	return nil
}

// start samples the history until ctx ends; wait waits for that.
func (d *discovery) start(ctx context.Context) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.hist.run(ctx, d.admin.poolPoints)
	}()
}

func (d *discovery) wait() { d.wg.Wait() }

func (d *discovery) handleStats(msg *nats.Msg) {
	np := d.admin.NodePools()
	d.out.endpointAnswer(d.stats, msg.Reply, lease.Reply{Status: lease.StatusOK, Node: np.Node, Pools: np.Pools, ServedBy: np.ServedBy, Warnings: np.Warnings, ClusterPools: np.ClusterPools})
}

func (d *discovery) endpoints() []*endpoint { return []*endpoint{d.stats, d.resize, d.snapshot} }

func (d *discovery) serviceStats(msg *nats.Msg) {
	st := micro.Stats{ServiceIdentity: d.identity, Type: micro.StatsResponseType, Started: d.started}
	for _, e := range d.endpoints() {
		st.Endpoints = append(st.Endpoints, e.figures())
	}
	data, err := json.Marshal(st)
	if err != nil {
		d.out.log.Error("encoding service stats", "err", err)
		return
	}
	d.out.answer(msg, data)
}

// timed counts h's requests and time, as micro does per endpoint. The
// request counts before h answers, so whoever got the answer sees it
// counted.
func (e *endpoint) timed(h nats.MsgHandler) nats.MsgHandler {
	return func(msg *nats.Msg) {
		start := time.Now()
		e.mu.Lock()
		e.requests++
		e.mu.Unlock()
		defer func() {
			e.mu.Lock()
			e.processing += time.Since(start)
			e.mu.Unlock()
		}()
		h(msg)
	}
}

func (e *endpoint) failed(code, description string) {
	e.mu.Lock()
	e.errors++
	e.lastError = code + ":" + description
	e.mu.Unlock()
}

func (e *endpoint) figures() *micro.EndpointStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &micro.EndpointStats{Name: e.name, Subject: e.subject, NumRequests: e.requests, NumErrors: e.errors,
		LastError: e.lastError, ProcessingTime: e.processing}
	if e.requests > 0 {
		s.AverageProcessingTime = e.processing / time.Duration(e.requests)
	}
	return s
}

// respondResize answers a resize (endpointAnswer).
func (d *discovery) respondResize(reply string, r lease.Reply) {
	d.out.endpointAnswer(d.resize, reply, r)
}

// serviceErrorCode maps a wire code to the HTTP-like status micro services
// put in Nats-Service-Error-Code.
func serviceErrorCode(c lease.Code) string {
	switch c {
	case lease.CodeBadRequest:
		return "400"
	case lease.CodeUnknownPool:
		return "404"
	case lease.CodePoolBusy, lease.CodeConflict:
		return "409"
	case lease.CodeUnavailable:
		return "503"
	default:
		return "500"
	}
}

// headerSafe keeps a header value on one line: messages quote client input
// with %q, but an error's text may hold anything.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}

package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BrokerConfig wires a Broker.
type BrokerConfig struct {
	// Conn is a connection to the executors' account with the job queue
	// administrator's rights: it makes consumers, fetches, and writes
	// signed records. The queue must exist (Open).
	Conn   *nats.Conn
	Prefix string // subject prefix; "lease" if empty
	// Key signs records and bind tokens (KeySize bytes): the same on every
	// broker of a cluster, and read only by lease managers.
	Key    []byte
	Logger *slog.Logger
	// Refused, if set, counts records whose signature a verify found
	// wrong (a metric).
	Refused func(n int)
}

// Broker answers executors' job queue requests (broker.go). Start it with
// StartBroker; Close stops it and waits for the requests under way.
type Broker struct {
	cfg    BrokerConfig
	log    *slog.Logger
	q      *Queue
	signer signer
	sub    *nats.Subscription
	sem    chan struct{} // requests handled at once
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool                          // Close has begun: no request starts
	consumers map[string]jetstream.Consumer // by durable name
	logGate   logGate                       // refusals are logged at most every 10 s
}

// logGate lets a log line through at most once every 10 s: what a client
// can make the broker log must not flood the log.
type logGate struct {
	mu   sync.Mutex
	last time.Time
}

func (g *logGate) open(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.last) < 10*time.Second {
		return false
	}
	g.last = now
	return true
}

// brokerWorkers bounds the requests a broker handles at once; more wait
// in its subscription's buffer.
const brokerWorkers = 32

// maxConsumerCache bounds the consumer handles a broker keeps.
const maxConsumerCache = 4096

// StartBroker binds the job queue and starts answering on its broker
// subjects.
func StartBroker(ctx context.Context, cfg BrokerConfig) (*Broker, error) {
	if cfg.Conn == nil {
		return nil, errors.New("jobs: broker needs a connection")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "lease"
	}
	sg, err := newSigner(cfg.Key)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	q, err := Bind(ctx, cfg.Conn, cfg.Prefix)
	if err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, q: q, signer: sg, sem: make(chan struct{}, brokerWorkers),
		consumers: map[string]jetstream.Consumer{}}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.sub, err = cfg.Conn.QueueSubscribe(q.names.BrokerSubjects(), brokerQueue, b.dispatch)
	if err != nil {
		b.cancel()
		return nil, fmt.Errorf("jobs: broker: %w", err)
	}
	_ = b.sub.SetPendingLimits(1<<14, 64<<20)
	// Serving once the server has the subscription: a request sent right
	// after StartBroker returns must not meet "no responders" (seen on a
	// busy machine).
	if err := cfg.Conn.FlushWithContext(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("jobs: broker: subscribing: %w", err)
	}
	return b, nil
}

// Close stops answering and waits for the requests under way.
func (b *Broker) Close() {
	_ = b.sub.Unsubscribe()
	b.cancel()
	b.mu.Lock()
	b.closed = true // no request starts after this: Wait below is final
	b.mu.Unlock()
	b.wg.Wait()
}

// dispatch hands a request to a worker: fetches and settles wait on
// JetStream, and one slow request must not hold up the rest.
func (b *Broker) dispatch(msg *nats.Msg) {
	if msg.Reply == "" {
		return // published for someone by the server, or a stray: never acted on
	}
	select {
	case b.sem <- struct{}{}:
	case <-b.ctx.Done():
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.sem
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		defer func() { <-b.sem }()
		ctx, cancel := context.WithTimeout(b.ctx, brokerTimeout)
		defer cancel()
		out := b.handle(ctx, msg)
		data, err := json.Marshal(out)
		if err == nil {
			_ = msg.Respond(data)
		}
	}()
}

// handle answers one request.
func (b *Broker) handle(ctx context.Context, msg *nats.Msg) any {
	verb := msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
	switch verb {
	case verbConsumer:
		var req consumerRequest
		if err := decodeRequest(msg.Data, &req); err != nil {
			return consumerReply{Error: err.Error()}
		}
		out, err := b.consumerInfo(ctx, req)
		if err != nil {
			return consumerReply{Error: err.Error()}
		}
		return out
	case verbFetch:
		var req consumerRequest
		if err := decodeRequest(msg.Data, &req); err != nil {
			return fetchReply{Error: err.Error()}
		}
		out, err := b.fetch(ctx, req)
		if err != nil {
			return fetchReply{Error: err.Error()}
		}
		return out
	case verbSettle:
		var req settleRequest
		if err := decodeRequest(msg.Data, &req); err != nil {
			return settleReply{Error: err.Error()}
		}
		return b.settle(ctx, req)
	case verbVerify:
		var req verifyRequest
		if err := decodeRequest(msg.Data, &req); err != nil {
			return verifyReply{Error: err.Error()}
		}
		return b.verify(req)
	}
	return map[string]string{"error": "unknown broker verb"}
}

// decodeRequest decodes a request strictly: unknown fields are refused.
func decodeRequest(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad request: %v", err)
	}
	return nil
}

// validConsumer checks what a consumer or fetch request names.
func validConsumer(req consumerRequest) error {
	if !plainToken(req.Pool) || len(req.Pool) > 64 {
		return fmt.Errorf("bad request: pool %.80q is not a pool name", req.Pool)
	}
	if req.Priority.rank() < 0 {
		return fmt.Errorf("bad request: priority %.20q is not one of high, normal, low", req.Priority)
	}
	if req.TenantKey != "" && !validTenantKey(req.TenantKey) {
		return fmt.Errorf("bad request: tenant key %.80q is not one", req.TenantKey)
	}
	return nil
}

// validTenantKey reports whether k is a TenantKey: "t_" and a plain name
// of at most 64 bytes, or "h_" and 32 hex digits.
func validTenantKey(k string) bool {
	if name, ok := strings.CutPrefix(k, "t_"); ok {
		return len(name) <= 64 && plainToken(name)
	}
	if h, ok := strings.CutPrefix(k, "h_"); ok {
		if len(h) != 32 {
			return false
		}
		for i := 0; i < len(h); i++ {
			if !('0' <= h[i] && h[i] <= '9' || 'a' <= h[i] && h[i] <= 'f') {
				return false
			}
		}
		return true
	}
	return false
}

// consumer returns the product's durable consumer for req's subject with
// req's ack wait, making or updating it if need be.
func (b *Broker) consumer(ctx context.Context, req consumerRequest) (jetstream.Consumer, error) {
	if err := validConsumer(req); err != nil {
		return nil, err
	}
	// No ack wait: whatever the consumer has (DefaultAckWait if it is
	// made now); one: that one.
	ackWait := time.Duration(req.AckWaitMs) * time.Millisecond
	if req.AckWaitMs != 0 && (ackWait < minAckWait || ackWait > maxAckWait) {
		return nil, fmt.Errorf("bad request: ack wait %v is not between %v and %v", ackWait, minAckWait, maxAckWait)
	}
	name := b.q.names.Consumer(req.Pool, req.Priority, req.TenantKey)
	b.mu.Lock()
	c := b.consumers[name]
	b.mu.Unlock()
	if c != nil && (req.AckWaitMs == 0 || c.CachedInfo().Config.AckWait == ackWait) {
		return c, nil
	}
	c = nil
	var err error
	if req.AckWaitMs == 0 {
		if c, err = b.q.stream.Consumer(ctx, name); errors.Is(err, jetstream.ErrConsumerNotFound) {
			c, ackWait, err = nil, DefaultAckWait, nil
		}
	}
	if c == nil && err == nil {
		c, err = b.q.stream.CreateOrUpdateConsumer(ctx, productConsumer(b.q.names, req.Pool, req.Priority, req.TenantKey, ackWait))
	}
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", name, err)
	}
	b.mu.Lock()
	if len(b.consumers) >= maxConsumerCache {
		clear(b.consumers)
	}
	b.consumers[name] = c
	b.mu.Unlock()
	return c, nil
}

// productConsumer is the one consumer the product keeps for a pool,
// priority and tenant key: durable, filtered on that subject alone,
// shared by every executor serving the pool. Tenant consumers go after
// tenantIdle without a fetch.
func productConsumer(n Names, pool string, p Priority, tkey string, ackWait time.Duration) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       n.Consumer(pool, p, tkey),
		Description:   fmt.Sprintf("executors serving pool %s, %s priority", pool, p),
		FilterSubject: n.subjectOf(pool, p, tkey),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1, // attempts are counted by the server, which dead-letters
		MaxAckPending: maxAckPending,
	}
	if tkey != "" {
		cfg.Description += ", tenant key " + tkey
		cfg.InactiveThreshold = tenantIdle
	}
	return cfg
}

// consumerInfo makes the consumer if asked and reports its figures.
func (b *Broker) consumerInfo(ctx context.Context, req consumerRequest) (consumerReply, error) {
	c, err := b.consumer(ctx, req)
	if err != nil {
		return consumerReply{}, err
	}
	ci, err := c.Info(ctx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		// Deleted after tenantIdle (or by an operator): made again.
		b.forget(req)
		if c, err = b.consumer(ctx, req); err == nil {
			ci, err = c.Info(ctx)
		}
	}
	if err != nil {
		return consumerReply{}, err
	}
	return consumerReply{NumPending: ci.NumPending, NumAckPending: ci.NumAckPending, DeliveredStream: ci.Delivered.Stream}, nil
}

func (b *Broker) forget(req consumerRequest) {
	b.mu.Lock()
	delete(b.consumers, b.q.names.Consumer(req.Pool, req.Priority, req.TenantKey))
	b.mu.Unlock()
}

// fetch takes the next job of req's consumer for the asker, with the bind
// token that names it as that delivery's taker.
func (b *Broker) fetch(ctx context.Context, req consumerRequest) (fetchReply, error) {
	c, err := b.consumer(ctx, req)
	if err != nil {
		return fetchReply{}, err
	}
	batch, err := c.FetchNoWait(1)
	if err != nil {
		return fetchReply{}, err
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg == nil {
		if err := batch.Error(); err != nil {
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				b.forget(req)
			}
			return fetchReply{}, err
		}
		return fetchReply{Empty: true}, nil
	}
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.Term()
		return fetchReply{}, fmt.Errorf("a job message without metadata: %w", err)
	}
	return fetchReply{Subject: msg.Subject(), Reply: msg.Reply(), Data: msg.Data(), Bind: b.signer.bind(msg.Reply(), boundID(msg.Data(), meta.Sequence.Stream)),
		Meta: &deliveryMeta{Stream: meta.Stream, Consumer: meta.Consumer, StreamSeq: meta.Sequence.Stream, ConsumerSeq: meta.Sequence.Consumer,
			NumDelivered: meta.NumDelivered, NumPending: meta.NumPending, Timestamp: meta.Timestamp}}, nil
}

// boundID is the job id a delivery's records are stored under: the job's
// own, or, for a message that is not a valid job, "malformed-<sequence>"
// (buryMalformed).
func boundID(data []byte, seq uint64) string {
	var job Job
	_ = json.Unmarshal(data, &job) // as buryMalformed reads it
	if validID(job.ID) == nil {
		return job.ID
	}
	return malformedID(seq)
}

// settle stores a final record of a job the asker took, signed.
func (b *Broker) settle(ctx context.Context, req settleRequest) settleReply {
	var rec Record
	if err := json.Unmarshal(req.Record, &rec); err != nil {
		return settleReply{Error: fmt.Sprintf("bad request: record: %v", err)}
	}
	if !rec.State.Final() {
		return settleReply{Error: fmt.Sprintf("bad request: a settled record is final, not %s", rec.State)}
	}
	if validID(rec.ID) != nil || !b.signer.checkBind(req.Reply, rec.ID, req.Bind) {
		return settleReply{Error: "refused: this record's job was not taken with that bind token"}
	}
	bucket := b.q.names.Results
	if req.Dead {
		bucket = b.q.names.Dead
	}
	subject := "$KV." + bucket + "." + rec.ID
	msg := nats.NewMsg(subject)
	msg.Data = req.Record
	msg.Header.Set(SignatureHeader, b.signer.sign(rec.ID, req.Record))
	conditional := !req.Dead && !req.Any
	rev := req.Rev
	for range 2 {
		var opts []jetstream.PublishOpt
		if conditional {
			opts = append(opts, jetstream.WithExpectLastSequencePerSubject(rev))
		}
		ack, err := b.q.js.PublishMsg(ctx, msg, opts...)
		if err == nil {
			return settleReply{Rev: ack.Sequence}
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || (apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence &&
			apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return settleReply{Error: err.Error()}
		}
		if rev != 0 {
			return settleReply{Moved: true}
		}
		// "None stored" may be a deleted key, whose delete marker is the
		// subject's last message: written over, as kv.Create does.
		last, err := b.q.stream.GetLastMsgForSubject(ctx, subject)
		if err != nil || !deleteMarker(last.Header) {
			return settleReply{Moved: true}
		}
		rev = last.Sequence
	}
	return settleReply{Moved: true}
}

// deleteMarker reports whether a stored KV message's headers mark a
// delete, a purge or an expiry.
func deleteMarker(h nats.Header) bool {
	op := h.Get("KV-Operation")
	return op == "DEL" || op == "PURGE" || h.Get("Nats-Marker-Reason") != ""
}

// verify checks the signatures of stored records.
func (b *Broker) verify(req verifyRequest) verifyReply {
	if len(req.Items) > maxVerifyItems {
		return verifyReply{Error: fmt.Sprintf("bad request: at most %d records at once", maxVerifyItems)}
	}
	out := verifyReply{Valid: make([]bool, len(req.Items))}
	refused := 0
	for i, it := range req.Items {
		out.Valid[i] = validID(it.ID) == nil && b.signer.check(it.ID, it.Digest, it.Sig)
		if !out.Valid[i] {
			refused++
		}
	}
	if refused > 0 {
		if b.cfg.Refused != nil {
			b.cfg.Refused(refused)
		}
		if b.logGate.open(time.Now()) {
			b.log.Warn("refusing job records no broker signed (written by hand, or forged); at most one line every 10s", "records", refused)
		}
	}
	return out
}

// Adopt signs the outcomes stored before any broker had a key (by a
// version without brokers), so that readers keep believing them: call it
// once, right after the key was made (jetstream.JobsKey's created). What
// was stored by then is taken on trust, as it was; every outcome after
// needs a settle. A record written meanwhile is left to its writer.
func (b *Broker) Adopt(ctx context.Context) (int, error) {
	adopted := 0
	for _, bucket := range []string{b.q.names.Results, b.q.names.Dead} {
		var unsigned []scanEntry
		err := b.q.scan(bucket, "*", 0).readAll(ctx, func(e scanEntry) {
			if rec, ok := recordOf(e); ok && claimsOutcome(&rec) && !b.signer.check(rec.ID, digest(rec.stored), rec.sig) {
				unsigned = append(unsigned, e)
			}
		})
		if err != nil {
			return adopted, fmt.Errorf("jobs: adopting the outcomes stored before: %w", err)
		}
		for _, e := range unsigned {
			msg := nats.NewMsg("$KV." + bucket + "." + e.key)
			msg.Data = e.value
			msg.Header.Set(SignatureHeader, b.signer.sign(e.key, e.value))
			if _, err := b.q.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(e.seq)); err == nil {
				adopted++
			}
		}
	}
	return adopted, nil
}

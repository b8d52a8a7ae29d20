package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// The broker: the job queue's part of leasemgr. Executors share one
// account and one job stream, so anything one may do to the stream's
// consumers or the results bucket, it may do to everyone's: make a
// consumer that takes every job, use up the stream's consumers, store
// "succeeded" over a job nobody ran. So executors do none of that
// themselves. A lease manager with the job queue's administrator rights
// runs a Broker, and executors ask it, on <prefix>.jobs.broker.v1.<verb>:
//
//   - consumer: make (or update) the product's durable consumer of one
//     pool, priority and tenant, and say how many jobs it has; executors
//     may make none (so no consumer but the product's exists on the
//     stream, named and filtered so none blocks another).
//   - fetch: take the next job of such a consumer, with a bind token that
//     names the taker of that delivery.
//   - settle: store a final record (succeeded, dead, cancelled) of a job
//     taken with that token, signed (sign.go).
//   - verify: check signatures, for readers (wait, status, jobs).
//
// A request is answered only on its reply subject, and one without is
// dropped: a message the server publishes for someone (a JetStream
// answer aimed at these subjects) has none.

// Broker verbs.
const (
	verbConsumer = "consumer"
	verbFetch    = "fetch"
	verbSettle   = "settle"
	verbVerify   = "verify"
)

// BrokerSubject is where the broker answers verb.
func (n Names) BrokerSubject(verb string) string { return n.Prefix + ".jobs.broker.v1." + verb }

// BrokerSubjects matches every broker request: four tokens after the
// prefix, outside the stream's subjects and the lease protocol's.
func (n Names) BrokerSubjects() string { return n.Prefix + ".jobs.broker.v1.*" }

// brokerQueue is the queue group of every broker: one answers.
const brokerQueue = "slotlease-jobs-broker"

// Limits of a broker request.
const (
	maxVerifyItems  = 1024
	minAckWait      = time.Second
	maxAckWait      = time.Hour
	brokerTimeout   = 10 * time.Second
	maxBrokerAnswer = 4 << 20
)

// ErrNoBroker: no lease manager answers the job queue's broker requests.
var ErrNoBroker = errors.New("jobs: no lease manager serves the job queue (its broker): " +
	"start leasemgr with the job queue's administrator rights (docs/jobs.md, \"The broker\")")

// errMoved: a settle's conditional write found the record at another
// revision.
var errMoved = errors.New("jobs: the record moved")

// consumerRequest names one job subject's consumer (fetch too).
type consumerRequest struct {
	Pool      string   `json:"pool"`
	Priority  Priority `json:"priority"`
	TenantKey string   `json:"tenant_key,omitempty"`
	// AckWaitMs is the consumer's claim lifetime (ServerConfig.AckWait).
	AckWaitMs int64 `json:"ack_wait_ms,omitempty"`
}

// consumerReply is a consumer's figures.
type consumerReply struct {
	NumPending      uint64 `json:"num_pending"`
	NumAckPending   int    `json:"num_ack_pending"`
	DeliveredStream uint64 `json:"delivered_stream"`
	Error           string `json:"error,omitempty"`
}

// fetchReply is one delivery, or none (Empty).
type fetchReply struct {
	Empty   bool   `json:"empty,omitempty"`
	Subject string `json:"subject,omitempty"`
	// Reply is the delivery's acknowledgement subject.
	Reply string `json:"reply,omitempty"`
	Data  []byte `json:"data,omitempty"`
	// Meta is the delivery's metadata, as the server gave it.
	Meta *deliveryMeta `json:"meta,omitempty"`
	// Bind names the taker (signer.bind of Reply and the job's id).
	Bind  string `json:"bind,omitempty"`
	Error string `json:"error,omitempty"`
}

// deliveryMeta is jetstream.MsgMetadata on the wire.
type deliveryMeta struct {
	Stream       string    `json:"stream"`
	Consumer     string    `json:"consumer"`
	StreamSeq    uint64    `json:"stream_seq"`
	ConsumerSeq  uint64    `json:"consumer_seq"`
	NumDelivered uint64    `json:"num_delivered"`
	NumPending   uint64    `json:"num_pending"`
	Timestamp    time.Time `json:"timestamp"`
}

// settleRequest stores a final record of the job taken as Reply.
type settleRequest struct {
	Reply string `json:"reply"`
	Bind  string `json:"bind"`
	// Dead stores Record in the dead-letter bucket; otherwise in the
	// results bucket: only if the stored record is at Rev (0: none, or
	// deleted), or whatever is stored with Any.
	Dead   bool            `json:"dead,omitempty"`
	Any    bool            `json:"any,omitempty"`
	Rev    uint64          `json:"rev,omitempty"`
	Record json.RawMessage `json:"record"`
}

// settleMode is where and how a settle stores its record.
type settleMode uint8

const (
	settleAt   settleMode = iota // the results bucket, at a revision
	settleAny                    // the results bucket, over whatever is stored
	settleDead                   // the dead-letter bucket
)

// settleReply is the stored revision, or why not.
type settleReply struct {
	Rev   uint64 `json:"rev,omitempty"`
	Moved bool   `json:"moved,omitempty"`
	Error string `json:"error,omitempty"`
}

// verifyItem is one stored record to check: its job id, the digest of its
// stored bytes and its signature.
type verifyItem struct {
	ID     string `json:"id"`
	Digest string `json:"digest"`
	Sig    string `json:"sig"`
}

type verifyRequest struct {
	Items []verifyItem `json:"items"`
}

type verifyReply struct {
	Valid []bool `json:"valid"`
	Error string `json:"error,omitempty"`
}

// ask sends a broker request and decodes its answer into out.
func (q *Queue) ask(ctx context.Context, verb string, req, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, brokerTimeout)
		defer cancel()
	}
	msg, err := q.js.Conn().RequestWithContext(ctx, q.names.BrokerSubject(verb), data)
	if errors.Is(err, nats.ErrNoResponders) {
		return ErrNoBroker
	}
	if err != nil {
		return fmt.Errorf("jobs: asking the broker (%s): %w", verb, err)
	}
	if len(msg.Data) > maxBrokerAnswer {
		return fmt.Errorf("jobs: the broker's answer to %s is too large", verb)
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return fmt.Errorf("jobs: the broker's answer to %s: %w", verb, err)
	}
	return nil
}

// brokerError is the error a broker answer carries, if any.
func brokerError(verb, e string) error {
	if e == "" {
		return nil
	}
	return fmt.Errorf("jobs: the broker refused %s: %s", verb, e)
}

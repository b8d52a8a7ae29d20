package jobs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Errors callers branch on.
var (
	// ErrNotFound: no record for that job id (never submitted, or its
	// record expired after the results TTL).
	ErrNotFound = errors.New("jobs: job not found")
	// ErrDuplicate: a client-chosen id (or idempotency key) names a job
	// submitted before with another spec.
	ErrDuplicate = errors.New("jobs: job id already used by another job")
	// ErrNoQueue: Bind found no job stream or bucket for the prefix: no job
	// was ever submitted with it.
	ErrNoQueue = errors.New("jobs: no job queue for this prefix")
)

// Defaults of Config.
const (
	DefaultResultTTL = 7 * 24 * time.Hour
	DefaultDeadTTL   = 30 * 24 * time.Hour
	// DefaultMaxQueuedBytes caps the jobs stream; submits fail once it is
	// full rather than dropping jobs.
	DefaultMaxQueuedBytes = 1 << 30
	// duplicateWindow is how long a client-chosen id is deduplicated by the
	// stream itself (Nats-Msg-Id); the results bucket covers longer.
	duplicateWindow = 2 * time.Minute
)

// Config describes the queue's storage. Only the first process to create a
// stream or bucket sets its limits; later ones bind to what exists.
type Config struct {
	Prefix    string        // subject prefix; "lease" if empty
	Replicas  int           // 1 if zero; 3 on a cluster
	ResultTTL time.Duration // how long results are kept; DefaultResultTTL if zero
	DeadTTL   time.Duration // how long dead letters are kept; DefaultDeadTTL if zero
	MaxBytes  int64         // jobs stream size cap, and half and a quarter of it the buckets' (limits.go); DefaultMaxQueuedBytes if zero
}

// Queue is the durable job queue: a work-queue stream of jobs, one subject
// per pool and priority, plus KV buckets for results and dead letters.
type Queue struct {
	names   Names
	js      jetstream.JetStream
	stream  jetstream.Stream
	results jetstream.KeyValue
	dead    jetstream.KeyValue
}

// Open binds the queue, creating the stream and buckets on first use.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Queue, error) {
	return open(ctx, nc, cfg, true)
}

// Bind binds an existing queue without creating anything; ErrNoQueue if it
// does not exist. For read-only commands, so a mistyped prefix does not
// leave a stray stream behind.
func Bind(ctx context.Context, nc *nats.Conn, prefix string) (*Queue, error) {
	return open(ctx, nc, Config{Prefix: prefix}, false)
}

func open(ctx context.Context, nc *nats.Conn, cfg Config, create bool) (*Queue, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "lease"
	}
	cfg.Replicas = cmp.Or(cfg.Replicas, 1)
	cfg.ResultTTL = cmp.Or(cfg.ResultTTL, DefaultResultTTL)
	cfg.DeadTTL = cmp.Or(cfg.DeadTTL, DefaultDeadTTL)
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, DefaultMaxQueuedBytes)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jobs: jetstream: %w", err)
	}
	q := &Queue{names: NamesFor(cfg.Prefix), js: js}

	q.stream, err = js.Stream(ctx, q.names.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if !create {
			return nil, ErrNoQueue
		}
		q.stream, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        q.names.Stream,
			Description: "slotlease jobs: one subject per pool, priority and tenant; a job leaves when acknowledged",
			Subjects:    q.names.StreamSubjects(),
			// Work-queue retention: a message is removed when its executor
			// acknowledges it, i.e. once its result is stored.
			Retention:  jetstream.WorkQueuePolicy,
			Storage:    jetstream.FileStorage,
			Replicas:   cfg.Replicas,
			MaxBytes:   cfg.MaxBytes,
			MaxMsgSize: MaxSpecBytes,
			// No MaxAge: a job is never dropped for waiting long. When the
			// stream is full, submits fail instead.
			Discard:    jetstream.DiscardNew,
			Duplicates: duplicateWindow,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			q.stream, err = js.Stream(ctx, q.names.Stream)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: stream %s: %w", q.names.Stream, err)
	}
	if create {
		q.upgradeSubjects(ctx)
	}
	q.results, err = bucket(ctx, js, create, jetstream.KeyValueConfig{
		Bucket: q.names.Results, Description: "slotlease job states and results by job id",
		History: 1, TTL: cfg.ResultTTL, MaxValueSize: 2 * MaxSpecBytes, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		MaxBytes: cfg.MaxBytes / resultsShare, // limits.go
	})
	if err != nil {
		return nil, err
	}
	q.dead, err = bucket(ctx, js, create, jetstream.KeyValueConfig{
		Bucket: q.names.Dead, Description: "slotlease dead letters: jobs whose every attempt failed, with their last error",
		History: 1, TTL: cfg.DeadTTL, MaxValueSize: 2 * MaxSpecBytes, Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
		MaxBytes: cfg.MaxBytes / deadShare,
	})
	if err != nil {
		return nil, err
	}
	return q, nil
}

// upgradeSubjects adds the tenant subjects to a stream made before jobs had
// them. Only the manager role may update the stream; anyone else leaves it
// as it is, and a submit with a tenant says what to do (submitSubject).
func (q *Queue) upgradeSubjects(ctx context.Context) {
	cfg := q.stream.CachedInfo().Config
	want := q.names.StreamSubjects()
	if slices.Equal(cfg.Subjects, want) {
		return
	}
	cfg.Subjects = want
	if s, err := q.js.UpdateStream(ctx, cfg); err == nil {
		q.stream = s
	}
}

// submitSubject is the subject a job of spec is stored under, or an error
// naming the fix when the stream cannot take it.
func (q *Queue) submitSubject(spec Spec) (string, error) {
	subject := q.names.Subject(spec.Pool, spec.Priority, spec.Tenant)
	if spec.Tenant != "" && !slices.Contains(q.stream.CachedInfo().Config.Subjects, q.names.StreamSubjects()[1]) {
		return "", fmt.Errorf("jobs: stream %s predates jobs with a tenant: start a leasemgr of this version once (it adds the subject %s)",
			q.names.Stream, q.names.StreamSubjects()[1])
	}
	return subject, nil
}

func bucket(ctx context.Context, js jetstream.JetStream, create bool, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if !create {
			return nil, ErrNoQueue
		}
		kv, err = js.CreateKeyValue(ctx, cfg)
		if err == nil {
			err = capNewBucket(ctx, js, cfg.Bucket, cfg.MaxBytes/bytesPerRecord)
		}
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Names returns the queue's subjects, stream and bucket names.
func (q *Queue) Names() Names { return q.names }

// submit validates spec, stores the job in the stream and its record as
// queued, and returns the record. With spec.ID or spec.IdempotencyKey set,
// submitting the same spec again returns the job submitted first, in
// whatever state it is now (Record.Existing); another spec under that id
// is ErrDuplicate. Either is looked up in the spec's tenant's scope only
// (Spec.JobID), so neither answer tells of another tenant's job.
func (q *Queue) submit(ctx context.Context, spec Spec, trace map[string]string) (*Record, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec.ID = spec.JobID() // in its tenant's scope
	if spec.ID == "" {
		spec.ID = nuid.Next()
	} else if rec, _, err := q.get(ctx, q.results, spec.ID); err == nil {
		if !sameSpec(rec.Spec, spec) {
			return nil, fmt.Errorf("%w: %s was submitted with another spec (it is %s)", ErrDuplicate, spec.ID, rec.State)
		}
		rec.Existing = true
		return rec, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	now := time.Now().UTC()
	data, err := json.Marshal(Job{ID: spec.ID, SubmittedAt: now, Spec: spec, Trace: trace})
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("%w: encoded job is %d bytes, more than %d", ErrInvalidSpec, len(data), MaxSpecBytes)
	}
	// The job goes into the stream first, its record second: an executor
	// that takes the job at once may already have written a newer record,
	// which Create then leaves alone. A submitter dying in between leaves a
	// job without a record, and the executor that takes it writes one.
	subject, err := q.submitSubject(spec)
	if err != nil {
		return nil, err
	}
	ack, err := q.js.Publish(ctx, subject, data,
		jetstream.WithMsgID(spec.ID), jetstream.WithExpectStream(q.names.Stream))
	if err != nil {
		return nil, fmt.Errorf("jobs: storing the job: %w", err)
	}
	rec := &Record{ID: spec.ID, State: StateQueued, Spec: spec, SubmittedAt: now, UpdatedAt: now, Seq: ack.Sequence}
	if ack.Duplicate {
		if got, _, err := q.get(ctx, q.results, spec.ID); err == nil {
			got.Existing = true
			return got, nil
		}
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if _, err := q.results.Create(ctx, spec.ID, val); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("jobs: storing the record of job %s (the job itself is queued): %w", spec.ID, err)
	}
	rec.Superseded, err = q.supersede(ctx, rec) // supersede.go
	if err != nil {
		return rec, fmt.Errorf("job %s is queued, but: %w", rec.ID, err)
	}
	return rec, nil
}

// Get returns a job's record; ErrNotFound if there is none.
func (q *Queue) Get(ctx context.Context, id string) (*Record, error) {
	rec, _, err := q.get(ctx, q.results, id)
	return rec, err
}

// DeadLetter returns a dead job's record from the dead-letter bucket.
func (q *Queue) DeadLetter(ctx context.Context, id string) (*Record, error) {
	rec, _, err := q.get(ctx, q.dead, id)
	return rec, err
}

func (q *Queue) get(ctx context.Context, kv jetstream.KeyValue, id string) (*Record, uint64, error) {
	if validID(id) != nil {
		return nil, 0, fmt.Errorf("%w: %q is not a valid job id", ErrNotFound, id)
	}
	e, err := q.getEntry(ctx, kv.Bucket(), id)
	if err != nil {
		return nil, 0, err
	}
	rec, err := decodeRecord(e)
	if err != nil {
		return nil, 0, err
	}
	return rec, e.seq, nil
}

// decodeRecord decodes a stored record, keeping the bytes and signature
// it was read from.
func decodeRecord(e scanEntry) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(e.value, &rec); err != nil {
		return nil, fmt.Errorf("jobs: record of job %s is malformed: %w", e.key, err)
	}
	rec.stored, rec.sig = e.value, e.header.Get(SignatureHeader)
	return &rec, nil
}

// put stores a record, stamping UpdatedAt.
func (q *Queue) put(ctx context.Context, kv jetstream.KeyValue, rec *Record) error {
	rec.UpdatedAt = time.Now().UTC()
	val, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, rec.ID, val)
	return err
}

// putAt stores a record, stamping UpdatedAt, only if the stored one is at
// revision rev (0: only if there is none); it returns the new revision.
func (q *Queue) putAt(ctx context.Context, kv jetstream.KeyValue, rec *Record, rev uint64) (uint64, error) {
	rec.UpdatedAt = time.Now().UTC()
	val, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return kv.Create(ctx, rec.ID, val)
	}
	return kv.Update(ctx, rec.ID, val, rev)
}

// revisionMoved reports whether a conditional write failed because the key
// is no longer at the revision it was conditional on.
func revisionMoved(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// List returns up to limit records, most recently updated first, optionally
// only those in state (empty: all). It reads the whole results bucket, which
// its TTL and size cap keep bounded, without a consumer (scan.go).
func (q *Queue) List(ctx context.Context, limit int, state State) ([]Record, error) {
	byID := map[string]Record{}
	err := q.scan(q.names.Results, "*", 0).readAll(ctx, func(e scanEntry) {
		if e.deleted && !strings.Contains(e.key, ".") {
			delete(byID, e.key)
		} else if rec, ok := recordOf(e); ok {
			byID[rec.ID] = rec
		}
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: listing: %w", err)
	}
	var recs []Record
	for _, rec := range byID {
		if state == "" || rec.State == state {
			recs = append(recs, rec)
		}
	}
	slices.SortFunc(recs, func(a, b Record) int { return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), strings.Compare(a.ID, b.ID)) })
	if limit > 0 && len(recs) > limit {
		recs = recs[:limit]
	}
	return recs, nil
}

// scan reads bucket's keys matching pattern from sequence from on.
func (q *Queue) scan(bucket, pattern string, from uint64) *scanner {
	return newScanner(q.js.Conn(), bucket, pattern, from)
}

// Depth is the queue of one pool and priority.
type Depth struct {
	Pool     string   `json:"pool"`
	Priority Priority `json:"priority"`
	// Stored is every job of this pool and priority in the stream: waiting,
	// being run, or waiting for a retry.
	Stored uint64 `json:"stored"`
	// Waiting is the part never delivered to an executor yet.
	Waiting uint64 `json:"waiting"`
	// InFlight is the part delivered and not yet acknowledged: taken by an
	// executor (acquiring or running), or waiting for its retry backoff.
	InFlight int `json:"in_flight"`
}

// Depths returns the queue depth per pool and priority, for every pool with
// a job in the stream or an executor serving it, sorted by pool and then
// priority from high to low.
func (q *Queue) Depths(ctx context.Context) ([]Depth, error) {
	info, err := q.stream.Info(ctx, jetstream.WithSubjectFilter(q.names.AllSubjects()))
	if err != nil {
		return nil, fmt.Errorf("jobs: stream info: %w", err)
	}
	type key struct {
		pool string
		p    Priority
	}
	// Per subject (one per tenant): stored, then what its consumer says.
	type counts struct{ stored, waiting, inFlight uint64 }
	bySubject := map[string]*counts{}
	for subj, n := range info.State.Subjects {
		bySubject[subj] = &counts{stored: n, waiting: n} // until a consumer says better
	}
	lister := q.stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		subj := ci.Config.FilterSubject
		if _, _, _, ok := q.names.parseSubject(subj); !ok {
			continue
		}
		c := bySubject[subj]
		if c == nil {
			c = &counts{}
			bySubject[subj] = c
		}
		c.waiting, c.inFlight = ci.NumPending, uint64(ci.NumAckPending)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("jobs: consumers: %w", err)
	}
	byKey := map[key]*Depth{}
	for subj, c := range bySubject {
		pool, p, _, ok := q.names.parseSubject(subj)
		if !ok {
			continue
		}
		d := byKey[key{pool, p}]
		if d == nil {
			d = &Depth{Pool: pool, Priority: p}
			byKey[key{pool, p}] = d
		}
		d.Stored += c.stored
		d.Waiting += c.waiting
		d.InFlight += int(c.inFlight)
	}
	out := make([]Depth, 0, len(byKey))
	for _, d := range byKey {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b Depth) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(b.Priority.rank(), a.Priority.rank()))
	})
	return out, nil
}

// sameSpec compares two specs as stored: by their JSON, so an empty env
// and none are the same.
func sameSpec(a, b Spec) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

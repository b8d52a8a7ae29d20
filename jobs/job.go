package jobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/rules"
)

// Priority orders jobs of one pool: high is taken before normal, normal
// before low, subject to the aging rule (see Order).
type Priority string

const (
	High   Priority = "high"
	Normal Priority = "normal"
	Low    Priority = "low"
)

// Priorities lists the priorities from highest to lowest.
var Priorities = []Priority{High, Normal, Low}

// rank is the priority's level: high 2, normal 1, low 0, unknown -1.
func (p Priority) rank() int {
	switch p {
	case High:
		return 2
	case Normal:
		return 1
	case Low:
		return 0
	}
	return -1
}

// ParsePriority accepts high, normal or low.
func ParsePriority(s string) (Priority, error) {
	p := Priority(s)
	if p.rank() < 0 {
		return "", fmt.Errorf("%w: priority %q: must be high, normal or low", ErrInvalidSpec, s)
	}
	return p, nil
}

// State is where a job is in its life. queued, running and failed are
// transient; succeeded and dead are final.
type State string

const (
	// StateQueued: stored, waiting to be taken (also after it was given back
	// by an executor that stopped or could not get a lease in time).
	StateQueued State = "queued"
	// StateRunning: an executor holds a lease for it and runs it.
	StateRunning State = "running"
	// StateFailed: its last attempt failed and another is scheduled at
	// Record.NextAttemptAt.
	StateFailed State = "failed"
	// StateSucceeded: an attempt exited 0. Final.
	StateSucceeded State = "succeeded"
	// StateDead: every attempt failed (or it could not be decoded); it is in
	// the dead-letter bucket with its last error. Final.
	StateDead State = "dead"
	// StateCancelled: cancelled (executor cancel, purge, a batch's
	// --fail-fast) before it ran or while it ran; Error says why. Final.
	StateCancelled State = "cancelled"
)

// Final reports whether no further attempt will be made.
func (s State) Final() bool { return s == StateSucceeded || s == StateDead || s == StateCancelled }

// Defaults and limits of a job spec.
const (
	DefaultPool        = rules.DefaultPool
	DefaultSlots       = 1
	DefaultPriority    = Normal
	DefaultMaxAttempts = 3
	MaxMaxAttempts     = 100
	// MaxSpecBytes caps an encoded job: it is a stream message.
	MaxSpecBytes = 256 << 10
)

// Spec is what a job runs and where. Its JSON form is the job spec file
// `executor submit --spec` reads; docs/jobs.md documents it.
type Spec struct {
	// ID is optional: a client-chosen id makes submitting idempotent (the
	// same id is stored once). A fresh unique id otherwise.
	ID    string `json:"id,omitempty"`
	Pool  string `json:"pool"`
	Slots int64  `json:"slots"`
	// Pools are further pools each attempt holds beside Pool, all or none
	// (lease.Client.AcquireAll): this node's, or the cluster's when the
	// name is a cluster pool. At most lease.MaxSetPools-1.
	Pools       []PoolSlots       `json:"pools,omitempty"`
	Priority    Priority          `json:"priority"`
	MaxAttempts int               `json:"max_attempts"`
	Command     []string          `json:"command"`
	Env         map[string]string `json:"env,omitempty"`
	// Limits applied by the sandbox to each attempt; zero means none.
	Timeout      Duration `json:"timeout,omitzero"`
	CPU          Duration `json:"cpu,omitzero"`
	MemoryBytes  int64    `json:"memory_bytes,omitempty"`
	MaxProcs     int      `json:"max_procs,omitempty"`
	MaxOpenFiles int      `json:"max_open_files,omitempty"`
	Isolate      bool     `json:"isolate,omitempty"`
	NoNetwork    bool     `json:"no_network,omitempty"`
	// Writable lists absolute paths a confined job may write besides its
	// working directory, as far as its ids may (sandbox.Spec.Writable),
	// each by its real name (no symlink on the way). A follow-up job may
	// name only paths within its parent's.
	Writable []string `json:"writable,omitempty"`
	// Tenant is the lease request's tenant: fair pools share by it, and
	// tenant caps count it (at most lease.MaxTenantLen bytes).
	Tenant string `json:"tenant,omitempty"`
	// Key is the lease request's fairness key: fair pools share by key
	// within a tenant, and POOL_KEY_LIMITS caps the slots in flight per
	// key (at most lease.MaxKeyLen bytes).
	Key string `json:"key,omitempty"`
	// Units is the estimate of each attempt's usage for pools with a
	// budget (POOL_BUDGETS), 1..lease.MaxUnits, 0 none: reserved while the
	// attempt holds its leases, and settled at release from what the
	// command wrote to $LEASE_USAGE_FILE, else the estimate. A follow-up
	// job does not inherit it: its usage is its own to estimate.
	Units int64 `json:"units,omitempty"`
	// Group is the concurrency group of each attempt's lease request, and
	// OnGroup its option (lease.OnGroupCancelInProgress or
	// lease.OnGroupCancelPending): an attempt stopped by a newer request
	// of its group, or replaced while it waited for its lease, ends the
	// job cancelled ("superseded: ..."; docs/jobs.md).
	Group   string `json:"group,omitempty"`
	OnGroup string `json:"on_group,omitempty"`
	// IdempotencyKey, if set and ID is not, makes the id: the same key
	// always names the same job (IDForKey), so a retried submit finds it.
	// At most MaxIdempotencyKeyLen bytes.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Batch names the group of jobs this one belongs to; a follow-up job
	// submitted from inside a job gets its parent's.
	Batch string `json:"batch,omitempty"`
	// Parent is the id of the job that submitted this one from inside
	// (followup.go), and Depth how many such steps it is from a job
	// submitted from outside (0). Both are set by the serving executor.
	Parent string `json:"parent,omitempty"`
	Depth  int    `json:"depth,omitempty"`
}

// EnvName is a pool's part of the worker's lease variables
// (LEASE_<POOL>_ID, ...): upper case, '-' as '_'. Two pools of one run or
// job may not share it.
func EnvName(pool string) string {
	return strings.ToUpper(strings.ReplaceAll(pool, "-", "_"))
}

// PoolSlots is one further pool of a job and its slots.
type PoolSlots struct {
	Pool  string `json:"pool"`
	Slots int64  `json:"slots"`
}

// MaxWritable bounds Spec.Writable.
const MaxWritable = 16

// MaxDepth bounds Spec.Depth whatever an executor's --max-depth says.
const MaxDepth = 100

// MaxIdempotencyKeyLen bounds Spec.IdempotencyKey.
const MaxIdempotencyKeyLen = 256

// IDForKey is the job id an idempotency key names for a job without a
// tenant: "k-" and 32 hex digits of its SHA-256, a valid job id whatever
// the key holds. A tenant's keys name ids in its scope (Spec.JobID).
func IDForKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "k-" + hex.EncodeToString(sum[:16])
}

// Job ids are scoped by tenant, so that no tenant (a job submitting
// follow-ups, whose tenant its executor forces) can take the ids another
// will use, or learn from a submit's answer whether another's job exists.
// A tenant's job ids start with its scope, "t" and 16 hex digits of the
// tenant's SHA-256 and "-": a client-chosen id gets it put in front (an
// id that already starts with it is kept), an idempotency key names
// scope + "k-" + 32 hex digits of a hash of tenant and key. Ids of jobs
// without a tenant may not look like a scope.

// TenantScope is the prefix of every job id of tenant ("" for none).
func TenantScope(tenant string) string {
	if tenant == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(tenant))
	return "t" + hex.EncodeToString(sum[:8]) + "-"
}

// scopeLen is the length of every tenant's scope.
const scopeLen = 1 + 16 + 1

// looksScoped reports whether id starts like a tenant's scope.
func looksScoped(id string) bool {
	if len(id) < scopeLen || id[0] != 't' || id[scopeLen-1] != '-' {
		return false
	}
	for _, c := range []byte(id[1 : scopeLen-1]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// JobID is the id s's job gets: its ID or its idempotency key's, in its
// tenant's scope; "" when neither is given (a fresh id then).
func (s *Spec) JobID() string {
	scope := TenantScope(s.Tenant)
	switch {
	case s.IdempotencyKey != "" && scope == "":
		return IDForKey(s.IdempotencyKey)
	case s.IdempotencyKey != "":
		sum := sha256.Sum256([]byte(s.Tenant + "\x00" + s.IdempotencyKey))
		return scope + "k-" + hex.EncodeToString(sum[:16])
	case s.ID == "" || strings.HasPrefix(s.ID, scope):
		return s.ID
	}
	return scope + s.ID
}

// NewSpec returns a spec holding the defaults, for callers that fill it in
// field by field.
func NewSpec() Spec {
	return Spec{Pool: DefaultPool, Slots: DefaultSlots, Priority: DefaultPriority, MaxAttempts: DefaultMaxAttempts}
}

// ErrInvalidSpec is matched by every validation and decoding error of a
// job spec.
var ErrInvalidSpec = errors.New("invalid job spec")

// ParseSpec decodes a JSON job spec, fills in defaults for absent fields,
// and validates it. Errors name the offending field.
func ParseSpec(data []byte) (Spec, error) {
	s := NewSpec()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, specJSONError(data, err)
	}
	if dec.More() {
		return Spec{}, fmt.Errorf("%w: more than one JSON value", ErrInvalidSpec)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

var durationType = reflect.TypeFor[Duration]()

// specJSONError rewrites encoding/json's errors, which name Go types, into
// ones that name the JSON field and what it should hold.
func specJSONError(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line := 1 + bytes.Count(data[:min(int(syn.Offset), len(data))], []byte("\n"))
		return fmt.Errorf("%w: malformed JSON on line %d: %v", ErrInvalidSpec, line, syn)
	case errors.As(err, &typ):
		want := "a " + typ.Type.Kind().String()
		switch {
		case typ.Type == durationType:
			want = `a duration string like "90s" or "10m"`
		case typ.Type.Kind() >= reflect.Int && typ.Type.Kind() <= reflect.Int64:
			want = "an integer"
		case typ.Type.Kind() == reflect.Slice:
			want = "an array of strings"
		case typ.Type.Kind() == reflect.Map:
			want = "an object of strings"
		case typ.Type.Kind() == reflect.String:
			want = "a string"
		case typ.Type.Kind() == reflect.Bool:
			want = "true or false"
		}
		field := typ.Field
		if field == "" {
			return fmt.Errorf("%w: want a JSON object, got %s", ErrInvalidSpec, typ.Value)
		}
		return fmt.Errorf("%w: field %q: want %s, got %s", ErrInvalidSpec, field, want, typ.Value)
	case errors.Is(err, errDuration):
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("%w: unknown field %s", ErrInvalidSpec, strings.TrimPrefix(err.Error(), "json: unknown field "))
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: empty input, want a JSON object", ErrInvalidSpec)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: malformed JSON: unexpected end of input", ErrInvalidSpec)
	default:
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
}

// Validate checks every field and reports all problems at once.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if s.ID != "" {
		if err := rules.ValidToken(s.ID); err != nil {
			bad("id %q: %v", s.ID, err)
		}
	}
	if err := rules.ValidToken(s.Pool); err != nil {
		bad("pool %q: %v", s.Pool, err)
	}
	if s.Slots <= 0 {
		bad("slots %d: must be a positive integer", s.Slots)
	}
	if s.Priority.rank() < 0 {
		bad("priority %q: must be high, normal or low", s.Priority)
	}
	if len(s.Pools) > lease.MaxSetPools-1 {
		bad("pools: %d further pools, at most %d", len(s.Pools), lease.MaxSetPools-1)
	}
	seen := map[string]string{EnvName(s.Pool): s.Pool}
	for i, p := range s.Pools {
		if err := rules.ValidToken(p.Pool); err != nil {
			bad("pools[%d] %q: %v", i, p.Pool, err)
		} else if o, dup := seen[EnvName(p.Pool)]; dup && o == p.Pool {
			bad("pools[%d] %s: named twice (with pool or in pools)", i, p.Pool)
		} else if dup {
			bad("pools[%d] %s: %s and %s would share the worker's variables LEASE_%s_*", i, p.Pool, o, p.Pool, EnvName(p.Pool))
		}
		seen[EnvName(p.Pool)] = p.Pool
		if p.Slots <= 0 {
			bad("pools[%d] %s: slots %d must be a positive integer", i, p.Pool, p.Slots)
		}
	}
	if s.MaxAttempts < 1 || s.MaxAttempts > MaxMaxAttempts {
		bad("max_attempts %d: must be from 1 to %d", s.MaxAttempts, MaxMaxAttempts)
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		bad("command: must not be empty (give the program and its arguments)")
	}
	for _, a := range s.Command {
		if strings.IndexByte(a, 0) >= 0 {
			bad("command: argument %q holds a NUL byte", a)
		}
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			bad("env %q: names must be non-empty without '=' or NUL, values without NUL", k)
		}
	}
	for name, d := range map[string]Duration{"timeout": s.Timeout, "cpu": s.CPU} {
		if d < 0 {
			bad("%s %v: must not be negative", name, time.Duration(d))
		}
	}
	if s.MemoryBytes < 0 || s.MaxProcs < 0 || s.MaxOpenFiles < 0 {
		bad("memory_bytes, max_procs and max_open_files must not be negative")
	}
	if len(s.Writable) > MaxWritable {
		bad("writable: %d paths, at most %d", len(s.Writable), MaxWritable)
	}
	for _, p := range s.Writable {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" || strings.IndexByte(p, 0) >= 0 {
			bad("writable %q: must be a clean absolute path other than /", p)
		}
	}
	if len(s.Tenant) > lease.MaxTenantLen || strings.IndexByte(s.Tenant, 0) >= 0 {
		bad("tenant: at most %d bytes, without NUL", lease.MaxTenantLen)
	}
	if len(s.Key) > lease.MaxKeyLen || strings.IndexFunc(s.Key, unicode.IsControl) >= 0 || !utf8.ValidString(s.Key) {
		bad("key: at most %d bytes of UTF-8, without control characters", lease.MaxKeyLen)
	}
	if s.Units < 0 || s.Units > lease.MaxUnits {
		bad("units: %d, want 1 to %d (or none)", s.Units, int64(lease.MaxUnits))
	}
	if strings.IndexFunc(s.Group, unicode.IsControl) >= 0 || !utf8.ValidString(s.Group) {
		bad("group: UTF-8 without control characters")
	}
	if e := lease.CheckGroup(s.Group, s.OnGroup); e != nil {
		bad("%s", e.Message)
	}
	if len(s.IdempotencyKey) > MaxIdempotencyKeyLen || strings.IndexByte(s.IdempotencyKey, 0) >= 0 {
		bad("idempotency_key: at most %d bytes, without NUL", MaxIdempotencyKeyLen)
	}
	if s.Batch != "" {
		if err := rules.ValidToken(s.Batch); err != nil {
			bad("batch %q: %v", s.Batch, err)
		}
	}
	if s.Parent != "" {
		if err := rules.ValidToken(s.Parent); err != nil {
			bad("parent %q: %v", s.Parent, err)
		}
	}
	if s.Depth < 0 || s.Depth > MaxDepth || (s.Depth > 0) != (s.Parent != "") {
		bad("depth %d: must be from 0 to %d, and positive exactly when parent is set", s.Depth, MaxDepth)
	}
	if s.ID != "" && s.Tenant == "" && looksScoped(s.ID) {
		bad("id %q: ids that start with \"t\", 16 hex digits and \"-\" belong to tenants' jobs; give a tenant, or another id", s.ID)
	}
	if s.ID != "" && s.Tenant != "" && len(s.JobID()) > rules.MaxTokenLen {
		bad("id %q: in tenant %q's scope it would be %d characters, more than %d (give at most %d)", s.ID, s.Tenant, len(s.JobID()), rules.MaxTokenLen, rules.MaxTokenLen-scopeLen)
	}
	if s.IdempotencyKey != "" && s.ID != "" && s.ID != s.JobID() {
		bad("id %q and idempotency_key: give one of them (the key makes the id %s)", s.ID, s.JobID())
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidSpec, errors.Join(errs...))
}

// Duration is a time.Duration that reads and writes as a string like "10m".
type Duration time.Duration

var errDuration = errors.New("bad duration")

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string; a non-string is a type error so
// that encoding/json names the field.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: describeJSON(b), Type: durationType}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: fmt.Sprintf("string %q", s), Type: durationType}
	}
	*d = Duration(v)
	return nil
}

func describeJSON(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	default:
		return "number " + string(b)
	}
}

// Job is the message stored in the jobs stream.
type Job struct {
	ID          string    `json:"id"`
	SubmittedAt time.Time `json:"submitted_at"`
	Spec        Spec      `json:"spec"`
	// Trace is the W3C trace context (traceparent, tracestate) of the
	// submit span, which each run's span links to; none when not traced.
	Trace map[string]string `json:"trace,omitempty"`
}

// Record is a job's state and latest result, kept in the results bucket
// under its id (and, once dead, in the dead-letter bucket too).
type Record struct {
	ID          string    `json:"id"`
	State       State     `json:"state"`
	Spec        Spec      `json:"spec"`
	SubmittedAt time.Time `json:"submitted_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Attempts counts the deliveries that counted as attempts: every
	// delivery except those given back unrun (see Returned).
	Attempts int `json:"attempts"`
	// Returned counts deliveries an executor gave back without running the
	// job to an end: it stopped (SIGTERM), or no slot came free in time.
	// They do not use up attempts.
	Returned int `json:"returned,omitempty"`

	// The latest attempt.
	Node            string    `json:"node,omitempty"`
	LeaseID         string    `json:"lease_id,omitempty"`
	LeaseToken      uint64    `json:"lease_token,omitempty"`
	StartedAt       time.Time `json:"started_at,omitzero"`
	FinishedAt      time.Time `json:"finished_at,omitzero"`
	ExitCode        *int      `json:"exit_code,omitempty"`
	Signal          string    `json:"signal,omitempty"`
	DurationMs      int64     `json:"duration_ms,omitempty"`
	StoppedBy       string    `json:"stopped_by,omitempty"`
	PeakMemoryBytes int64     `json:"peak_memory_bytes,omitempty"`
	Isolation       string    `json:"isolation,omitempty"`
	Notes           []string  `json:"notes,omitempty"`
	StdoutTail      string    `json:"stdout_tail,omitempty"`
	StderrTail      string    `json:"stderr_tail,omitempty"`
	// Error is the last error: why the latest attempt failed, or why the
	// job is dead.
	Error         string    `json:"error,omitempty"`
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`

	// Seq is the job's message in the stream, so a cancel can delete it.
	Seq uint64 `json:"seq,omitempty"`

	// Existing is set by Submit when the job was submitted before: the
	// record is that job's, in whatever state it is now. Not stored.
	Existing bool `json:"-"`
	// Superseded lists, on Submit's record, the older jobs of the job's
	// concurrency group its on_group cancelled (supersede.go). Not stored.
	Superseded []string `json:"-"`
	// CancelRequested is set by Cancel on a running job's record: its
	// executor is to stop it. Not stored (the marker is, cancel.go).
	CancelRequested bool `json:"-"`
	// Unsigned is set by the readers that check outcomes (Wait, GetChecked,
	// ListChecked) on a record that claims an outcome (succeeded, dead)
	// no broker signed: a forgery, or a hand's write. Not stored.
	Unsigned bool `json:"unsigned,omitempty"`

	// stored and sig are the bytes this record was read from and their
	// signature, if any (sign.go).
	stored []byte
	sig    string
}

// Duration returns the latest attempt's run time.
func (r *Record) Duration() time.Duration { return time.Duration(r.DurationMs) * time.Millisecond }

// validID checks a job id: a token (letters, digits, '-', '_'), so it is a
// valid KV key and fits in a lease request id.
func validID(id string) error { return rules.ValidToken(id) }

// malformedID is the id a message that is not a valid job is dead-lettered
// under: its stream sequence.
func malformedID(seq uint64) string { return "malformed-" + strconv.FormatUint(seq, 10) }

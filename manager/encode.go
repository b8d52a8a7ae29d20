package manager

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/slotlease/slotlease/lease"
)

// Hand-written JSON encoders for the values on the lease cycle's hot path:
// the stored record, the grant reply and the events. encoding/json's
// reflection was a fifth of the CPU of a busy manager. The output decodes
// to the same values as json.Marshal's (encode_test.go checks that), field
// for field, with the same names and omitempty rules; it is not byte for
// byte the same (no HTML escaping of <, > and &).

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			// Invalid UTF-8 and U+2028/U+2029 need encoding/json's care.
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// field appends ,"name": (or "name": first in an object).
func field(b []byte, name string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendStringField(b []byte, name, v string) []byte {
	return appendString(field(b, name), v)
}

func appendIntField(b []byte, name string, v int64) []byte {
	return strconv.AppendInt(field(b, name), v, 10)
}

func appendUintField(b []byte, name string, v uint64) []byte {
	return strconv.AppendUint(field(b, name), v, 10)
}

func appendTimeField(b []byte, name string, t time.Time) []byte {
	b = append(field(b, name), '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendRecord appends r as json.Marshal would encode it.
func appendRecord(b []byte, r *lease.Record) []byte {
	b = append(b, '{')
	b = appendStringField(b, "id", r.ID)
	b = appendStringField(b, "node", r.Node)
	b = appendStringField(b, "pool", r.Pool)
	b = appendIntField(b, "slots", r.Slots)
	b = appendStringField(b, "holder", r.Holder)
	b = appendUintField(b, "token", r.Token)
	b = appendIntField(b, "ttl_ms", r.TTLMs)
	b = appendTimeField(b, "granted_at", r.GrantedAt)
	b = appendTimeField(b, "expires_at", r.ExpiresAt)
	if r.Term != 0 { // before "manager": see ownMark
		b = appendUintField(b, "term", r.Term)
	}
	if r.Manager != "" {
		b = appendStringField(b, "manager", r.Manager)
	}
	if r.Secret != "" {
		b = appendStringField(b, "secret", r.Secret)
	}
	if r.Tenant != "" {
		b = appendStringField(b, "tenant", r.Tenant)
	}
	if r.Key != "" {
		b = appendStringField(b, "key", r.Key)
	}
	if r.Priority != 0 {
		b = appendIntField(b, "priority", int64(r.Priority))
	}
	if r.Units != 0 {
		b = appendIntField(b, "units", r.Units)
	}
	if r.ConnServer != "" {
		b = appendStringField(b, "conn_server", r.ConnServer)
	}
	if r.ConnID != 0 {
		b = appendUintField(b, "conn_id", r.ConnID)
	}
	if r.DisconnectGraceMs != 0 {
		b = appendIntField(b, "disconnect_grace_ms", r.DisconnectGraceMs)
	}
	if r.Group != "" {
		b = appendStringField(b, "group", r.Group)
	}
	if r.GroupOwner != "" {
		b = appendStringField(b, "group_owner", r.GroupOwner)
	}
	return append(b, '}')
}

// appendReply appends r to b; the replies of the lease cycle (granted,
// queued, released) without stats or errors take the fast path, the others
// encoding/json's (a new slice, not b).
func appendReply(b []byte, r *lease.Reply) ([]byte, error) {
	if r.Pools != nil || r.Error != nil || r.Node != "" || r.ServedBy != "" || r.Warnings != nil || r.ClusterPools != nil || r.Stop != nil {
		return json.Marshal(r)
	}
	b = append(b, '{')
	b = appendStringField(b, "status", r.Status)
	if r.Lease != nil {
		b = appendRecord(field(b, "lease"), r.Lease)
	}
	if r.Position != 0 {
		b = appendIntField(b, "position", int64(r.Position))
	}
	if r.Existing {
		b = append(field(b, "existing"), "true"...)
	}
	if r.ServerStopping != "" {
		b = appendStringField(b, "server_stopping", r.ServerStopping)
	}
	return append(b, '}'), nil
}

// AppendEvent appends the event as json.Marshal would encode it.
func AppendEvent(b []byte, e *lease.Event) []byte {
	b = append(b, '{')
	b = appendStringField(b, "kind", string(e.Kind))
	b = appendTimeField(b, "time", e.Time)
	b = appendStringField(b, "node", e.Node)
	b = appendStringField(b, "pool", e.Pool)
	if e.RequestID != "" {
		b = appendStringField(b, "request_id", e.RequestID)
	}
	if e.LeaseID != "" {
		b = appendStringField(b, "lease_id", e.LeaseID)
	}
	if e.Holder != "" {
		b = appendStringField(b, "holder", e.Holder)
	}
	if e.Slots != 0 {
		b = appendIntField(b, "slots", e.Slots)
	}
	if e.Tenant != "" {
		b = appendStringField(b, "tenant", e.Tenant)
	}
	if e.Key != "" {
		b = appendStringField(b, "key", e.Key)
	}
	if e.Group != "" {
		b = appendStringField(b, "group", e.Group)
	}
	if e.Token != 0 {
		b = appendUintField(b, "token", e.Token)
	}
	if e.Position != 0 {
		b = appendIntField(b, "position", int64(e.Position))
	}
	if e.WaitMs != 0 {
		b = appendIntField(b, "wait_ms", e.WaitMs)
	}
	if e.Units != 0 {
		b = appendIntField(b, "units", e.Units)
	}
	if e.Settled != nil {
		b = appendIntField(b, "settled", *e.Settled)
	}
	if e.Code != "" {
		b = appendStringField(b, "code", string(e.Code))
	}
	if e.Message != "" {
		b = appendStringField(b, "message", e.Message)
	}
	s := &e.Stats
	b = append(field(b, "stats"), '{')
	b = appendIntField(b, "capacity", s.Capacity)
	b = appendIntField(b, "in_use", s.InUse)
	b = appendIntField(b, "available", s.Available)
	b = appendIntField(b, "queued", int64(s.QueuedRequests))
	b = appendIntField(b, "queued_slots", s.QueuedSlots)
	if s.Policy != "" {
		b = appendStringField(b, "policy", string(s.Policy))
	}
	if s.MaxQueue != 0 {
		b = appendIntField(b, "max_queue", int64(s.MaxQueue))
	}
	if s.OnFull != "" {
		b = appendStringField(b, "on_full", string(s.OnFull))
	}
	if s.FailFast {
		b = append(field(b, "fail_fast"), "true"...)
	}
	if s.TenantCap != 0 {
		b = appendIntField(b, "tenant_cap", s.TenantCap)
	}
	if s.KeyCap != 0 {
		b = appendIntField(b, "key_cap", s.KeyCap)
	}
	if s.Rate != "" {
		b = appendStringField(b, "rate", s.Rate)
	}
	if s.Burst != 0 {
		b = appendIntField(b, "burst", s.Burst)
	}
	if s.Tokens != 0 {
		b = appendIntField(b, "tokens", s.Tokens)
	}
	b = appendBudgetStats(b, s)
	if s.Shadow {
		b = append(field(b, "shadow"), "true"...)
	}
	b = append(b, '}')
	if e.Shadow != "" {
		b = appendStringField(b, "shadow", string(e.Shadow))
	}
	if e.ShadowAction != "" {
		b = appendStringField(b, "shadow_action", string(e.ShadowAction))
	}
	return append(b, '}')
}

// Buffers recycles encoding buffers of messages that are copied before the
// publish returns (nats.go copies a message into its write buffer), so the
// messages of every lease cycle leave no garbage behind.
type Buffers struct{ p sync.Pool }

// Get returns an empty buffer.
func (bs *Buffers) Get() *[]byte {
	if b, ok := bs.p.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 512)
	return &b
}

// Put keeps b, grown to hold data, for reuse; oversized ones are dropped.
func (bs *Buffers) Put(b *[]byte, data []byte) {
	if cap(data) > 16<<10 {
		return
	}
	*b = data[:0]
	bs.p.Put(b)
}

package manager

import (
	"math"

	"github.com/slotlease/slotlease/lease"
)

// Strict request decoding. Every request body is a flat JSON object whose
// keys are exactly the json tags of its request type: a key in another case
// (REQUEST_ID), one that only folds to a known key (ſlots), an unknown key
// or a key given twice is refused with bad_request naming it, where
// encoding/json would silently take, merge or drop it. Wrong types are named
// in wire terms ("slots must be an integer"), never Go ones. Strings must be
// valid UTF-8 (escapes included: no lone surrogates), and identifiers
// (request_id, lease_id, holder, tenant, key, secret, pool names) must not hold
// control characters. A null value is the field left out. Every body and
// every string is bounded before anything is allocated for it.
//
// The decoder is hand-written because it is on every request's path: it
// allocates only the strings it keeps (BenchmarkDecodeAcquire compares it
// with encoding/json). decode_test.go walks every field of every request
// type by reflection, so a field added without decoder support fails a test.

const (
	// maxPoolNameLen bounds one pool name in a resize; rules.ValidToken
	// checks the rest.
	maxPoolNameLen = 128
	// maxEchoKey bounds a key echoed in an error message.
	maxEchoKey = 64
)

// Each handler decodes its own request type strictly: unknown fields,
// wrong types, duplicates and oversize values are refused with an error
// naming the field.

// decodeRenew decodes a renew request.
func decodeRenew(data []byte, v *lease.RenewRequest) *lease.Error {
	return decodeLeaseRef(data, &v.LeaseID, &v.Token, &v.Secret, &v.ConnServer, &v.ConnID, &v.LameDuck, nil)
}

// decodeRelease decodes a release request.
func decodeRelease(data []byte, v *lease.ReleaseRequest) *lease.Error {
	return decodeLeaseRef(data, &v.LeaseID, &v.Token, &v.Secret, nil, nil, nil, &v.Units)
}

// decodeAcquire decodes an acquire request.
func decodeAcquire(data []byte, req *lease.AcquireRequest) *lease.Error {
	d := newDecoder(data, lease.MaxRequestBody)
	for d.next() {
		switch string(d.key) {
		case "request_id":
			d.ident(0, &req.RequestID, lease.MaxRequestIDLen)
		case "holder":
			d.ident(1, &req.Holder, lease.MaxHolderLen)
		case "slots":
			d.int64(2, &req.Slots)
		case "secret":
			d.ident(3, &req.Secret, lease.MaxSecretLen)
		case "wait_ms":
			d.int64(4, &req.WaitMs)
		case "poll_ms":
			d.int64(5, &req.PollMs)
		case "priority":
			var p int64
			if d.int64(6, &p) && (p < math.MinInt32 || p > math.MaxInt32) {
				d.fail("priority is out of range")
			}
			req.Priority = int(p)
		case "tenant":
			d.ident(7, &req.Tenant, lease.MaxTenantLen)
		case "no_wait":
			d.bool(8, &req.NoWait)
		case "conn_server":
			d.ident(9, &req.ConnServer, lease.MaxConnServerLen)
		case "conn_id":
			d.uint64(10, &req.ConnID)
		case "key":
			d.ident(11, &req.Key, lease.MaxKeyLen)
		case "units":
			d.int64(12, &req.Units)
		case "group":
			d.ident(13, &req.Group, lease.MaxGroupLen)
		case "on_group":
			d.ident(14, &req.OnGroup, maxOnGroupLen)
		case "resend":
			d.bool(15, &req.Resend)
		default:
			d.unknown()
		}
	}
	return d.end()
}

// decodeLeaseRef decodes a renew or release request: both name a lease and
// its token; a renewal (connServer not nil) also its connection, and
// whether that connection's server is in lame duck mode; a release (units
// not nil) the units it used.
func decodeLeaseRef(data []byte, leaseID *string, token *uint64, secret *string, connServer *string, connID *uint64, lameDuck *bool, units **int64) *lease.Error {
	d := newDecoder(data, lease.MaxRequestBody)
	for d.next() {
		switch string(d.key) {
		case "lease_id":
			d.ident(0, leaseID, lease.MaxRequestIDLen)
		case "token":
			d.uint64(1, token)
		case "secret":
			d.ident(2, secret, lease.MaxSecretLen)
		case "conn_server":
			if connServer == nil {
				d.unknown()
				break
			}
			d.ident(3, connServer, lease.MaxConnServerLen)
		case "conn_id":
			if connID == nil {
				d.unknown()
				break
			}
			d.uint64(4, connID)
		case "lame_duck":
			if lameDuck == nil {
				d.unknown()
				break
			}
			d.bool(5, lameDuck)
		case "units":
			if units == nil {
				d.unknown()
				break
			}
			var n int64
			if d.int64(6, &n) {
				*units = &n
			}
		default:
			d.unknown()
		}
	}
	return d.end()
}

// decodeCancel decodes a cancel request.
func decodeCancel(data []byte, req *lease.CancelRequest) *lease.Error {
	d := newDecoder(data, lease.MaxRequestBody)
	for d.next() {
		switch string(d.key) {
		case "request_id":
			d.ident(0, &req.RequestID, lease.MaxRequestIDLen)
		case "holder":
			d.ident(1, &req.Holder, lease.MaxHolderLen)
		case "secret":
			d.ident(2, &req.Secret, lease.MaxSecretLen)
		default:
			d.unknown()
		}
	}
	return d.end()
}

// decodeResize decodes a resize request.
func decodeResize(data []byte, req *lease.ResizeRequest) *lease.Error {
	d := newDecoder(data, lease.MaxResizeBody)
	for d.next() {
		switch string(d.key) {
		case "set":
			d.poolCapacities(0, &req.Set)
		case "remove":
			d.poolNames(1, &req.Remove)
		case "reset":
			d.bool(2, &req.Reset)
		case "force":
			d.bool(3, &req.Force)
		case "rates":
			d.poolRates(4, &req.Rates)
		default:
			d.unknown()
		}
	}
	return d.end()
}

// elements walks an array or object at pos, from open to close, calling
// item at each element (item reads it, and reports whether to go on); want
// says what the value must be if it is not one.
func (d *decoder) elements(open, close byte, want string, item func() bool) bool {
	if d.pos >= len(d.data) || d.data[d.pos] != open {
		d.wrongType("%s", want)
		return false
	}
	d.pos++
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == close {
		d.pos++
		return true
	}
	for {
		d.skipSpace()
		if !item() {
			return false
		}
		d.skipSpace()
		switch {
		case d.pos >= len(d.data):
			d.syntax("',' or '" + string(close) + "'")
			return false
		case d.data[d.pos] == ',':
			d.pos++
		case d.data[d.pos] == close:
			d.pos++
			return true
		default:
			d.syntax("',' or '" + string(close) + "'")
			return false
		}
	}
}

// poolName reads one pool name of a resize field.
func (d *decoder) poolName(field string) ([]byte, bool) {
	pool, bad := d.str(&d.scratch, maxPoolNameLen)
	if bad != strOK {
		d.strFail(bad, field+": a pool name", maxPoolNameLen)
		return nil, false
	}
	return pool, true
}

// poolObject reads the field's object of pool name to value, refusing a
// name given twice; value reads one value, positioned on it, and reports
// whether to go on.
func (d *decoder) poolObject(name, want string, value func(p string, pool []byte) bool) bool {
	seen := map[string]bool{}
	return d.elements('{', '}', name+" must be an object of pool name to "+want, func() bool {
		pool, ok := d.poolName(name)
		if !ok {
			return false
		}
		p := string(pool)
		if seen[p] {
			d.fail("%s: pool %s is given twice", name, quoteKey(pool))
			return false
		}
		seen[p] = true
		if !d.colon() {
			return false
		}
		return value(p, pool)
	})
}

// poolCapacities reads an object of pool name to capacity.
func (d *decoder) poolCapacities(bit uint, dst *map[string]int64) {
	if !d.field(bit) {
		return
	}
	name := string(d.key)
	m := map[string]int64{}
	if d.poolObject(name, "capacity", func(p string, pool []byte) bool {
		c, ok := d.signed(name + ": the capacity of pool " + quoteKey(pool))
		m[p] = c
		return ok
	}) {
		*dst = m
	}
}

// maxRateLen bounds a rate string of a resize ("60/m"; rules.ParseRate
// checks the rest).
const maxRateLen = 32

// poolRates reads an object of pool name to {"rate": "60/m", "burst": 5}.
func (d *decoder) poolRates(bit uint, dst *map[string]lease.RateSetting) {
	if !d.field(bit) {
		return
	}
	name := string(d.key)
	m := map[string]lease.RateSetting{}
	if d.poolObject(name, `{"rate": "60/m", "burst": 5}`, func(p string, pool []byte) bool {
		var rs lease.RateSetting
		what := name + ": pool " + quoteKey(pool)
		var seenRate, seenBurst bool
		ok := d.elements('{', '}', what+` must be an object {"rate": "60/m", "burst": 5}`, func() bool {
			key, bad := d.str(&d.scratch, maxPoolNameLen)
			if bad != strOK {
				d.strFail(bad, what+": a key", maxPoolNameLen)
				return false
			}
			k := string(key)
			if !d.colon() {
				return false
			}
			switch {
			case k == "rate" && !seenRate:
				seenRate = true
				if d.pos >= len(d.data) || d.data[d.pos] != '"' {
					d.wrongType("%s: rate must be a string", what)
					return false
				}
				v, bad := d.str(&d.scratch, maxRateLen)
				if bad != strOK {
					d.strFail(bad, what+": rate", maxRateLen)
					return false
				}
				rs.Rate = string(v)
				return true
			case k == "burst" && !seenBurst:
				seenBurst = true
				var ok bool
				rs.Burst, ok = d.signed(what + ": burst")
				return ok
			case k == "rate" || k == "burst":
				d.fail("%s: key %s is given twice", what, quoteKey(key))
			default:
				d.fail("%s: unknown key %s (want rate and burst)", what, quoteKey(key))
			}
			return false
		})
		m[p] = rs
		return ok
	}) {
		*dst = m
	}
}

// signed reads an integer value, naming it what in an error.
func (d *decoder) signed(what string) (int64, bool) {
	neg, mag, bad := d.number()
	if bad == numOK && mag > math.MaxInt64 {
		bad = numRange
	}
	if bad != numOK {
		d.numFail(bad, what)
		return 0, false
	}
	c := int64(mag)
	if neg {
		c = -c
	}
	return c, true
}

// poolNames reads an array of pool names.
func (d *decoder) poolNames(bit uint, dst *[]string) {
	if !d.field(bit) {
		return
	}
	name := string(d.key)
	want := name + " must be an array of pool names"
	out := []string{}
	ok := d.elements('[', ']', want, func() bool {
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			d.wrongType("%s", want)
			return false
		}
		pool, ok := d.poolName(name)
		if ok {
			out = append(out, string(pool))
		}
		return ok
	})
	if ok {
		*dst = out
	}
}

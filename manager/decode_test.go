package manager

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/slotlease/slotlease/lease"
)

// requestTypes are every request body the manager decodes. A new request
// type must be added here (and to decode).
var requestTypes = []any{&lease.AcquireRequest{}, &lease.RenewRequest{}, &lease.ReleaseRequest{}, &lease.CancelRequest{}, &lease.ResizeRequest{}}

// fill sets every field of the struct v points to a distinct non-zero
// value of a shape the decoder must accept, failing on a kind it does not
// know how to fill (and so a decoder would not know how to read).
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	typ := v.Type()
	for i := range typ.NumField() {
		f, sf := v.Field(i), typ.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprintf("v%d-%s", i, sf.Name))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Map:
			switch sf.Type {
			case reflect.TypeFor[map[string]int64]():
				f.Set(reflect.ValueOf(map[string]int64{fmt.Sprintf("p%d", i): int64(i + 1), "q": 7}))
			case reflect.TypeFor[map[string]lease.RateSetting]():
				f.Set(reflect.ValueOf(map[string]lease.RateSetting{fmt.Sprintf("p%d", i): {Rate: "60/m", Burst: int64(i + 1)}, "q": {Rate: "off"}}))
			default:
				t.Fatalf("%s.%s: map type %s has no decoder", typ.Name(), sf.Name, sf.Type)
			}
		case reflect.Slice:
			if sf.Type != reflect.TypeFor[[]string]() {
				t.Fatalf("%s.%s: slice type %s has no decoder", typ.Name(), sf.Name, sf.Type)
			}
			f.Set(reflect.ValueOf([]string{fmt.Sprintf("p%d", i), "r"}))
		case reflect.Pointer:
			if sf.Type != reflect.TypeFor[*int64]() {
				t.Fatalf("%s.%s: pointer type %s has no decoder", typ.Name(), sf.Name, sf.Type)
			}
			n := int64(i + 1)
			f.Set(reflect.ValueOf(&n))
		default:
			t.Fatalf("%s.%s: kind %s has no decoder", typ.Name(), sf.Name, f.Kind())
		}
	}
}

// TestDecodeKnowsEveryField fills every field of every request type, encodes
// it with encoding/json (so by its json tags) and checks the strict decoder
// reads it back whole: a field added without decoder support fails here.
func TestDecodeKnowsEveryField(t *testing.T) {
	t.Parallel()
	for _, proto := range requestTypes {
		typ := reflect.TypeOf(proto).Elem()
		t.Run(typ.Name(), func(t *testing.T) {
			want := reflect.New(typ)
			fill(t, want.Elem())
			data, err := json.Marshal(want.Interface())
			if err != nil {
				t.Fatal(err)
			}
			for i := range typ.NumField() {
				tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
				if tag == "" || tag == "-" {
					t.Fatalf("%s.%s has no json tag", typ.Name(), typ.Field(i).Name)
				}
				if !strings.Contains(string(data), `"`+tag+`":`) {
					t.Fatalf("%s: key %q missing from %s", typ.Name(), tag, data)
				}
			}
			got := reflect.New(typ)
			if e := decode(data, got.Interface()); e != nil {
				t.Fatalf("decode %s: %v", data, e)
			}
			if !reflect.DeepEqual(got.Interface(), want.Interface()) {
				t.Fatalf("decode %s:\n got %+v\nwant %+v", data, got.Elem(), want.Elem())
			}
		})
	}
}

// TestDecodeAgreesWithEncodingJSON: on valid bodies of every shape JSON
// allows (escapes, whitespace, null, negative numbers), the strict decoder
// reads what encoding/json reads.
func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	bodies := []string{
		`{}`,
		` { "request_id" : "a-B_9=" , "holder":"h\u00e9\"\\\/x", "slots": 3 } `,
		`{"request_id":"r","holder":"\ud83d\ude00 emoji","slots":-9223372036854775808,"priority":-2147483648}`,
		`{"slots":9223372036854775807,"wait_ms":0,"poll_ms":-0,"no_wait":false,"tenant":null,"secret":"s"}`,
		`{"holder":"日本語","no_wait":true,"priority":2147483647}`,
		`{"tenant":"team-a","key":"customer \u00e9 42"}`, `{"key":null}`,
		`{"slo\u0074s":1}`, // an escaped key is the same key
	}
	for _, b := range bodies {
		var strict, std lease.AcquireRequest
		if e := decode([]byte(b), &strict); e != nil {
			t.Errorf("%s: %v", b, e)
			continue
		}
		if err := json.Unmarshal([]byte(b), &std); err != nil {
			t.Fatalf("%s: encoding/json: %v", b, err)
		}
		if strict != std {
			t.Errorf("%s:\nstrict %+v\n   std %+v", b, strict, std)
		}
	}
	for _, b := range []string{`{"lease_id":"x","token":18446744073709551615,"secret":"s"}`, `{"token":0}`} {
		var strict, std lease.RenewRequest
		if e := decode([]byte(b), &strict); e != nil {
			t.Fatalf("%s: %v", b, e)
		}
		_ = json.Unmarshal([]byte(b), &std)
		if strict != std {
			t.Errorf("%s: strict %+v, std %+v", b, strict, std)
		}
	}
	for _, b := range []string{`{"set":{"a":1,"b":-2},"remove":["c","d"],"reset":true,"force":false}`, `{"set":{},"remove":[]}`, `{"set":null}`,
		`{"rates":{"a":{"rate":"60/m","burst":5},"b":{"rate":"off"},"c":{"burst":-1},"d":{}}}`, `{"rates":{}}`, `{"rates":null}`} {
		var strict, std lease.ResizeRequest
		if e := decode([]byte(b), &strict); e != nil {
			t.Fatalf("%s: %v", b, e)
		}
		_ = json.Unmarshal([]byte(b), &std)
		if !reflect.DeepEqual(strict, std) {
			t.Errorf("%s: strict %+v, std %+v", b, strict, std)
		}
	}
}

// TestDecodeRefuses: every bad body is a bad_request whose message names
// what is wrong, in wire terms.
func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 5000)
	cases := []struct {
		name, body string
		into       any
		want       string // in the message
	}{
		{"empty", ``, &lease.AcquireRequest{}, "empty request body"},
		{"null body", `null`, &lease.AcquireRequest{}, "must be a JSON object"},
		{"array", `[1]`, &lease.AcquireRequest{}, "must be a JSON object"},
		{"truncated", `{"slots":1`, &lease.AcquireRequest{}, "unexpected end of input"},
		{"trailing data", `{"slots":1} {}`, &lease.AcquireRequest{}, "unexpected data after the object"},
		{"trailing comma", `{"slots":1,}`, &lease.AcquireRequest{}, "want a string"},
		{"upper-case key", `{"REQUEST_ID":"a"}`, &lease.AcquireRequest{}, `unknown key "REQUEST_ID"`},
		{"case-folded key", `{"ſlots":1}`, &lease.AcquireRequest{}, `unknown key "ſlots"`},
		{"unknown key", `{"request_id":"a","extra":{"x":[1]}}`, &lease.AcquireRequest{}, `unknown key "extra"`},
		{"long unknown key clipped", `{"` + long + `":1}`, &lease.AcquireRequest{}, `unknown key "` + long[:64] + `…(+4936 bytes)" (keys`},
		// A key is cut quoted, at 64 bytes of escapes, and never again by
		// errorf: 70 control characters quoted whole were 280 bytes, which
		// errorf cut inside an escape, "\x0…(+143 bytes)", counting escapes.
		{"escaped long key clipped once", `{"` + strings.Repeat(`\u0001`, 70) + `":1}`, &lease.AcquireRequest{}, `unknown key "` + strings.Repeat(`\x01`, 16) + `…(+54 bytes)" (keys`},
		{"quoted pool name clipped once", `{"set":{"` + strings.Repeat(`\"`, 100) + `":1,"` + strings.Repeat(`\"`, 100) + `":2}}`, &lease.ResizeRequest{}, `set: pool "` + strings.Repeat(`\"`, 32) + `…(+68 bytes)" is given twice`},
		{"quoted pool name in a rate clipped once", `{"rates":{"` + strings.Repeat(`\"`, 100) + `":{"rate":1}}}`, &lease.ResizeRequest{}, `rates: pool "` + strings.Repeat(`\"`, 32) + `…(+68 bytes)": rate must be a string`},
		{"duplicate key", `{"slots":1,"slots":2}`, &lease.AcquireRequest{}, `key "slots" is given twice`},
		{"duplicate key, once escaped", `{"holder":"a","hold\u0065r":"b"}`, &lease.AcquireRequest{}, `key "holder" is given twice`},
		{"duplicate null", `{"secret":null,"secret":"x"}`, &lease.AcquireRequest{}, `key "secret" is given twice`},
		{"slots string", `{"slots":"two"}`, &lease.AcquireRequest{}, "slots must be an integer"},
		{"slots fraction", `{"slots":1.5}`, &lease.AcquireRequest{}, "slots must be an integer"},
		{"slots exponent", `{"slots":1e3}`, &lease.AcquireRequest{}, "slots must be an integer"},
		{"slots overflow", `{"slots":1e40}`, &lease.AcquireRequest{}, "slots must be an integer"},
		{"slots too large", `{"slots":9223372036854775808}`, &lease.AcquireRequest{}, "slots is out of range"},
		{"slots far too large", `{"slots":99999999999999999999999}`, &lease.AcquireRequest{}, "slots is out of range"},
		{"leading zero", `{"slots":01}`, &lease.AcquireRequest{}, "must not start with 0"},
		{"priority range", `{"priority":2147483648}`, &lease.AcquireRequest{}, "priority is out of range"},
		{"holder number", `{"holder":5}`, &lease.AcquireRequest{}, "holder must be a string"},
		{"no_wait string", `{"no_wait":"yes"}`, &lease.AcquireRequest{}, "no_wait must be true or false"},
		{"holder control escaped", `{"holder":"a\nb"}`, &lease.AcquireRequest{}, "holder must not contain control characters"},
		{"holder NUL", `{"holder":"a\u0000"}`, &lease.AcquireRequest{}, "holder must not contain control characters"},
		{"holder DEL", "{\"holder\":\"a\x7f\"}", &lease.AcquireRequest{}, "holder must not contain control characters"},
		{"holder C1", `{"holder":"a` + "\u0085" + `"}`, &lease.AcquireRequest{}, "holder must not contain control characters"},
		{"raw control", "{\"holder\":\"a\tb\"}", &lease.AcquireRequest{}, "control character in a string"},
		{"holder invalid UTF-8", "{\"holder\":\"a\xff\"}", &lease.AcquireRequest{}, "holder is not valid UTF-8"},
		{"tenant lone surrogate", `{"tenant":"\ud800"}`, &lease.AcquireRequest{}, "tenant is not valid UTF-8"},
		{"key lone surrogate", `{"key":"\ud800"}`, &lease.AcquireRequest{}, "key is not valid UTF-8"},
		{"key number", `{"key":42}`, &lease.AcquireRequest{}, "key must be a string"},
		{"key control", `{"key":"a\u0007"}`, &lease.AcquireRequest{}, "key must not contain control characters"},
		{"key twice", `{"key":"a","key":"b"}`, &lease.AcquireRequest{}, `key "key" is given twice`},
		{"key too long", `{"key":"` + strings.Repeat("k", lease.MaxKeyLen+1) + `"}`, &lease.AcquireRequest{}, "key is longer than 128 bytes"},
		{"secret low surrogate", `{"secret":"\udc00x"}`, &lease.AcquireRequest{}, "secret is not valid UTF-8"},
		{"request_id control", `{"request_id":"a\u001b"}`, &lease.AcquireRequest{}, "request_id must not contain control characters"},
		{"escaped key, escaped bad value", `{"hold\u0065r":"\u00e9\u0001"}`, &lease.AcquireRequest{}, "holder must not contain control characters"},
		{"holder too long", `{"holder":"` + strings.Repeat("h", lease.MaxHolderLen+1) + `"}`, &lease.AcquireRequest{}, "holder is longer than 256 bytes"},
		{"secret too long escaped", `{"secret":"` + strings.Repeat(`\u0041`, lease.MaxSecretLen+1) + `"}`, &lease.AcquireRequest{}, "secret is longer than 128 bytes"},
		{"body too large", `{"holder":"` + strings.Repeat(" ", lease.MaxRequestBody) + `"}`, &lease.AcquireRequest{}, "over the limit of 8192 bytes"},
		{"bad escape", `{"holder":"\x"}`, &lease.AcquireRequest{}, "want a valid escape"},
		{"unterminated", `{"holder":"abc`, &lease.AcquireRequest{}, "unexpected end of input"},
		{"token negative", `{"lease_id":"a","token":-1}`, &lease.RenewRequest{}, "token must not be negative"},
		{"token string", `{"token":"1"}`, &lease.ReleaseRequest{}, "token must be an integer"},
		{"token too large", `{"token":18446744073709551616}`, &lease.RenewRequest{}, "token is out of range"},
		{"lease_id control", `{"lease_id":"a\r"}`, &lease.ReleaseRequest{}, "lease_id must not contain control characters"},
		{"renew unknown key", `{"Lease_ID":"a"}`, &lease.RenewRequest{}, `unknown key "Lease_ID"`},
		{"cancel slots", `{"request_id":"a","holder":"h","slots":1}`, &lease.CancelRequest{}, `unknown key "slots"`},
		{"set not object", `{"set":["a"]}`, &lease.ResizeRequest{}, "set must be an object of pool name to capacity"},
		{"set capacity string", `{"set":{"a":"1"}}`, &lease.ResizeRequest{}, `set: the capacity of pool "a" must be an integer`},
		{"set pool twice", `{"set":{"a":1,"a":2}}`, &lease.ResizeRequest{}, `set: pool "a" is given twice`},
		{"set pool control", `{"set":{"a\n":1}}`, &lease.ResizeRequest{}, "set: a pool name must not contain control characters"},
		{"remove not array", `{"remove":"a"}`, &lease.ResizeRequest{}, "remove must be an array of pool names"},
		{"remove number", `{"remove":["a",1]}`, &lease.ResizeRequest{}, "remove must be an array of pool names"},
		{"remove long name", `{"remove":["` + strings.Repeat("p", 200) + `"]}`, &lease.ResizeRequest{}, "remove: a pool name is longer than 128 bytes"},
		{"resize duplicate", `{"reset":true,"reset":false}`, &lease.ResizeRequest{}, `key "reset" is given twice`},
		{"rates not object", `{"rates":["a"]}`, &lease.ResizeRequest{}, `rates must be an object of pool name to {"rate": "60/m", "burst": 5}`},
		{"rate setting not object", `{"rates":{"a":"60/m"}}`, &lease.ResizeRequest{}, `rates: pool "a" must be an object {"rate": "60/m", "burst": 5}`},
		{"rate not string", `{"rates":{"a":{"rate":60}}}`, &lease.ResizeRequest{}, `rates: pool "a": rate must be a string`},
		{"rate too long", `{"rates":{"a":{"rate":"` + strings.Repeat("6", 40) + `"}}}`, &lease.ResizeRequest{}, `rates: pool "a": rate is longer than 32 bytes`},
		{"burst not number", `{"rates":{"a":{"burst":"5"}}}`, &lease.ResizeRequest{}, `rates: pool "a": burst must be an integer`},
		{"burst too big", `{"rates":{"a":{"burst":99999999999999999999}}}`, &lease.ResizeRequest{}, `rates: pool "a": burst`},
		{"rate twice", `{"rates":{"a":{"rate":"1/s","rate":"2/s"}}}`, &lease.ResizeRequest{}, `rates: pool "a": key "rate" is given twice`},
		{"rate unknown key", `{"rates":{"a":{"Rate":"1/s"}}}`, &lease.ResizeRequest{}, `rates: pool "a": unknown key "Rate" (want rate and burst)`},
		{"rates pool twice", `{"rates":{"a":{},"a":{}}}`, &lease.ResizeRequest{}, `rates: pool "a" is given twice`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := decode([]byte(tc.body), tc.into)
			if e == nil {
				t.Fatalf("%q decoded into %+v, want an error containing %q", tc.body, tc.into, tc.want)
			}
			if e.Code != lease.CodeBadRequest || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("%q: got %v, want bad_request containing %q", tc.body, e, tc.want)
			}
			if len(e.Message) > 200 {
				t.Fatalf("%q: message of %d bytes: %s", tc.body, len(e.Message), e.Message)
			}
			if strings.Contains(e.Message, "Go struct") || strings.Contains(e.Message, "int64") {
				t.Fatalf("message names Go types: %s", e.Message)
			}
		})
	}
}

// TestDecodeSyntaxOffsets: invalid JSON is "malformed JSON at byte N",
// N counted from 0, the first byte that cannot be read as JSON there, or
// the body's length where it ends too soon (docs/protocol.md, section 2),
// the byte encoding/json stops at too. Before, a body that ended too soon
// had no offset, a \u escape's was its first digit's, a number's leading
// zero's was the zero's, and a value that is no JSON where a string,
// number or boolean belongs (tru, -, 1.) was a type error with none.
func TestDecodeSyntaxOffsets(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body string
		into any
		at   int
		want string
	}{
		{`{"slots":1,}`, &lease.AcquireRequest{}, 11, "want a string"}, // docs/protocol.md's examples
		{`{"slots":tru}`, &lease.AcquireRequest{}, 12, "invalid character '}' in literal true (expecting 'e')"},
		{`{"request_id":"a2",,"holder":"h"}`, &lease.AcquireRequest{}, 19, "want a string"},
		{`{"request_id":"a2" "holder":"h"}`, &lease.AcquireRequest{}, 19, "want ',' or '}'"},
		{`{"slots":1`, &lease.AcquireRequest{}, 10, "unexpected end of input, want ',' or '}'"},
		{`{"holder":"abc`, &lease.AcquireRequest{}, 14, `unexpected end of input, want '"' closing a string`},
		{`{"slots":`, &lease.AcquireRequest{}, 9, "unexpected end of input, want a value"},
		{`{"slots":1} x`, &lease.AcquireRequest{}, 12, "unexpected data after the object"},
		{"{\"holder\":\"a\tb\"}", &lease.AcquireRequest{}, 12, "control character in a string"},
		{`{"holder":"\x"}`, &lease.AcquireRequest{}, 12, "want a valid escape"},
		{`{"holder":"\u00zz"}`, &lease.AcquireRequest{}, 15, "want four hex digits"},
		{`{"holder":"\u00`, &lease.AcquireRequest{}, 15, "unexpected end of input, want four hex digits"},
		{`{"slots":01}`, &lease.AcquireRequest{}, 10, "a number must not start with 0"},
		{`{"request_id":tru}`, &lease.AcquireRequest{}, 17, "invalid character '}' in literal true (expecting 'e')"},
		{`{"no_wait":fals}`, &lease.AcquireRequest{}, 15, "invalid character '}' in literal false (expecting 'e')"},
		{`{"slots":nul}`, &lease.AcquireRequest{}, 12, "invalid character '}' in literal null (expecting 'l')"},
		{`{"slots":x}`, &lease.AcquireRequest{}, 9, "invalid character 'x' looking for beginning of value"},
		{`{"slots":-}`, &lease.AcquireRequest{}, 10, "invalid character '}' in numeric literal"},
		{`{"slots":1.}`, &lease.AcquireRequest{}, 11, "invalid character '}' after decimal point in numeric literal"},
		{`{"slots":1e+}`, &lease.AcquireRequest{}, 12, "invalid character '}' in exponent of numeric literal"},
		{`{"holder":[1,}`, &lease.AcquireRequest{}, 13, "invalid character '}' looking for beginning of value"},
		{`{"holder":{"a" 1}}`, &lease.AcquireRequest{}, 15, "invalid character '1' after object key"},
		{`{"holder":[{"a":[true,nul]}]}`, &lease.AcquireRequest{}, 25, "invalid character ']' in literal null (expecting 'l')"},
		{`{"token":"1`, &lease.RenewRequest{}, 11, "unexpected end of input, want a value"},
		{`{"set":[1 2]}`, &lease.ResizeRequest{}, 10, "invalid character '2' after array element"},
		{`{"remove":["a",x]}`, &lease.ResizeRequest{}, 15, "invalid character 'x' looking for beginning of value"},
		{`{"rates":{"a":{"rate":-x}}}`, &lease.ResizeRequest{}, 23, "invalid character 'x' in numeric literal"},
		{`x`, &lease.AcquireRequest{}, 0, "invalid character 'x' looking for beginning of value"},
		{`  [1,`, &lease.AcquireRequest{}, 5, "unexpected end of input, want a value"},
	}
	for _, tc := range cases {
		e := decode([]byte(tc.body), tc.into)
		want := fmt.Sprintf("malformed JSON at byte %d: %s", tc.at, tc.want)
		if e == nil || e.Code != lease.CodeBadRequest || e.Message != want {
			t.Errorf("%s: %v, want %q", tc.body, e, want)
		}
		// encoding/json stops at the same byte: its Offset counts the
		// bytes read, the wrong one included, except at the end.
		var se *json.SyntaxError
		if err := json.Unmarshal([]byte(tc.body), new(any)); !errors.As(err, &se) || (se.Offset != int64(tc.at)+1 && !(se.Offset == int64(len(tc.body)) && tc.at == len(tc.body))) {
			t.Errorf("%s: encoding/json says %v (offset %v), want it to stop at byte %d too", tc.body, err, se, tc.at)
		}
	}
	// Well-formed values of the wrong type are named by their type, as
	// before: the body is read left to right, and the first thing wrong is
	// said, so the invalid JSON after them is not.
	for body, want := range map[string]string{
		`{"slots":"two",,}`:       "slots must be an integer",
		`{"slots":1.5}`:           "slots must be an integer",
		`{"holder":[1,{"a":[]}]}`: "holder must be a string",
		`{"no_wait":null,}`:       "malformed JSON at byte 16: want a string",
		`[1,2] x`:                 "the request body must be a JSON object",
	} {
		if e := decode([]byte(body), &lease.AcquireRequest{}); e == nil || e.Message != want {
			t.Errorf("%s: %v, want %q", body, e, want)
		}
	}
}

// FuzzDecodeAcquire: the strict decoder never panics, its errors are
// bounded bad_requests, and whatever it accepts encoding/json reads the
// same way.
func FuzzDecodeAcquire(f *testing.F) {
	for _, s := range []string{`{"request_id":"a","holder":"h","slots":1}`, `{"holder":"\ud83d\ude00"}`, `{"slots":-0}`, `{"ſlots":1}`, `{"a":1}`, `{"slots":1,"slots":1}`, "{\"holder\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var strict lease.AcquireRequest
		e := decode(data, &strict)
		if e != nil {
			if e.Code != lease.CodeBadRequest || e.Message == "" || len(e.Message) > 300 {
				t.Fatalf("%q: error %v", data, e)
			}
			// Its offset of malformed JSON is where encoding/json stops.
			var at int64
			if _, err := fmt.Sscanf(e.Message, "malformed JSON at byte %d:", &at); err == nil {
				var se *json.SyntaxError
				if err := json.Unmarshal(data, new(any)); !errors.As(err, &se) || se.Offset != at+1 && !(se.Offset == at && at == int64(len(data))) {
					t.Fatalf("%q: %s, but encoding/json says %v", data, e.Message, err)
				}
			}
			return
		}
		var std lease.AcquireRequest
		if err := json.Unmarshal(data, &std); err != nil {
			t.Fatalf("%q: accepted, but encoding/json says %v", data, err)
		}
		if strict != std {
			t.Fatalf("%q: strict %+v, std %+v", data, strict, std)
		}
	})
}

var benchAcquire = []byte(`{"request_id":"01HZX3Y8K2M4N6P8Q0R2S4T6V8","holder":"executor-node-a-1234","slots":2,"secret":"c2VjcmV0LXRoYXQtaXMtbG9uZy1lbm91Z2g","wait_ms":30000,"poll_ms":2000,"tenant":"team-a"}`)

// BenchmarkDecodeAcquire compares the strict decoder with encoding/json on
// the Go client's usual acquire body (docs/benchmarks.md).
func BenchmarkDecodeAcquire(b *testing.B) { benchDecode[lease.AcquireRequest](b, benchAcquire) }

var benchRenew = []byte(`{"lease_id":"01HZX3Y8K2M4N6P8Q0R2S4T6V8","token":123456789,"secret":"c2VjcmV0LXRoYXQtaXMtbG9uZy1lbm91Z2g"}`)

// BenchmarkDecodeRenew: the most frequent request, a heartbeat.
func BenchmarkDecodeRenew(b *testing.B) { benchDecode[lease.RenewRequest](b, benchRenew) }

func benchDecode[T any](b *testing.B, body []byte) {
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req T
			if e := decode(body, &req); e != nil {
				b.Fatal(e)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req T
			if err := json.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// decode parses a request body into v, one of the request types, with the
// decoder its handler uses: the tables above run over every type.
func decode(data []byte, v any) *lease.Error {
	switch v := v.(type) {
	case *lease.AcquireRequest:
		return decodeAcquire(data, v)
	case *lease.RenewRequest:
		return decodeRenew(data, v)
	case *lease.ReleaseRequest:
		return decodeRelease(data, v)
	case *lease.CancelRequest:
		return decodeCancel(data, v)
	case *lease.ResizeRequest:
		return decodeResize(data, v)
	}
	return errorf(lease.CodeInternal, "no decoder for %T", v)
}

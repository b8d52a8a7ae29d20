package manager

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/slotlease/slotlease/internal/echo"
	"github.com/slotlease/slotlease/lease"
)

// The strict JSON scanner under the request decoders of decode.go: one flat
// object, known keys once each, bounded strings and numbers.

// decoder reads one flat JSON object. Errors are sticky: the first one
// ends the walk, and end reports it.
type decoder struct {
	data []byte
	pos  int
	key  []byte // the current key, unescaped (may alias data or keyBuf)
	seen uint32 // bits of the fields given so far
	err  *lease.Error
	// keyBuf and scratch hold an unescaped key and value; each is reused
	// within one request, and apart so that a value never overwrites the
	// key that names it.
	keyBuf, scratch []byte
	started         bool
}

func newDecoder(data []byte, limit int) decoder {
	d := decoder{data: data}
	switch {
	case len(data) == 0:
		d.err = errorf(lease.CodeBadRequest, "empty request body, want a JSON object")
	case len(data) > limit:
		d.err = errorf(lease.CodeBadRequest, "request body of %d bytes is over the limit of %d bytes", len(data), limit)
	}
	return d
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = errorf(lease.CodeBadRequest, format, args...)
	}
}

// syntax reports malformed JSON at the current position: the first byte
// that cannot be read as JSON there, counted from 0, or the body's length
// where it ends too soon (docs/protocol.md, section 2).
func (d *decoder) syntax(what string) {
	if d.pos >= len(d.data) {
		d.fail("malformed JSON at byte %d: unexpected end of input, want %s", len(d.data), what)
		return
	}
	d.fail("malformed JSON at byte %d: want %s", d.pos, what)
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// next moves to the next key of the object and past its colon, reporting
// whether there is one.
func (d *decoder) next() bool {
	if d.err != nil {
		return false
	}
	d.skipSpace()
	if !d.started {
		d.started = true
		if d.pos >= len(d.data) || d.data[d.pos] != '{' {
			d.wrongType("the request body must be a JSON object")
			return false
		}
		d.pos++
		d.skipSpace()
		if d.pos < len(d.data) && d.data[d.pos] == '}' {
			d.pos++
			return false
		}
	} else {
		if d.pos >= len(d.data) {
			d.syntax("',' or '}'")
			return false
		}
		switch d.data[d.pos] {
		case '}':
			d.pos++
			return false
		case ',':
			d.pos++
			d.skipSpace()
		default:
			d.syntax("',' or '}'")
			return false
		}
	}
	key, bad := d.str(&d.keyBuf, 0)
	if bad != strOK {
		d.strFail(bad, "a key", 0)
		return false
	}
	d.key = key
	return d.colon()
}

// colon moves past the ':' after a key and the spaces around it,
// reporting whether there was one.
func (d *decoder) colon() bool {
	d.skipSpace()
	if d.pos >= len(d.data) || d.data[d.pos] != ':' {
		d.syntax("':'")
		return false
	}
	d.pos++
	d.skipSpace()
	return true
}

// end checks that nothing follows the object and returns the first error.
func (d *decoder) end() *lease.Error {
	if d.err == nil {
		d.skipSpace()
		if d.pos < len(d.data) {
			d.fail("malformed JSON at byte %d: unexpected data after the object", d.pos)
		}
	}
	return d.err
}

// quoteKey renders s for an error message: quoted, control characters and
// invalid UTF-8 escaped, and cut where its quoted form would pass
// maxEchoKey bytes, the marker counting the bytes of s left out. It is cut
// quoted, not before quoting, because escapes make a key up to six times
// longer: 64 control characters quote to 256 bytes, which errorf would
// clip again, in the middle of an escape and with a marker that counts
// the escapes. So a quoted key, even with a few words before it, stays
// within echo.Max.
func quoteKey(s []byte) string {
	b := append(make([]byte, 0, maxEchoKey+24), '"')
	i := 0
	for i < len(s) {
		_, n := utf8.DecodeRune(s[i:])
		q := strconv.Quote(string(s[i : i+n]))
		q = q[1 : len(q)-1]
		if len(b)-1+len(q) > maxEchoKey {
			break
		}
		b = append(b, q...)
		i += n
	}
	if i < len(s) {
		b = append(b, echo.Marker(len(s)-i)...)
	}
	return string(append(b, '"'))
}

func (d *decoder) unknown() {
	d.fail("unknown key %s (keys are case-sensitive; see docs/protocol.md)", quoteKey(d.key))
}

// field marks field bit as given, refusing a second time. It also consumes
// a null value (the field left out) and reports whether a value follows.
func (d *decoder) field(bit uint) bool {
	if d.seen&(1<<bit) != 0 {
		d.fail("key %s is given twice", quoteKey(d.key))
		return false
	}
	d.seen |= 1 << bit
	if len(d.data)-d.pos >= 4 && string(d.data[d.pos:d.pos+4]) == "null" {
		d.pos += 4
		return false
	}
	return true
}

// ident reads an identifier string of at most max bytes.
func (d *decoder) ident(bit uint, dst *string, max int) {
	if !d.field(bit) {
		return
	}
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		d.wrongType("%s must be a string", d.key)
		return
	}
	s, bad := d.str(&d.scratch, max)
	if bad != strOK {
		d.strFail(bad, string(d.key), max)
		return
	}
	*dst = string(s)
}

// strBad says what is wrong with a string; the caller names it.
type strBad uint8

const (
	strOK      strBad = iota
	strSyntax         // malformed JSON, already reported
	strLong           // longer than its bound
	strControl        // a control character in an identifier
	strUTF8           // invalid UTF-8 or a lone surrogate
)

func (d *decoder) strFail(bad strBad, what string, max int) {
	switch bad {
	case strLong:
		d.fail("%s is longer than %d bytes", what, max)
	case strControl:
		d.fail("%s must not contain control characters", what)
	case strUTF8:
		d.fail("%s is not valid UTF-8", what)
	}
}

// str reads a JSON string at pos and returns it unescaped (in data, or in
// *into if it has escapes or non-ASCII bytes), refusing invalid UTF-8, lone
// surrogates and, if max > 0 (an identifier of at most max bytes), control
// characters.
func (d *decoder) str(into *[]byte, max int) ([]byte, strBad) {
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		d.syntax("a string")
		return nil, strSyntax
	}
	d.pos++
	start := d.pos
	// Fast path: no escapes, printable ASCII.
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c == '"' {
			s := d.data[start:d.pos]
			d.pos++
			return s, checkLen(s, max)
		}
		if c == '\\' || c < 0x20 || c >= 0x7f {
			break
		}
		d.pos++
	}
	buf := append((*into)[:0], d.data[start:d.pos]...)
	bad := strOK
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			*into = buf
			if bad != strOK {
				return nil, bad
			}
			return buf, checkLen(buf, max)
		case c < 0x20:
			d.fail("malformed JSON at byte %d: control character in a string", d.pos)
			return nil, strSyntax
		case c == '\\':
			r, ok := d.escape()
			if !ok {
				return nil, strSyntax
			}
			if r == loneSurrogate {
				bad = strUTF8
			} else if max > 0 && isControl(r) && bad == strOK {
				bad = strControl
			}
			buf = utf8.AppendRune(buf, r)
		case c < utf8.RuneSelf:
			if max > 0 && c == 0x7f && bad == strOK {
				bad = strControl
			}
			buf = append(buf, c)
			d.pos++
		default:
			r, n := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && n <= 1 {
				bad = strUTF8
			} else if max > 0 && isControl(r) && bad == strOK {
				bad = strControl
			}
			buf = append(buf, d.data[d.pos:d.pos+n]...)
			d.pos += n
		}
	}
	d.syntax("'\"' closing a string")
	return nil, strSyntax
}

func checkLen(s []byte, max int) strBad {
	if max > 0 && len(s) > max {
		return strLong
	}
	return strOK
}

// isControl reports C0 and C1 control characters and DEL.
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// loneSurrogate is what escape returns for a \u escape of half a
// surrogate pair: no UTF-8 encodes it.
const loneSurrogate rune = -1

// escape reads one backslash escape at pos, combining a surrogate pair.
func (d *decoder) escape() (rune, bool) {
	d.pos++ // the backslash
	if d.pos >= len(d.data) {
		d.syntax("an escape")
		return 0, false
	}
	c := d.data[d.pos]
	d.pos++
	switch c {
	case '"', '\\', '/':
		return rune(c), true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	case 'u':
		r, ok := d.hex4()
		if !ok {
			return 0, false
		}
		if r >= 0xd800 && r < 0xdc00 {
			if len(d.data)-d.pos >= 2 && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
				d.pos += 2
				lo, ok := d.hex4()
				if !ok {
					return 0, false
				}
				if lo >= 0xdc00 && lo < 0xe000 {
					return (r-0xd800)<<10 + (lo - 0xdc00) + 0x10000, true
				}
			}
			return loneSurrogate, true
		}
		if r >= 0xdc00 && r < 0xe000 {
			return loneSurrogate, true
		}
		return r, true
	}
	d.pos--
	d.syntax("a valid escape")
	return 0, false
}

// hex4 reads the four hex digits of a \u escape; malformed JSON is
// reported at the first byte that is not one.
func (d *decoder) hex4() (rune, bool) {
	var r rune
	for range 4 {
		if d.pos >= len(d.data) {
			d.syntax("four hex digits")
			return 0, false
		}
		switch c := d.data[d.pos]; {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			d.syntax("four hex digits")
			return 0, false
		}
		d.pos++
	}
	return r, true
}

// numBad says what is wrong with a number; the caller names it.
type numBad uint8

const (
	numOK     numBad = iota
	numSyntax        // malformed JSON, already reported
	numNotInt        // not a number, or one with a fraction or exponent
	numRange         // too large
)

func (d *decoder) numFail(bad numBad, what string) {
	switch bad {
	case numNotInt:
		d.wrongType("%s must be an integer", what)
	case numRange:
		d.fail("%s is out of range", what)
	}
}

// number reads a JSON integer: its sign and its magnitude. A fraction or
// an exponent is refused even if the value is whole (1.0, 1e3): integers
// are sent as integers.
//
// On numNotInt, pos is back at the value's start, for wrongType.
func (d *decoder) number() (neg bool, mag uint64, bad numBad) {
	begin := d.pos
	if d.pos < len(d.data) && d.data[d.pos] == '-' {
		neg = true
		d.pos++
	}
	start := d.pos
	overflow := false
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		digit := uint64(d.data[d.pos] - '0')
		if mag > (math.MaxUint64-digit)/10 {
			overflow = true
		}
		mag = mag*10 + digit
		d.pos++
	}
	n := d.pos - start
	if n == 0 {
		d.pos = begin
		return false, 0, numNotInt
	}
	if n > 1 && d.data[start] == '0' {
		// The 0 is a number of its own; the digit after it is what is
		// wrong.
		d.fail("malformed JSON at byte %d: a number must not start with 0", start+1)
		return false, 0, numSyntax
	}
	if d.pos < len(d.data) {
		switch d.data[d.pos] {
		case '.', 'e', 'E':
			d.pos = begin
			return false, 0, numNotInt
		}
	}
	if overflow {
		return false, 0, numRange
	}
	return neg, mag, numOK
}

// int64 reads a signed integer field, reporting whether it read a value.
func (d *decoder) int64(bit uint, dst *int64) bool {
	if !d.field(bit) {
		return false
	}
	neg, mag, bad := d.number()
	switch {
	case bad != numOK:
		d.numFail(bad, string(d.key))
		return false
	case !neg && mag <= math.MaxInt64:
		*dst = int64(mag)
	case neg && mag <= 1<<63:
		*dst = -int64(mag-1) - 1
	default:
		d.numFail(numRange, string(d.key))
		return false
	}
	return true
}

// uint64 reads an unsigned integer field.
func (d *decoder) uint64(bit uint, dst *uint64) {
	if !d.field(bit) {
		return
	}
	neg, mag, bad := d.number()
	switch {
	case bad != numOK:
		d.numFail(bad, string(d.key))
	case neg && mag != 0:
		d.fail("%s must not be negative", d.key)
	default:
		*dst = mag
	}
}

// bool reads true or false.
func (d *decoder) bool(bit uint, dst *bool) {
	if !d.field(bit) {
		return
	}
	rest := d.data[d.pos:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*dst = true
		d.pos += 4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*dst = false
		d.pos += 5
	default:
		d.wrongType("%s must be true or false", d.key)
	}
}

// wrongType refuses the value at pos as not of the type its key wants,
// unless it is no JSON value at all: then it is malformed JSON, reported
// at the first byte that is wrong, as docs/protocol.md promises for
// invalid JSON ("slots": tru is not an integer, but first it is not
// JSON). Only a refused request comes here, so encoding/json walks the
// value: it knows every JSON value, and stops where the doc says.
func (d *decoder) wrongType(format string, args ...any) {
	var v json.RawMessage
	err := json.NewDecoder(bytes.NewReader(d.data[d.pos:])).Decode(&v)
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read, the wrong one included.
		d.fail("malformed JSON at byte %d: %s", d.pos+int(se.Offset)-1, se.Error())
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		d.fail("malformed JSON at byte %d: unexpected end of input, want a value", len(d.data))
	}
	d.fail(format, args...)
}

package manager

import (
	"reflect"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// The hand-written encoders must not drop, rename, swap or wrongly omit a
// field, also one added to their types later. Each type is filled by
// reflection (every exported field, nested structs, pointers, slices and
// maps too), every scalar with its own value so that two fields swapped
// show, and the hand encoder's output must decode to what encoding/json
// makes of the same value. Then each scalar in turn is left zero, so that
// every omitempty rule is checked against its own field. A field added to
// Record, Event, pools.Stats or Reply without its encoder fails here.
func TestEncodersCoverEveryField(t *testing.T) {
	t.Parallel()
	checkEveryField(t, func(r *lease.Record) ([]byte, error) { return appendRecord(nil, r), nil }, nil)
	checkEveryField(t, func(e *lease.Event) ([]byte, error) { return AppendEvent(nil, e), nil }, nil)
	// Replies with stats, a node or an error go through encoding/json;
	// every other field must be on the fast path.
	checkEveryField(t, func(r *lease.Reply) ([]byte, error) { return appendReply(nil, r) }, toFastPath)
}

// toFastPath clears the fields that send a reply through encoding/json.
func toFastPath(r *lease.Reply) { r.Pools, r.Error, r.Node = nil, nil, "" }

// checkEveryField compares enc with encoding/json on a T filled with
// distinct values, then with each of its scalars zero in turn, then on the
// zero T; adjust, if not nil, runs on each value before it is encoded.
func checkEveryField[T any](t *testing.T, enc func(*T) ([]byte, error), adjust func(*T)) {
	t.Helper()
	check := func(v *T) {
		t.Helper()
		if adjust != nil {
			adjust(v)
		}
		got, err := enc(v)
		if err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		sameJSON(t, got, v)
	}
	var full T
	leaves := fillEvery(t, reflect.ValueOf(&full).Elem(), distinct(-1), always)
	if leaves < 3 {
		t.Fatalf("%T: only %d fields filled", full, leaves)
	}
	check(&full)
	for k := range leaves {
		var v T
		fillEvery(t, reflect.ValueOf(&v).Elem(), distinct(k), always)
		check(&v)
	}
	var zero T
	check(&zero)
}

// always fills every pointer, slice and map.
func always() bool { return true }

// distinct sets the i-th scalar to a value of its own (i+1), and leaves
// scalar number zero at its zero value.
func distinct(zero int) func(i int, v reflect.Value) {
	base := time.Date(2026, 11, 24, 17, 0, 0, 0, time.UTC)
	return func(i int, v reflect.Value) {
		if i == zero {
			return
		}
		n := i + 1
		switch v.Kind() {
		case reflect.Struct: // time.Time
			v.Set(reflect.ValueOf(base.Add(time.Duration(n)*time.Second + time.Duration(n))))
		case reflect.String:
			v.SetString("v" + string(rune('a'+n%26)) + string(rune('a'+n/26)))
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			v.SetInt(int64(n))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			v.SetUint(uint64(n))
		case reflect.Float32, reflect.Float64:
			v.SetFloat(float64(n) + 0.5)
		}
	}
}

// fillEvery walks v and its exported fields, recursively, calling leaf with a
// running number for each scalar and time.Time it meets; a pointer, slice
// or map gets one value when keep says so. It returns how many leaves it
// met. It fails on a kind it has no rule for (a func, a channel), so a new
// field never goes unfilled.
func fillEvery(t *testing.T, v reflect.Value, leaf func(i int, v reflect.Value), keep func() bool) int {
	t.Helper()
	n := 0
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[time.Time]() {
				leaf(n, v)
				n++
				return
			}
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case reflect.Pointer:
			if keep() {
				p := reflect.New(v.Type().Elem())
				walk(p.Elem())
				v.Set(p)
			}
		case reflect.Slice:
			if keep() {
				s := reflect.MakeSlice(v.Type(), 1, 1)
				walk(s.Index(0))
				v.Set(s)
			}
		case reflect.Map:
			if keep() {
				m := reflect.MakeMap(v.Type())
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				walk(k)
				walk(e)
				m.SetMapIndex(k, e)
				v.Set(m)
			}
		case reflect.String, reflect.Bool,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.Float32, reflect.Float64:
			leaf(n, v)
			n++
		default:
			t.Fatalf("fillEvery: no rule for %s", v.Type())
		}
	}
	walk(v)
	return n
}

package lease

import (
	"reflect"
	"testing"
	"time"
)

// The hand-written encoders must not drop a field added to their types
// later. Each type is filled by reflection, every field non-zero, nested
// structs, pointers, slices and maps too, and the hand encoder's output
// must decode to what encoding/json makes of the same value. A field added
// to Record, Event, pools.Stats or Reply without its encoder fails here.
func TestEncodersCoverEveryField(t *testing.T) {
	var rec Record
	fillAll(t, reflect.ValueOf(&rec).Elem())
	sameJSON(t, appendRecord(nil, &rec), rec)

	var ev Event
	fillAll(t, reflect.ValueOf(&ev).Elem())
	sameJSON(t, ev.AppendJSON(nil), ev)

	// Replies with stats, a node or an error go through encoding/json;
	// every other field must be on the fast path.
	var reply Reply
	fillAll(t, reflect.ValueOf(&reply).Elem())
	reply.Pools, reply.Error, reply.Node = nil, nil, ""
	got, err := appendReply(nil, &reply)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, got, reply)
}

// fillAll sets every exported field of v, recursively, to a non-zero value.
func fillAll(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 24, 17, 0, 0, 123456789, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillAll(t, v.Field(i))
			}
		}
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillAll(t, p.Elem())
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fillAll(t, s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(t, k)
		fillAll(t, e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("x-" + v.Type().Name())
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(9)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	default:
		t.Fatalf("fillAll: no rule for %s", v.Type())
	}
}

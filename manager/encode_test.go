package manager

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotlease/slotlease/lease"
)

// sameJSON checks that got decodes to the same value as json.Marshal(v):
// the same keys, at every level, with the same values. A difference is
// named key by key.
func sameJSON(t *testing.T, got []byte, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("invalid JSON %q: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%T: %s\nencoded\n%s\nencoding/json\n%s", v, strings.Join(jsonDiff("", g, w), "; "), got, want)
	}
}

// jsonDiff names what differs between two decoded JSON values: keys
// missing from g, keys g has that w lacks, and values that differ.
func jsonDiff(path string, g, w any) []string {
	gm, gok := g.(map[string]any)
	wm, wok := w.(map[string]any)
	if !gok || !wok {
		if reflect.DeepEqual(g, w) {
			return nil
		}
		return []string{fmt.Sprintf("%s is %v, encoding/json has %v", path, g, w)}
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(wm)) {
		if _, ok := gm[k]; !ok {
			out = append(out, "missing key "+path+"."+k)
		} else {
			out = append(out, jsonDiff(path+"."+k, gm[k], wm[k])...)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(gm)) {
		if _, ok := wm[k]; !ok {
			out = append(out, "extra key "+path+"."+k)
		}
	}
	return out
}

func randomString(r *rand.Rand) string {
	pieces := []string{"", "a", "job-42", `"`, `\`, "\x00", "\x1f", "\n", "\r", "\t", "<", ">", "&", "é", "\u2028", "\u2029", "\xff", "日本", " ", "/"}
	var s string
	for range r.IntN(5) {
		s += pieces[r.IntN(len(pieces))]
	}
	return s
}

// The encoders on random values: strings that need escaping (control
// characters, quotes, HTML characters, invalid UTF-8, U+2028), zero and
// extreme numbers, times in other zones, nil and set pointers. fillEvery walks
// every field by reflection, so a field added later is covered too.
func TestEncodersMatchEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	leaf := randomLeaf(r)
	keep := func() bool { return r.IntN(2) == 0 }
	for range 2000 {
		var rec lease.Record
		fillEvery(t, reflect.ValueOf(&rec).Elem(), leaf, keep)
		sameJSON(t, appendRecord(nil, &rec), rec)

		var ev lease.Event
		fillEvery(t, reflect.ValueOf(&ev).Elem(), leaf, keep)
		sameJSON(t, AppendEvent(nil, &ev), ev)

		// Replies with stats, a node or an error take encoding/json's
		// path, the others the fast one.
		var reply lease.Reply
		fillEvery(t, reflect.ValueOf(&reply).Elem(), leaf, keep)
		if r.IntN(2) == 0 {
			toFastPath(&reply)
		}
		got, err := appendReply(nil, &reply)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, got, reply)
	}
}

// randomLeaf sets a scalar or a time.Time to a random value, zero often.
func randomLeaf(r *rand.Rand) func(int, reflect.Value) {
	times := []time.Time{{}, time.Date(2026, 11, 22, 9, 10, 1, 502236011, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))}
	ints := []int64{0, 1, -1, 400, math.MaxInt32, math.MinInt32}
	uints := []uint64{0, 1, 1e18, math.MaxUint64}
	return func(_ int, v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct: // time.Time
			v.Set(reflect.ValueOf(times[r.IntN(len(times))]))
		case reflect.String:
			v.SetString(randomString(r))
		case reflect.Bool:
			v.SetBool(r.IntN(2) == 0)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if i := ints[r.IntN(len(ints))]; !v.OverflowInt(i) {
				v.SetInt(i)
			}
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if u := uints[r.IntN(len(uints))]; !v.OverflowUint(u) {
				v.SetUint(u)
			}
		case reflect.Float32, reflect.Float64:
			v.SetFloat(float64(r.IntN(3)) / 2)
		}
	}
}

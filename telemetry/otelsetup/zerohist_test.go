package otelsetup

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Declared histogram series are gathered at zero until they have
// observations, and never twice.
func TestZeroFill(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h.", Buckets: []float64{1, 2}}, []string{"pool"})
	reg.MustRegister(h)
	series := func(pool string) HistogramSeries {
		return HistogramSeries{Name: "h_seconds", Help: "h.", Buckets: []float64{1, 2}, Labels: map[string]string{"pool": pool}}
	}
	remove := DeclareHistograms(func() []HistogramSeries { return []HistogramSeries{series("a"), series("b")} })
	defer remove()
	h.WithLabelValues("b").Observe(1.5)

	mfs, err := zeroFill{reg}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || len(mfs[0].Metric) != 2 {
		t.Fatalf("gathered %v, want one family of two series", mfs)
	}
	for _, m := range mfs[0].Metric {
		want := uint64(0)
		if m.Label[0].GetValue() == "b" {
			want = 1
		}
		if got := m.Histogram.GetSampleCount(); got != want || len(m.Histogram.Bucket) != 2 {
			t.Errorf("pool %s: count %d, %d buckets; want %d and 2", m.Label[0].GetValue(), got, len(m.Histogram.Bucket), want)
		}
	}
	remove()
	if mfs, _ := (zeroFill{reg}).Gather(); len(mfs) != 1 || len(mfs[0].Metric) != 1 {
		t.Errorf("after remove: %v, want only the observed series", mfs)
	}
}

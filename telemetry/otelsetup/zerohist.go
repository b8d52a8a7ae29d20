package otelsetup

import (
	"cmp"
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// HistogramSeries is one series of a histogram that must be on /metrics
// from the first scrape, before its first observation: an OpenTelemetry
// histogram has no data point until something is recorded, so a
// dashboard's histogram_quantile and an alert on _count saw nothing, not
// zero, for a pool that had not been used yet.
type HistogramSeries struct {
	Name    string            // the Prometheus family name, e.g. "lease_queue_wait_seconds"
	Help    string            // the instrument's description (the exporter's HELP)
	Buckets []float64         // the instrument's explicit bucket boundaries
	Labels  map[string]string // the series' labels
}

var (
	zeroMu      sync.Mutex
	zeroSources []*func() []HistogramSeries
)

// DeclareHistograms adds a source of histogram series that /metrics shows
// at zero until they have observations, until remove is called. source is
// called at every scrape, after the instruments' callbacks ran (so pools
// met by a callback are known), and must be fast and safe for concurrent
// use.
func DeclareHistograms(source func() []HistogramSeries) (remove func()) {
	zeroMu.Lock()
	defer zeroMu.Unlock()
	s := &source
	zeroSources = append(zeroSources, s)
	return func() {
		zeroMu.Lock()
		defer zeroMu.Unlock()
		zeroSources = slices.DeleteFunc(zeroSources, func(o *func() []HistogramSeries) bool { return o == s })
	}
}

// zeroFill gathers from g, then adds every declared histogram series g
// did not have, at zero (no observations: count 0, sum 0, every bucket 0).
type zeroFill struct{ g prometheus.Gatherer }

func (z zeroFill) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := z.g.Gather()
	if err != nil {
		return mfs, err
	}
	zeroMu.Lock()
	sources := slices.Clone(zeroSources)
	zeroMu.Unlock()
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	for _, source := range sources {
		for _, s := range (*source)() {
			mf := byName[s.Name]
			if mf == nil {
				mf = &dto.MetricFamily{Name: ptr(s.Name), Help: ptr(s.Help), Type: dto.MetricType_HISTOGRAM.Enum()}
				byName[s.Name] = mf
				mfs = append(mfs, mf)
			}
			if mf.GetType() != dto.MetricType_HISTOGRAM || slices.ContainsFunc(mf.Metric, func(m *dto.Metric) bool { return sameLabels(m.Label, s.Labels) }) {
				continue
			}
			mf.Metric = append(mf.Metric, zeroHistogram(s))
		}
	}
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return mfs, nil
}

func zeroHistogram(s HistogramSeries) *dto.Metric {
	m := &dto.Metric{Histogram: &dto.Histogram{SampleCount: ptr[uint64](0), SampleSum: ptr[float64](0)}}
	for _, b := range s.Buckets {
		m.Histogram.Bucket = append(m.Histogram.Bucket, &dto.Bucket{UpperBound: ptr[float64](b), CumulativeCount: ptr[uint64](0)})
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		m.Label = append(m.Label, &dto.LabelPair{Name: ptr(k), Value: ptr(s.Labels[k])})
	}
	return m
}

func sameLabels(pairs []*dto.LabelPair, want map[string]string) bool {
	if len(pairs) != len(want) {
		return false
	}
	for _, p := range pairs {
		if v, ok := want[p.GetName()]; !ok || v != p.GetValue() {
			return false
		}
	}
	return true
}

func ptr[T any](v T) *T { return &v }

package integration

import (
	"strconv"
	"strings"
	"testing"

	"github.com/slotlease/slotlease/test/harness"
)

// metricValue reads one series of a manager's /metrics: the first line of
// metric name whose labels include every label given as name="value"
// pairs; -1 if there is none.
func metricValue(t *testing.T, httpAddr, name string, labels ...string) float64 {
	t.Helper()
	body := scrapeMetrics(t, httpAddr)
next:
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(line, labels[i]+`="`+labels[i+1]+`"`) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return v
	}
	return -1
}

// scrapeMetrics returns the text of a manager's /metrics.
func scrapeMetrics(t *testing.T, httpAddr string) string {
	t.Helper()
	return harness.GetOK(t, "http://"+httpAddr+"/metrics")
}

package jobs

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Outcomes of a job attempt, as executor_job_attempts_total counts them.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"     // and retried after a backoff
	OutcomeDead      = "dead"       // its last attempt failed: dead-lettered
	OutcomeCancelled = "cancelled"  // stopped, or never started, by a cancel
	OutcomeGivenBack = "given_back" // returned unrun: no lease in time, no free slot, the executor stopping
)

// Outcomes lists every outcome, each with a series from the start.
var Outcomes = []string{OutcomeSucceeded, OutcomeFailed, OutcomeDead, OutcomeCancelled, OutcomeGivenBack}

// serveMetrics are a serving executor's instruments (ServerConfig.Meter),
// on /metrics of executor serve --metrics-addr:
//
//	executor.job_attempts  executor_job_attempts_total{node,pool,outcome}  counter, attempts by how they ended
//	executor.jobs_running  executor_jobs_running{node,pool}                gauge, attempts running now
//
// Every series of the server's pools is there at 0 from the start.
type serveMetrics struct {
	attempts metric.Int64Counter
	running  metric.Int64UpDownCounter
	node     attribute.KeyValue
}

func newServeMetrics(meter metric.Meter, node string, pools []string) (*serveMetrics, error) {
	if meter == nil {
		return nil, nil
	}
	attempts, err := meter.Int64Counter("executor.job_attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Job attempts this executor took, by how they ended."))
	if err != nil {
		return nil, err
	}
	running, err := meter.Int64UpDownCounter("executor.jobs_running", metric.WithUnit("{job}"),
		metric.WithDescription("Job attempts this executor runs now."))
	if err != nil {
		return nil, err
	}
	m := &serveMetrics{attempts: attempts, running: running, node: attribute.String("node", node)}
	for _, p := range pools {
		for _, o := range Outcomes {
			m.ended(p, o, 0)
		}
		m.runs(p, 0)
	}
	return m, nil
}

// ended counts n attempts of pool that ended with outcome.
func (m *serveMetrics) ended(pool, outcome string, n int64) {
	if m == nil {
		return
	}
	m.attempts.Add(context.Background(), n, metric.WithAttributes(m.node, attribute.String("pool", pool), attribute.String("outcome", outcome)))
}

// runs adds d to the attempts of pool running now.
func (m *serveMetrics) runs(pool string, d int64) {
	if m == nil {
		return
	}
	m.running.Add(context.Background(), d, metric.WithAttributes(m.node, attribute.String("pool", pool)))
}

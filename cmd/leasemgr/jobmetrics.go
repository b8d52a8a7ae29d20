package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotlease/slotlease/jobs"
	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/metrics/jobmetrics"
	"github.com/slotlease/slotlease/telemetry"
)

// startJobMetrics puts the job queue's figures per pool and tenant on
// /metrics (package jobmetrics) while this manager is active, for the pools
// of its node from the start. The job queue is the whole cluster's: every
// node shows the same figures.
//
// The queue is bound at the first collection that finds it, on conn's
// connection of the moment (the job queue administrator's once it is
// connected); until then the series are at 0.
func startJobMetrics(conn func() *nats.Conn, prefix, node string, active *atomic.Pointer[manager.Manager]) (*jobmetrics.Metrics, error) {
	var q *jobs.Queue // only touched by collections, which jobmetrics serialises
	pools := func() []string {
		m := active.Load()
		if m == nil {
			return nil
		}
		var names []string
		for _, s := range m.Stats() {
			names = append(names, s.Name)
		}
		return names
	}
	return jobmetrics.New(telemetry.Meter(), node, pools, func(ctx context.Context) ([]jobs.PoolLoad, error) {
		if active.Load() == nil {
			return nil, nil // standing by: no figures
		}
		if q == nil {
			bound, err := jobs.Bind(ctx, conn(), prefix)
			if errors.Is(err, jobs.ErrNoQueue) {
				return nil, nil
			}
			if err != nil {
				return nil, fmt.Errorf("job metrics: %w", err)
			}
			q = bound
		}
		recs, err := q.List(ctx, 0, "")
		if err != nil {
			return nil, err
		}
		return jobs.Loads(recs, time.Now()), nil
	})
}

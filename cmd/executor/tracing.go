package main

import (
	"context"
	"fmt"
	"time"

	"github.com/slotlease/slotlease/telemetry/otelsetup"
)

// startTelemetry sets up OTel from OTEL_* (nothing is exported unless
// configured) for run, submit and serve (whose job.submit and job.run
// spans are linked across the queue); the returned stop flushes the spans.
func startTelemetry(ctx context.Context) (stop func(), err error) {
	shutdown, err := otelsetup.Setup(ctx, "executor")
	if err != nil {
		return nil, &exitError{code: ExitUsage, err: fmt.Errorf("configuration:\n%w", err)}
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}, nil
}

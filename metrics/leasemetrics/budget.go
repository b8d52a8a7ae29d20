package leasemetrics

import (
	"github.com/slotlease/slotlease/pools"
	"go.opentelemetry.io/otel/metric"
)

// budgetMetrics are the lease_budget_* gauges of the pools with a usage
// budget: labels node and pool only, as the other pool gauges.
type budgetMetrics struct {
	limit, window, used, reserved metric.Int64ObservableGauge
}

// budgetGauges makes them with gauge, the package's gauge maker (which
// keeps its first error).
func budgetGauges(gauge func(name, unit, desc string) metric.Int64ObservableGauge) budgetMetrics {
	return budgetMetrics{
		limit:    gauge("lease.budget_limit", "{unit}", "Units a pool's budget allows per window (pools with a budget only)."),
		window:   gauge("lease.budget_window", "s", "The budget's sliding window (pools with a budget only)."),
		used:     gauge("lease.budget_used", "{unit}", "Units settled in the budget's window now (pools with a budget only)."),
		reserved: gauge("lease.budget_reserved", "{unit}", "Units the open leases reserved from the budget (pools with a budget only)."),
	}
}

func (b budgetMetrics) observe(o metric.Observer, st pools.Stats, opts []metric.ObserveOption) {
	if st.Budget == "" {
		return
	}
	o.ObserveInt64(b.limit, st.BudgetLimit, opts...)
	o.ObserveInt64(b.window, st.BudgetWindowMs/1000, opts...)
	o.ObserveInt64(b.used, st.BudgetUsed, opts...)
	o.ObserveInt64(b.reserved, st.BudgetReserved, opts...)
}

// instruments are the gauges, for the callback's registration.
func (b budgetMetrics) instruments() []metric.Observable {
	return []metric.Observable{b.limit, b.window, b.used, b.reserved}
}

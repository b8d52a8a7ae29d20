package config

import "os"

// EnvExecutorMetricsAddr is host:port where executor serve serves
// /metrics (Prometheus): its jobs, Go runtime, process and build figures.
// Empty (the default): none, since several executors may serve on one
// host and no port could be everyone's default.
const EnvExecutorMetricsAddr = "EXECUTOR_METRICS_ADDR"

// ExecutorMetricsAddr returns the address executor serve serves /metrics
// on: flag, if given (--metrics-addr), else EXECUTOR_METRICS_ADDR; empty
// for none. Either is checked as HTTP_ADDR is (host:port, no spaces
// around it, a host that resolves); an error names the flag or variable.
func ExecutorMetricsAddr(flag string, flagSet bool) (string, error) {
	name, v := EnvExecutorMetricsAddr, os.Getenv(EnvExecutorMetricsAddr)
	if flagSet {
		name, v = "--metrics-addr", flag
	}
	if v == "" {
		return "", nil
	}
	err := checkForm(name, v)
	if err == nil {
		err = checkHostPort(v)
	}
	if err == nil {
		err = checkResolvable(v)
	}
	if err != nil {
		return "", varErr(name, v, err)
	}
	return v, nil
}

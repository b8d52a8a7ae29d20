package harness

import "flag"

// DefaultParallel sets how many of a package's parallel tests run at once
// to n, unless the command line chose (-parallel). Call it from TestMain,
// before m.Run. go test's own default is GOMAXPROCS, two on a small
// machine; tests that spend their time waiting on servers and timers (a
// lease's TTL, a fault's grace) can run many more at once on two cores
// (docs/testing.md).
func DefaultParallel(n string) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			set = true
		}
	})
	if !set {
		_ = flag.Set("test.parallel", n)
	}
}

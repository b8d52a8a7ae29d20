package main

import (
	"runtime"
	"strings"
)

// heapOwners splits the live heap by who allocated it, from the runtime's
// memory profile: "server" for anything allocated with nats-server on the
// stack, "manager" for anything else allocated with the product's lease,
// pools or jetstream packages on the stack, "other" for the rest (nats.go
// read loops, the runtime, this benchmark). Only allocations sampled by the
// profile count: set runtime.MemProfileRate to 1 around what is measured
// for exact figures. The profile is as of the last completed GC.
type heapOwners struct{ server, manager, other int64 }

func sampleHeapOwners() heapOwners {
	runtime.GC()
	runtime.GC() // the profile publishes the cycle before last
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	var h heapOwners
	for i := range recs {
		r := &recs[i]
		bytes := r.InUseBytes()
		if bytes == 0 {
			continue
		}
		owner := &h.other
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.HasPrefix(f.Function, "github.com/nats-io/nats-server/") {
				owner = &h.server
				break
			}
			if strings.HasPrefix(f.Function, "github.com/slotlease/slotlease/lease.") ||
				strings.HasPrefix(f.Function, "github.com/slotlease/slotlease/pools.") ||
				strings.HasPrefix(f.Function, "github.com/slotlease/slotlease/jetstream.") {
				owner = &h.manager
			}
			if !more {
				break
			}
		}
		*owner += bytes
	}
	return h
}

func (h heapOwners) sub(o heapOwners) heapOwners {
	return heapOwners{h.server - o.server, h.manager - o.manager, h.other - o.other}
}

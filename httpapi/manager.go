package httpapi

import "github.com/slotlease/slotlease/lease"

// Manager is what a NATSSource needs of a lease manager this process runs
// (*manager.Manager): the source asks it in process rather than over NATS,
// where its own replies would come back to it. httpapi depends on this,
// not on the manager package.
type Manager interface {
	Serving() bool
	NodePools() lease.NodePools
	Leases() []lease.Record
	Stats() []lease.PoolStats
	Snapshot(history bool) lease.NodeSnapshot
}

// managerFunc turns f, which returns a pointer to the active manager or
// nil (an atomic.Pointer's Load), into one that returns a Manager or a nil
// interface: a nil pointer in an interface is not nil.
func managerFunc[M interface {
	comparable
	Manager
}](f func() M) func() Manager {
	return func() Manager {
		var none M
		if m := f(); m != none {
			return m
		}
		return nil
	}
}

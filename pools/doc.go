// Package pools is the in-memory slot accounting behind the lease manager.
//
// A [Pool] has a capacity of slots. A request asks for k slots: when k
// slots are free and nobody is waiting it is granted at once, otherwise it
// waits in a queue that is served strictly first-in, first-out. The queue
// stops at the head waiter: a newcomer is never granted ahead of a waiting
// request, even when it would fit, so that a large request cannot starve
// behind a stream of small ones.
//
// The package does no I/O, starts no goroutines and sets no timers. The
// non-blocking API ([Pool.Enqueue], [Pool.Release], [Pool.Cancel],
// [Pool.SetCapacity]) returns the waiters that a call granted or rejected,
// and the caller answers them. [Pool.Acquire] is a blocking convenience in
// the style of golang.org/x/sync/semaphore for simple callers and tests.
//
// A Pool is safe for concurrent use.
package pools

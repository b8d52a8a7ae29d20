// Package pools is the in-memory slot accounting behind the lease manager.
//
// A [Pool] has a capacity of slots. A request asks for k slots: when k
// slots are free and the request would be the next one served anyway, it is
// granted at once; otherwise it waits in a queue. The queue's order is the
// pool's [Policy]. Whatever the policy, the request the policy puts next
// blocks the queue until it fits: nobody is granted ahead of it, even a
// smaller request that would fit, so that a large request cannot starve
// behind a stream of small ones.
//
// # Policies
//
// [PolicyFIFO], the default and what [New] makes, serves strictly in
// arrival order. A newcomer is granted at once only when nobody waits.
//
// [PolicyLIFO] serves the newest request first. A newcomer is granted at
// once whenever its slots are free, and otherwise becomes the request that
// blocks the queue; the oldest requests wait while newer ones keep coming
// (with [OnFullDropOldest], until they are dropped).
//
// [PolicyPriority] serves in order of virtual time, smallest first, ties in
// arrival order:
//
//	virtual time = arrival time - Priority × AgingStep
//
// So a higher priority goes first and requests of one priority go first-in,
// first-out; and a waiting request gains one level per AgingStep waited: a
// request of priority p goes before a request of priority p+d that arrives
// d×AgingStep or more after it. Low priority therefore never starves: at
// worst it waits (highest-lowest priority)×AgingStep plus the service of
// what was ahead of it. A newcomer that goes before the queue's next
// request and fits is granted at once.
//
// [PolicyFair] shares the slots across tenants ([Request.Tenant]) by
// deficit round robin. Each tenant's requests are served first-in,
// first-out. Tenants with requests take turns in a round; when a tenant's
// turn begins it is credited its weight in slots ([Options.Weights],
// [Options.DefaultWeight]) on top of any credit left from its last turn,
// and it is served while its next request costs no more than its credit.
// Over a long drain every backlogged tenant receives slots in proportion to
// its weight. A tenant whose queue empties leaves the round and loses its
// credit; a tenant that gets a request joins at the back of the round, so
// it is served within the next round. A newcomer is granted at once only
// when no tenant is in the round and its own tenant has nothing queued.
// With [Options.TenantCap], a tenant whose next request would take it over
// the cap is out of the round until its own releases (or cancels) bring it
// back under; it blocks nobody meanwhile. (TenantCap needs the fair policy:
// the others keep no per-tenant queues to pass a tenant over with.)
//
// A request may carry a fairness key ([Request.Key]). The fair policy then
// shares by key within the tenant: the round is over shares, a share being
// one tenant's requests with one key, or its requests without a key (so
// without keys, a share is a tenant, as above). A share's weight is that of
// its key's name in [Options.Weights], or of its tenant's name without a
// key; its credit per turn is weight × [Options.Quantum] slots.
// [Options.KeyCap] caps the slots one share holds at once, as TenantCap a
// tenant's: a share at its cap is passed over, blocking no other share.
// With [Options.StarvationAge], the head request of a share in the round
// that has waited that long goes next whatever the credit (the oldest such
// first), whenever the pool grants. Keys, KeyCap, Quantum and
// StarvationAge need the fair policy; the others accept keys and ignore
// them.
//
// Every policy counts slots held and queued per tenant ([Pool.Tenants]).
// [Options.MaxQueue] bounds the queue under every policy: a request that
// would have to wait when MaxQueue requests already do is refused with
// [ErrQueueFull]; or, with [Options.OnFull] set to [OnFullDropOldest] and
// the request admitted by [Pool.Admit], it takes the place of the request
// that arrived first, which is dropped: the queue is then a ring buffer of
// the newest MaxQueue requests. [Pool.TryAcquireRequest] grants exactly
// what [Pool.EnqueueRequest] would grant at once and otherwise returns
// [ErrWouldWait], queueing nothing; a pool made with [Options.FailFast]
// has no queue and treats every request so.
//
// # Start rates
//
// [Options.Rate] adds a start rate beside the capacity: every grant also
// takes its slots from a token bucket refilled at the rate, holding at most
// [Options.Burst] slots, and a grant needs both. The bucket starts empty,
// so a pool made after a restart or a takeover starts no more than the
// rate allows from then on, whatever its predecessor started. The policy's
// order holds: a waiter the bucket holds back blocks those behind it, as
// one the capacity holds back does. Since only time refills the bucket,
// the caller asks [Pool.NextGrant] when the next waiter will fit and calls
// [Pool.Refill] then; [Pool.RetryAfter] says how long a try would have to
// wait for the rate. (The lease manager does not use start rates yet.)
//
// # Costs
//
// With n requests queued and T shares (tenants, or tenants' keys) in the
// fair round: fifo and lifo are O(1) per operation ([Pool.Position] walks
// the queue, O(n)). priority is O(log n) expected per operation, positions
// included, on a treap. fair is O(1) amortised per grant, release and
// cancel while requests are no larger than the quanta, and O(T) when they
// are larger (a whole round may pass without a grant; the rounds are then
// skipped arithmetically rather than played); a position is O(T), and
// [Pool.EnqueueRequest] returns one. A starvation age adds O(log T) (a heap
// of the shares' oldest requests); a tenant cap makes a grant or release
// of a tenant with k keys O(k) (each key's room under the cap changed).
//
// # Use
//
// The package does no I/O and starts no goroutines; only a blocked
// [Pool.Acquire] on a pool with a start rate sets timers, for its own
// wake-ups. The
// non-blocking API ([Pool.EnqueueRequest], [Pool.ReleaseFor],
// [Pool.Cancel], [Pool.SetCapacity]) returns the waiters that a call
// granted or rejected, and the caller answers them; a granted waiter's
// slots are given back with ReleaseFor(w.Tenant, w.Slots). [Pool.Enqueue],
// [Pool.Release] and [Pool.Restore] are the same for tenant "" and
// priority 0. [Pool.Acquire] is a blocking convenience in the style of
// golang.org/x/sync/semaphore for simple callers and tests.
//
// A Pool is safe for concurrent use.
package pools

package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotlease/slotlease/lease"
	"github.com/slotlease/slotlease/pools"
)

// Which job an executor takes next, for one pool: the priority by Order
// (priority and aging), then the tenant: by turns (weighted fair share)
// when the node's pool has the fair policy, else the tenant whose oldest
// job waited longest (submission order across tenants).

// maxLooked bounds the job subjects (priority and tenant) one pick looks
// at: each costs a consumer info and a stored-message read. With more
// tenants waiting in a pool, each pick looks at the next maxLooked of them
// in name order, so every tenant is looked at in turn.
const maxLooked = 64

// tenantIdle is how long a tenant's consumer lives without an executor
// asking it for a job; the next job of the tenant makes it again.
const tenantIdle = 15 * time.Minute

// feed is one pool's picking state; only the pool's feeder goroutine uses
// it.
type feed struct {
	turns map[Priority]*turns
	from  string // maxLooked window: the subject after which to start
}

func newFeed() *feed {
	return &feed{turns: map[Priority]*turns{}}
}

// candidate is a job subject of the pool with jobs to deliver.
type candidate struct {
	subject string
	p       Priority
	tkey    string
	since   time.Time // when its oldest never-delivered job was stored; zero if unknown or none
}

// awaitBroker makes the consumers of jobs without a tenant
// (ensureConsumers), waiting for a broker while there is none: a lease
// manager restarting, or one that starts its broker once the queue exists
// (a NATS of one account, cmd/leasemgr). It says so every
// brokerWaitWarning, and gives up only when ctx ends (nil then: Serve
// stops as asked) or on another error.
func (s *Server) awaitBroker(ctx context.Context) error {
	var warned time.Time
	for {
		err := s.ensureConsumers(ctx)
		if !errors.Is(err, ErrNoBroker) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if time.Since(warned) >= brokerWaitWarning {
			warned = time.Now()
			s.log.Warn("waiting for a lease manager to serve the job queue: no job is taken until one does", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(brokerRetry):
		}
	}
}

// How often serve asks again for a broker, and says it waits.
const (
	brokerRetry       = time.Second
	brokerWaitWarning = 30 * time.Second
)

// ensureConsumers has the broker make the consumers of jobs without a
// tenant, one per pool and priority, before any job is taken: a queue
// without a broker is found at start, not at the first job.
func (s *Server) ensureConsumers(ctx context.Context) error {
	for _, pool := range s.cfg.Pools {
		for _, p := range Priorities {
			if _, err := s.q.consumerInfo(ctx, pool, p, "", s.cfg.AckWait); err != nil {
				return fmt.Errorf("jobs: consumer for pool %s, priority %s: %w", pool, p, err)
			}
		}
	}
	return nil
}

func orNone(label, v string) string {
	if v == "" {
		return ""
	}
	return label + v
}

// next fetches one job of pool: it tries the priorities in the order of
// Order and, within one, the tenants in the order of tenantOrder.
func (s *Server) next(ctx context.Context, pool string, st lease.PoolStats) (*delivery, error) {
	cands, err := s.candidates(ctx, pool)
	if err != nil {
		return nil, err
	}
	byPriority := map[Priority][]candidate{}
	var heads []Head
	for _, c := range cands {
		if byPriority[c.p] == nil {
			heads = append(heads, Head{Priority: c.p})
		}
		byPriority[c.p] = append(byPriority[c.p], c)
		h := &heads[slices.IndexFunc(heads, func(h Head) bool { return h.Priority == c.p })]
		if !c.since.IsZero() && (h.Since.IsZero() || c.since.Before(h.Since)) {
			h.Since = c.since
		}
	}
	for _, p := range Order(heads, time.Now(), s.cfg.Aging) {
		for _, c := range s.tenantOrder(pool, p, byPriority[p], st) {
			d, err := s.q.fetch(ctx, pool, c.p, c.tkey, s.cfg.AckWait)
			if err != nil {
				return nil, err
			}
			if d != nil {
				return d, nil
			}
		}
	}
	return nil, nil
}

// candidates returns the pool's job subjects with something to deliver
// (at most maxLooked of them), each with its consumer.
func (s *Server) candidates(ctx context.Context, pool string) ([]candidate, error) {
	f := s.feeds[pool]
	info, err := s.q.stream.Info(ctx, jetstream.WithSubjectFilter(s.q.names.PoolSubjects(pool)))
	if err != nil {
		return nil, err
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if n > 0 {
			subjects = append(subjects, subj)
		}
	}
	slices.Sort(subjects)
	if len(subjects) > maxLooked {
		// The next window after the last one, wrapping around.
		i, _ := slices.BinarySearch(subjects, f.from)
		subjects = slices.Concat(subjects[i:], subjects[:i])[:maxLooked]
		f.from = subjects[len(subjects)-1] + "\x00"
	}
	// A head's time is read (one more request per subject) only where it
	// is used: for aging, or to order several tenants of one priority.
	perPriority := map[Priority]int{}
	for _, subj := range subjects {
		if _, p, _, ok := s.q.names.parseSubject(subj); ok {
			perPriority[p]++
		}
	}
	var out []candidate
	var skipped []error
	defer func() {
		if len(skipped) > 0 && s.skipLog.open(time.Now()) {
			s.log.Warn("some job subjects are not served for now; at most one line every 10s", "pool", pool, "subjects", len(skipped), "first", skipped[0])
		}
	}()
	for _, subj := range subjects {
		_, p, tkey, ok := s.q.names.parseSubject(subj)
		if !ok {
			continue
		}
		// The broker makes the consumer on first use (again, after the
		// server deleted a tenant's after tenantIdle).
		ci, err := s.q.consumerInfo(ctx, pool, p, tkey, s.cfg.AckWait)
		if errors.Is(err, ErrNoBroker) || ctx.Err() != nil {
			return nil, err
		}
		if err != nil {
			// This subject's jobs wait (its tenant's consumer could not be
			// made: the stream's consumers are used up, say); the others'
			// are served all the same.
			skipped = append(skipped, err)
			continue
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			continue // stored jobs of a consumer made since, or being deleted
		}
		cand := candidate{subject: subj, p: p, tkey: tkey}
		if ci.NumPending > 0 && (s.cfg.Aging > 0 || perPriority[p] > 1) {
			// Its oldest never-delivered job: the first message of the
			// subject after the consumer's delivered floor.
			if m, err := s.q.stream.GetMsg(ctx, ci.DeliveredStream+1, jetstream.WithGetMsgSubject(subj)); err == nil {
				cand.since = m.Time
			}
		}
		out = append(out, cand)
	}
	return out, nil
}

// tenantOrder orders the candidates of one priority: by the pool's turns
// when the node's pool is fair, else oldest waiting job first (a subject
// with only retries coming due last).
func (s *Server) tenantOrder(pool string, p Priority, cands []candidate, st lease.PoolStats) []candidate {
	if st.Policy != pools.PolicyFair {
		slices.SortFunc(cands, func(a, b candidate) int {
			if a.since.IsZero() != b.since.IsZero() {
				return cmp.Compare(boolInt(a.since.IsZero()), boolInt(b.since.IsZero()))
			}
			return cmp.Or(a.since.Compare(b.since), cmp.Compare(a.subject, b.subject))
		})
		return cands
	}
	f := s.feeds[pool]
	t := f.turns[p]
	if t == nil {
		t = newTurns()
		f.turns[p] = t
	}
	// A tenant at its cap is passed over: its job could only wait.
	capped := map[string]bool{}
	for _, ts := range st.Tenants {
		if st.TenantCap > 0 && ts.InUse >= st.TenantCap {
			capped[tenantKey(ts.Tenant)] = true
		}
	}
	cands = slices.DeleteFunc(cands, func(c candidate) bool { return capped[c.tkey] })
	keys := make([]string, len(cands))
	for i, c := range cands {
		keys[i] = c.tkey
	}
	order := t.order(keys, weigher(st))
	out := make([]candidate, 0, len(cands))
	for _, k := range order {
		out = append(out, cands[slices.IndexFunc(cands, func(c candidate) bool { return c.tkey == k })])
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// weigher returns the weight of a tenant key as a fair pool's manager
// reported it: of the tenants holding or waiting now, else configured,
// else the default. A "t_" key names its tenant, so most lookups cost a
// map access; only a hashed key ("h_") hashes the names to find its own.
func weigher(st lease.PoolStats) func(tkey string) int64 {
	live := make(map[string]int, len(st.Tenants))
	for _, ts := range st.Tenants {
		if ts.Weight > 0 {
			live[ts.Tenant] = ts.Weight
		}
	}
	byName := func(name string) (int, bool) {
		if w, ok := live[name]; ok {
			return w, true
		}
		w, ok := st.Weights[name]
		return w, ok
	}
	return func(tkey string) int64 {
		name, plain := strings.CutPrefix(tkey, "t_")
		if tkey == "" {
			name, plain = "", true
		}
		if plain {
			if w, ok := byName(name); ok {
				return int64(max(w, 1))
			}
		} else {
			for _, names := range []map[string]int{live, st.Weights} {
				for n, w := range names {
					if tenantKey(n) == tkey {
						return int64(max(w, 1))
					}
				}
			}
		}
		return int64(max(st.DefaultWeight, 1))
	}
}

// tenantKey is TenantKey, and "" for no tenant.
func tenantKey(tenant string) string {
	if tenant == "" {
		return ""
	}
	return TenantKey(tenant)
}

// charged records, for the pool's turns, that a job of subject started with
// slots slots.
func (s *Server) charged(pool, subject string, slots int64) {
	_, p, tkey, ok := s.q.names.parseSubject(subject)
	if t := s.feeds[pool].turns[p]; ok && t != nil {
		t.charge(tkey, slots)
	}
}

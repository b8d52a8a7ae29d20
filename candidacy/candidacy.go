// Package candidacy lets every lease manager that lists cluster pools
// (CLUSTER_POOLS) say so, and each learn whether the others agree on them.
//
// Exactly one of those managers serves the cluster pools at a time (it holds
// the leadership of node lease.ClusterNode), with its own list. A candidate
// that lists other capacities, or other pools, would serve them after a
// takeover; that must be seen before, not found out then. So each candidate
// keeps a record of its list under <cluster>.candidates.<instance> in the
// leadership bucket, with the leadership TTL and renewed every TTL/3 (a dead
// candidate's record lapses), watches everyone's, and reports every
// disagreement. Nothing is merged: the serving manager serves its own list.
package candidacy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slotlease/slotlease/manager"
	"github.com/slotlease/slotlease/pools"
	"github.com/slotlease/slotlease/rules"
)

// Record is one candidate's list of cluster pools.
type Record struct {
	Node     string           `json:"node"`
	Instance string           `json:"instance"`
	Pools    map[string]int64 `json:"pools"` // name -> capacity, as configured
	// Rates are the start rates of the pools that have one, as configured:
	// name -> "60/m burst 5".
	Rates map[string]string `json:"rates,omitempty"`
	// Budgets are the usage budgets of the pools that have one, as
	// configured: name -> "100000/m".
	Budgets map[string]string `json:"budgets,omitempty"`
}

// Config configures Run.
type Config struct {
	Store   manager.Store // the leadership bucket
	Cluster string        // the cluster pools' node id, lease.ClusterNode
	Self    Record
	TTL     time.Duration // the record's TTL: whole seconds, at least 1s
	Logger  *slog.Logger
	// OnChange is called with the disagreements (Disagreements) whenever
	// they change, from Run's goroutine; nil when everyone agrees.
	OnChange func([]string)
	// OnPools, if set, is called with the names of the cluster pools the
	// live candidates list, sorted, whenever they change: what executors
	// may ask the cluster for, also while no manager serves it.
	OnPools func([]string)
	// Refused, if set, is told manager.RefusedCandidate for each record no
	// candidate wrote (see accept), which is not reported.
	Refused func(reason string)
}

// Key is where instance's record is kept: three tokens, so it never
// collides with a node's leadership key (one token).
func Key(cluster, instance string) string { return cluster + ".candidates." + instance }

// Watch follows every candidate's record, reporting to cfg.OnChange and
// cfg.OnPools, until ctx ends: for a manager that lists no cluster pools
// itself (cfg.Self and cfg.TTL are not used). It returns nil when ctx ends.
func Watch(ctx context.Context, cfg Config) error {
	if cfg.Store == nil || cfg.Cluster == "" {
		return errors.New("candidacy: needs a store and the cluster node id")
	}
	watch(ctx, cfg, cmp.Or(cfg.Logger, slog.Default()))
	return nil
}

// Run keeps cfg.Self's record alive and watches every candidate's until ctx
// ends, then deletes its own record. It returns nil when ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Store == nil || cfg.Cluster == "" || cfg.Self.Instance == "" || cfg.OnChange == nil {
		return errors.New("candidacy: needs a store, the cluster node id, an instance and OnChange")
	}
	if cfg.TTL < time.Second || cfg.TTL%time.Second != 0 {
		return fmt.Errorf("candidacy: TTL %v: must be whole seconds, at least 1s", cfg.TTL)
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	value, err := json.Marshal(cfg.Self)
	if err != nil {
		return err
	}
	key := Key(cfg.Cluster, cfg.Self.Instance)

	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() { watch(wctx, cfg, log) })

	var rev uint64
	tick := time.NewTicker(cfg.TTL / 3)
	defer tick.Stop()
	for {
		rev = keep(ctx, cfg, key, value, rev, log)
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if rev != 0 {
				_ = cfg.Store.Delete(dctx, key, rev)
			}
			cancel()
			return nil
		case <-tick.C:
		}
	}
}

// keep renews the record at rev, or creates it when there is none (first
// time, or it lapsed); it returns the new revision, 0 if neither worked.
func keep(ctx context.Context, cfg Config, key string, value []byte, rev uint64, log *slog.Logger) uint64 {
	cctx, cancel := context.WithTimeout(ctx, cfg.TTL)
	defer cancel()
	if rev != 0 {
		if r, err := cfg.Store.Renew(cctx, key, value, cfg.TTL, rev); err == nil {
			return r
		}
	}
	r, err := cfg.Store.Create(cctx, key, value, cfg.TTL)
	if errors.Is(err, manager.ErrStoreExists) {
		// Our own record, whose revision we lost: take it over.
		var cur uint64
		if _, cur, err = cfg.Store.Get(cctx, key); err == nil {
			r, err = cfg.Store.Renew(cctx, key, value, cfg.TTL, cur)
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("keeping this manager's cluster pool candidacy", "err", err)
		}
		return 0
	}
	return r
}

// watch follows every candidate's record and reports the disagreements
// when they change. It restarts the watch if it ends before ctx does.
func watch(ctx context.Context, cfg Config, log *slog.Logger) {
	var last, lastPools []string
	var refusals refusalLog
	report := func(recs map[string]Record) {
		if cfg.OnPools != nil {
			names := map[string]bool{}
			for _, r := range recs {
				for name := range r.Pools {
					names[name] = true
				}
			}
			if pools := slices.Sorted(maps.Keys(names)); !slices.Equal(pools, lastPools) || lastPools == nil {
				lastPools = append([]string{}, pools...) // never nil: none is known too
				cfg.OnPools(lastPools)
			}
		}
		d := Disagreements(slices.Collect(maps.Values(recs)))
		if slices.Equal(d, last) {
			return
		}
		last = d
		for _, s := range d {
			log.Warn("cluster pool candidates disagree; the serving manager serves its own list", "disagreement", s)
		}
		if cfg.OnChange != nil {
			cfg.OnChange(d)
		}
	}
	for ctx.Err() == nil {
		w, err := cfg.Store.Watch(ctx, cfg.Cluster+".candidates.*")
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		recs := map[string]Record{}
		caughtUp := false
		for ch := range w.Changes() {
			switch ch.Op {
			case manager.ChangePut:
				r, err := accept(cfg.Cluster, ch)
				if err != nil {
					delete(recs, ch.Key)
					refusals.refuse(cfg, log, ch.Key, err)
					break
				}
				recs[ch.Key] = r
			case manager.ChangeDelete, manager.ChangeExpire:
				delete(recs, ch.Key)
			case manager.ChangeCaughtUp:
				caughtUp = true
			}
			if caughtUp {
				report(recs)
			}
		}
		_ = w.Stop()
	}
}

// accept decodes a candidate's record and checks that a candidate wrote
// it: with a TTL (Run writes every record with one, so a dead candidate's
// lapses; one without would be reported forever), strictly decoded, under
// the key of the instance it names, for a valid node, with valid pool
// names and capacities.
func accept(cluster string, ch manager.Change) (Record, error) {
	var r Record
	if ch.TTL <= 0 {
		return r, errors.New("stored without a TTL")
	}
	dec := json.NewDecoder(bytes.NewReader(ch.Value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil || dec.More() {
		return r, fmt.Errorf("does not decode as a candidate's record: %v", err)
	}
	if r.Instance == "" || Key(cluster, r.Instance) != ch.Key {
		return r, errors.New("its key does not name the instance it holds")
	}
	if err := rules.ValidToken(r.Node); err != nil {
		return r, fmt.Errorf("node: %w", err)
	}
	if len(r.Pools) > maxPools || len(r.Rates) > maxPools || len(r.Budgets) > maxPools {
		return r, fmt.Errorf("more than %d pools", maxPools)
	}
	for name, c := range r.Pools {
		if err := rules.ValidToken(name); err != nil || c < 0 || c > pools.MaxCapacity {
			return r, fmt.Errorf("pool %.64q: not a pool name with a capacity a manager serves", name)
		}
	}
	for what, m := range map[string]map[string]string{"rate": r.Rates, "budget": r.Budgets} {
		for name, v := range m {
			if _, ok := r.Pools[name]; !ok || len(v) > maxRateText {
				return r, fmt.Errorf("%s of pool %.64q: not one a candidate lists", what, name)
			}
		}
	}
	return r, nil
}

// Bounds of a candidate's record: far more pools than a configuration
// holds, and a rate's "<n>/<unit> burst <n>".
const (
	maxPools    = 4096
	maxRateText = 64
)

// refusalLog spaces out the log lines about refused records: whoever
// wrote them may write many.
type refusalLog struct {
	last    time.Time
	skipped int
}

// refuseLogEvery is the least time between two such lines.
const refuseLogEvery = 10 * time.Second

// refuse counts a record no candidate wrote and logs it, unless a line was
// written in the last refuseLogEvery.
func (l *refusalLog) refuse(cfg Config, log *slog.Logger, key string, why error) {
	if cfg.Refused != nil {
		cfg.Refused(manager.RefusedCandidate)
	}
	if time.Since(l.last) < refuseLogEvery {
		l.skipped++
		return
	}
	log.Warn("refusing a cluster pool candidate's record no candidate wrote; it is not reported",
		"key", fmt.Sprintf("%.128s", key), "why", why, "unlogged_since_last", l.skipped)
	l.last, l.skipped = time.Now(), 0
}

// Disagreements lists, one line per pool in name order, every cluster pool
// the candidates do not agree on: its capacities (and start rates) and the
// nodes that list each, and the nodes that do not list it at all. Nil when
// all agree.
func Disagreements(recs []Record) []string {
	names := map[string]bool{}
	for _, r := range recs {
		for name := range r.Pools {
			names[name] = true
		}
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		type shape struct {
			capacity     int64
			rate, budget string
		}
		byShape := map[shape][]string{}
		var missing []string
		for _, r := range recs {
			if c, ok := r.Pools[name]; ok {
				s := shape{c, r.Rates[name], r.Budgets[name]}
				byShape[s] = append(byShape[s], r.Node)
			} else {
				missing = append(missing, r.Node)
			}
		}
		if len(byShape) == 1 && len(missing) == 0 {
			continue
		}
		shapes := slices.SortedFunc(maps.Keys(byShape), func(a, b shape) int {
			return cmp.Or(cmp.Compare(a.capacity, b.capacity), strings.Compare(a.rate, b.rate), strings.Compare(a.budget, b.budget))
		})
		var parts []string
		for _, s := range shapes {
			what := fmt.Sprintf("capacity %d", s.capacity)
			if s.rate != "" {
				what += ", rate " + s.rate
			}
			if s.budget != "" {
				what += ", budget " + s.budget
			}
			parts = append(parts, fmt.Sprintf("%s on %s", what, nodes(byShape[s])))
		}
		if len(missing) > 0 {
			parts = append(parts, "not listed on "+nodes(missing))
		}
		out = append(out, fmt.Sprintf("cluster pool %s: %s", name, strings.Join(parts, "; ")))
	}
	return out
}

// nodes is a sorted, de-duplicated list of node names.
func nodes(ns []string) string {
	slices.Sort(ns)
	return strings.Join(slices.Compact(ns), ", ")
}

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

	"github.com/slotlease/slotlease/lease"
)

// Record is one candidate's list of cluster pools.
type Record struct {
	Node     string           `json:"node"`
	Instance string           `json:"instance"`
	Pools    map[string]int64 `json:"pools"` // name -> capacity, as configured
	// Rates are the start rates of the pools that have one, as configured:
	// name -> "60/m burst 5".
	Rates map[string]string `json:"rates,omitempty"`
}

// Config configures Run.
type Config struct {
	Store   lease.Store // the leadership bucket
	Cluster string      // the cluster pools' node id, lease.ClusterNode
	Self    Record
	TTL     time.Duration // the record's TTL: whole seconds, at least 1s
	Logger  *slog.Logger
	// OnChange is called with the disagreements (Disagreements) whenever
	// they change, from Run's goroutine; nil when everyone agrees.
	OnChange func([]string)
}

// Key is where instance's record is kept: three tokens, so it never
// collides with a node's leadership key (one token).
func Key(cluster, instance string) string { return cluster + ".candidates." + instance }

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
	if errors.Is(err, lease.ErrStoreExists) {
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
	var last []string
	report := func(recs map[string]Record) {
		d := Disagreements(slices.Collect(maps.Values(recs)))
		if slices.Equal(d, last) {
			return
		}
		last = d
		for _, s := range d {
			log.Warn("cluster pool candidates disagree; the serving manager serves its own list", "disagreement", s)
		}
		cfg.OnChange(d)
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
			case lease.ChangePut:
				var r Record
				if json.Unmarshal(ch.Value, &r) == nil && r.Instance != "" {
					recs[ch.Key] = r
				}
			case lease.ChangeDelete, lease.ChangeExpire:
				delete(recs, ch.Key)
			case lease.ChangeCaughtUp:
				caughtUp = true
			}
			if caughtUp {
				report(recs)
			}
		}
		_ = w.Stop()
	}
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
			capacity int64
			rate     string
		}
		byShape := map[shape][]string{}
		var missing []string
		for _, r := range recs {
			if c, ok := r.Pools[name]; ok {
				s := shape{c, r.Rates[name]}
				byShape[s] = append(byShape[s], r.Node)
			} else {
				missing = append(missing, r.Node)
			}
		}
		if len(byShape) == 1 && len(missing) == 0 {
			continue
		}
		shapes := slices.SortedFunc(maps.Keys(byShape), func(a, b shape) int {
			return cmp.Or(cmp.Compare(a.capacity, b.capacity), strings.Compare(a.rate, b.rate))
		})
		var parts []string
		for _, s := range shapes {
			what := fmt.Sprintf("capacity %d", s.capacity)
			if s.rate != "" {
				what += ", rate " + s.rate
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

package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"
)

// maxRounds bounds -rounds.
const maxRounds = 100

// runRounds runs the selected scenarios rounds times over, one whole round
// after another, each scenario on its own fresh server as always. A ratio
// between two rows of one round compares runs a few seconds apart, so a
// change in the machine's speed during the run (other work on the host, a
// noisy neighbour of a virtual machine) falls on both; the median over
// rounds is then a figure one slow or fast round does not move.
func runRounds(ctx context.Context, cfg config, selected []scenario, rounds int) ([][]*result, error) {
	all := make([][]*result, 0, rounds)
	for k := range rounds {
		var results []*result
		for _, s := range selected {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if rounds > 1 {
				fmt.Fprintf(cfg.progress, "round %d/%d: ", k+1, rounds)
			}
			fmt.Fprintf(cfg.progress, "running %s ...", s.name)
			t0 := time.Now()
			r, err := s.run(ctx, cfg)
			fmt.Fprintf(cfg.progress, " %.1fs\n", time.Since(t0).Seconds())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			r.Name = s.name
			results = append(results, r)
			// Let the garbage of one scenario not be collected on the next one's time.
			runtime.GC()
		}
		all = append(all, results)
	}
	return all, nil
}

// medianRows is one row per scenario: with one round, that round's; with
// more, the row of the round whose ops/s is the median of the scenario's
// rounds (the lower middle one of an even count), noted with their range,
// and with the median of the rounds' ratios.
func medianRows(all [][]*result) []*result {
	if len(all) == 1 {
		return all[0]
	}
	rows := make([]*result, len(all[0]))
	for i := range rows {
		byRate := make([]*result, len(all))
		for k, rs := range all {
			byRate[k] = rs[i]
		}
		slices.SortStableFunc(byRate, func(a, b *result) int {
			return cmpFloat(a.opsPerSec(), b.opsPerSec())
		})
		mid := *byRate[(len(byRate)-1)/2]
		note := fmt.Sprintf("round of median ops/s, %s–%s over %d rounds", fmtRate(byRate[0].opsPerSec()), fmtRate(byRate[len(byRate)-1].opsPerSec()), len(all))
		// The ratio is the median of the rounds' ratios, each against
		// its own round's baseline.
		var ratios []float64
		to := ""
		for _, r := range byRate {
			if r.ratioTo != "" {
				ratios, to = append(ratios, r.ratio), r.ratioTo
			}
		}
		if len(ratios) > 0 {
			mid.Ratio = fmt.Sprintf("%.2fx %s (median)", median(ratios), to)
		}
		if mid.Note != "" {
			note += "; " + mid.Note
		}
		mid.Note = note
		rows[i] = &mid
	}
	return rows
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

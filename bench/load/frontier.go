package load

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Frontier defaults.
const (
	DefaultFrontierBudget = 60 * time.Second
	DefaultProbeDuration  = 2 * time.Second
	// frontierStartRate is the first rate probed when the scenario has none.
	frontierStartRate = 50
	// frontierMaxRate ends the doubling even when nothing failed.
	frontierMaxRate = 1 << 20
	// frontierMaxErrors is the share of errors past which a probe fails
	// every budget: a side that drops requests has no latency to speak of.
	frontierMaxErrors = 0.01
	// frontierPrecision ends a bisection once the bracket is this narrow,
	// relative to its upper end.
	frontierPrecision = 0.1
)

// FrontierPoint is the highest open-loop rate found at which the target's
// 99th percentile latency exceeded the direct path's, at the same rate, by
// less than Budget; P99Overhead is that excess at Rate. Rate is 0 when even
// the lowest rate probed was over the budget.
type FrontierPoint struct {
	Budget      time.Duration `json:"budget_ns"`
	Rate        float64       `json:"rate_rps"`
	P99Overhead time.Duration `json:"p99_overhead_ns"`
}

// probeResult is one rate probed on both sides.
type probeResult struct {
	rate     float64
	overhead time.Duration // p99 via − p99 direct
	ok       bool          // both sides answered (errors under 1%)
}

func (p probeResult) passes(budget time.Duration) bool { return p.ok && p.overhead < budget }

// Frontier finds, for each budget, the highest open-loop rate at which t's
// p99 latency minus direct's p99 at the same rate stays under the budget.
// It probes sc in open loop (each probe a short run, Options.ProbeDuration,
// on both sides, the order alternating), doubling the rate from sc.Rate (or
// 50/s) until a probe is over the largest budget or errs, then bisecting
// the bracket of each budget to within 10%. Both sides are first warmed up
// with the scenario's warm-up (or one probe's length) at the starting rate,
// and each probe has a short warm-up of its own. The whole search stops when
// Options.FrontierBudget (default 60 s) would be exceeded; the points then
// hold the best rates found so far. A probe fails every budget when either
// side errs on more than 1% of its requests, or when the direct side's p99
// is worse than the target's by more than the widest budget (the direct
// path stalled or saturated). direct speaks WireUpstream unless its
// Wire says otherwise. Options.Progress receives one line per probe.
func Frontier(ctx context.Context, sc *Scenario, t Target, direct Target, budgets []time.Duration, opt Options) ([]FrontierPoint, error) {
	if len(budgets) == 0 {
		return nil, errors.New("cannot search the frontier: no budget")
	}
	if sc == nil {
		return nil, errors.New("cannot search the frontier: no scenario")
	}
	if direct.Wire == "" {
		direct.Wire = WireUpstream
	}
	probeDur := opt.ProbeDuration
	if probeDur <= 0 {
		probeDur = DefaultProbeDuration
	}
	total := opt.FrontierBudget
	if total <= 0 {
		total = DefaultFrontierBudget
	}
	deadline := time.Now().Add(total)

	c := *sc
	c.Mode = ModeOpen
	c.MaxRequests = 0
	c.Duration = probeDur
	c.Warmup = max(probeDur/5, time.Millisecond)
	c.SampleRSS = 0
	start := c.Rate
	if start <= 0 {
		start = frontierStartRate
	}
	c.Rate = start
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// Refuse a bad target before spending the budget on it.
	for _, tg := range []Target{t, direct} {
		r, err := newRunner(ctx, &c, tg, opt)
		if err != nil {
			return nil, err
		}
		r.close()
	}

	w := opt.Progress
	opt.Progress = nil
	widest := slices.Max(budgets)
	var probes []probeResult // sorted by rate
	cost := 2 * (c.Warmup + c.Duration)
	probe := func(rate float64) (probeResult, bool, error) {
		if i := slices.IndexFunc(probes, func(p probeResult) bool { return p.rate == rate }); i >= 0 {
			return probes[i], true, nil
		}
		if ctx.Err() != nil || time.Until(deadline) < cost {
			return probeResult{}, false, nil
		}
		pc := c
		pc.Rate = rate
		// Alternate which side goes first, so that drift (a warming cache,
		// a neighbour's load) does not always favour the same one.
		swapped := len(probes)%2 == 1
		sides := []Target{direct, t}
		if swapped {
			sides[0], sides[1] = t, direct
		}
		var res [2]*Result
		for i, side := range sides {
			r, err := Run(ctx, &pc, side, opt)
			if err != nil {
				if ctx.Err() != nil {
					return probeResult{}, false, nil
				}
				return probeResult{}, false, err
			}
			res[i] = r
		}
		d, via := res[0], res[1]
		if swapped {
			d, via = res[1], res[0]
		}
		p := probeResult{
			rate:     rate,
			overhead: via.Quantile("latency", 99) - d.Quantile("latency", 99),
		}
		// A proxy cannot be much faster than the path it proxies: a direct
		// side slower by more than the widest budget stalled or saturated,
		// and the probe says nothing about the overhead.
		p.ok = healthy(d) && healthy(via) && p.overhead > -widest
		if w != nil {
			fmt.Fprintf(w, "frontier %9.1f/s  p99 %s %-10s %s %-10s overhead %-10s errors %d/%d\n",
				rate, direct.Name, d.Quantile("latency", 99), t.Name, via.Quantile("latency", 99),
				p.overhead, d.Errors+via.Errors, d.Requests+via.Requests)
		}
		i, _ := slices.BinarySearchFunc(probes, rate, func(p probeResult, r float64) int {
			switch {
			case p.rate < r:
				return -1
			case p.rate > r:
				return 1
			}
			return 0
		})
		probes = slices.Insert(probes, i, p)
		return p, true, nil
	}

	// Warm both sides up once (the scenario's warm-up, or one probe's
	// length): a cold process's first requests would decide the first probe.
	warm := c
	warm.Warmup = -1
	warm.Duration = sc.Warmup
	if warm.Duration <= 0 {
		warm.Duration = probeDur
	}
	for _, side := range []Target{direct, t} {
		if _, err := Run(ctx, &warm, side, opt); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
	}

	for rate := start; rate <= frontierMaxRate; rate *= 2 {
		p, ran, err := probe(rate)
		if err != nil {
			return nil, err
		}
		if !ran || !p.passes(widest) {
			break
		}
	}

	points := make([]FrontierPoint, len(budgets))
	for k, b := range budgets {
		lo, hi := bracket(probes, b)
		for hi != nil {
			var next float64
			switch {
			case lo == nil:
				next = hi.rate / 2
				if next < 1 {
					hi = nil
					continue
				}
			case (hi.rate-lo.rate)/hi.rate <= frontierPrecision:
				hi = nil
				continue
			default:
				next = (lo.rate + hi.rate) / 2
			}
			_, ran, err := probe(next)
			if err != nil {
				return nil, err
			}
			if !ran {
				break
			}
			lo, hi = bracket(probes, b)
		}
		points[k] = FrontierPoint{Budget: b}
		if lo != nil {
			points[k].Rate = lo.rate
			points[k].P99Overhead = lo.overhead
		}
	}
	return points, ctx.Err()
}

// bracket returns, among probes sorted by rate, the highest rate below
// which every probe passed budget b (nil when the lowest failed), and the
// first one that failed (nil when none did).
func bracket(probes []probeResult, b time.Duration) (lo, hi *probeResult) {
	for i := range probes {
		if !probes[i].passes(b) {
			return lo, &probes[i]
		}
		lo = &probes[i]
	}
	return lo, nil
}

// healthy reports whether a probe side answered: some requests, and errors
// under 1%.
func healthy(r *Result) bool {
	return r.Requests > 0 && float64(r.Errors) <= frontierMaxErrors*float64(r.Requests)
}

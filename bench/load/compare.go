package load

import (
	"context"
	"errors"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// DefaultRound is the length of one Compare round.
const DefaultRound = 2 * time.Second

// longReply: a reply longer than this many rounds is not interleaved.
const longReply = 5

// Compare runs sc against every target, interleaved, so that whatever else
// the machine does affects all of them alike: after each target's warm-up,
// the measured duration is split into rounds (Options.Round, default 2 s),
// and each round runs every target in turn for the round's length, the
// order rotating by one each round. A target's rounds are merged into one
// result. MaxRequests, when set, is shared out among the rounds. One
// target, or replies longer than longReply rounds, run the whole window as
// one round. The targets whose memory is sampled are sampled for
// sc.Cooldown more after the last round, together. Results are in the
// order of targets. When ctx ends early, Compare returns what was measured
// so far together with ctx's error.
func Compare(ctx context.Context, sc *Scenario, targets []Target, opt Options) ([]*Result, error) {
	if len(targets) == 0 {
		return nil, errors.New("cannot compare: no target")
	}
	runners := make([]*runner, len(targets))
	for i, t := range targets {
		r, err := newRunner(ctx, sc, t, opt)
		if err != nil {
			for _, r := range runners[:i] {
				r.close()
			}
			return nil, err
		}
		runners[i] = r
	}
	defer func() {
		for _, r := range runners {
			r.close()
		}
	}()
	c := runners[0].sc // validated

	round := opt.Round
	if round <= 0 {
		round = min(DefaultRound, c.Duration/2)
		// A round ends when its requests have, so interleaving needs
		// requests short beside a round: one target, or replies that
		// outlast several rounds (slow, long-lived streams), run the whole
		// window at once instead of a round's worth of waiting per round.
		if len(targets) == 1 || c.expectedReply() > longReply*round {
			round = c.Duration
		}
	}
	rounds := max(1, int((c.Duration+round-1)/round))
	window := c.Duration / time.Duration(rounds)
	var perRound int64
	if c.MaxRequests > 0 {
		perRound = int64((c.MaxRequests + rounds - 1) / rounds)
	}

	started := time.Now()
	pr := startProgress(opt.Progress, started)
	results := make([]*Result, len(targets))
	samplers := make([]*rssSampler, len(targets))
	for i, r := range runners {
		results[i] = newResult(c, targets[i])
		results[i].Started = started
		results[i].Rounds = rounds
		samplers[i] = r.sampleRSS(results[i])
	}
	defer func() {
		for _, s := range samplers {
			s.stop()
		}
	}()

	if w := c.warmup(); w > 0 {
		for i, r := range runners {
			if ctx.Err() != nil {
				break
			}
			// A warm-up alone: a phase whose measured window is empty.
			scratch := newResult(c, targets[i])
			r.phase(ctx, scratch, pr, w, 0, 0)
		}
	}
	for k := 0; k < rounds && ctx.Err() == nil; k++ {
		for j := range runners {
			if ctx.Err() != nil {
				break
			}
			i := (j + k) % len(runners)
			runners[i].phase(ctx, results[i], pr, 0, window, perRound)
		}
	}
	pr.stop()
	// The cooldown runs after the last round, for every sampled target at
	// once: none of them is sent anything any more.
	for _, r := range runners {
		r.close()
	}
	coolDown(ctx, c.Cooldown, opt.Progress, samplers...)
	for _, res := range results {
		res.finish()
	}
	return results, ctx.Err()
}

// Histogram returns the histogram named h: latency, ttfb, ttft or
// interframe; nil for another name.
func (r *Result) Histogram(h string) *hdrhistogram.Histogram {
	switch h {
	case "latency":
		return r.Latency
	case "ttfb":
		return r.TTFB
	case "ttft":
		return r.TTFT
	case "interframe":
		return r.InterFrame
	}
	return nil
}

// Quantile returns the value at percentile p (0 to 100, as in Percentiles;
// 0 is the minimum) of histogram h (latency, ttfb, ttft or interframe); 0
// when it is empty or unknown.
func (r *Result) Quantile(h string, p float64) time.Duration {
	hist := r.Histogram(h)
	if hist == nil || hist.TotalCount() == 0 {
		return 0
	}
	if p <= 0 {
		return time.Duration(hist.Min()) * time.Microsecond
	}
	return time.Duration(hist.ValueAtQuantile(p)) * time.Microsecond
}

// Overhead returns, for every percentile of Percentiles, how much longer
// histogram h of via is than that of direct: via − direct, negative when
// via was faster.
func Overhead(direct, via *Result, h string) map[float64]time.Duration {
	out := make(map[float64]time.Duration, len(Percentiles))
	for _, p := range Percentiles {
		out[p] = via.Quantile(h, p) - direct.Quantile(h, p)
	}
	return out
}

// ThroughputRatio returns a's throughput over b's; 0 when b's is 0.
func ThroughputRatio(a, b *Result) float64 {
	if b.Throughput == 0 {
		return 0
	}
	return a.Throughput / b.Throughput
}

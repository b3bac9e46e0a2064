package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/edgegw/gateway/bench/load"
)

// document is what WriteJSON writes and what WriteText reads its figures
// from: everything in a Comparison, histograms reduced to summaries.
// Durations are in microseconds (fields ending _us), except the results'
// own elapsed_ns and at_ns, which keep load.Result's encoding.
type document struct {
	Scenario    string    `json:"scenario"`
	Machine     string    `json:"machine,omitempty"`
	Command     string    `json:"command,omitempty"`
	When        time.Time `json:"when"`
	Concurrency int       `json:"concurrency,omitempty"`
	Percentiles []float64 `json:"percentiles"`
	Baseline    string    `json:"baseline"`

	Targets   []*targetDoc              `json:"targets"`
	Overheads []*overheadDoc            `json:"overheads"`
	Frontier  map[string][]*frontierDoc `json:"frontier,omitempty"`
	Scorecard *scorecardDoc             `json:"scorecard,omitempty"`
}

// targetDoc is one result: its counters as load.Result encodes them, plus
// a summary of each histogram (null when it recorded nothing).
type targetDoc struct {
	Name string `json:"name"`
	*load.Result

	Latency    *histogramDoc `json:"latency"`
	TTFB       *histogramDoc `json:"ttfb"`
	TTFT       *histogramDoc `json:"ttft"`
	InterFrame *histogramDoc `json:"interframe"`

	RSSSummary *rssDoc `json:"rss_summary,omitempty"`
}

func (t *targetDoc) metric(name string) *histogramDoc {
	switch name {
	case MetricLatency:
		return t.Latency
	case MetricTTFB:
		return t.TTFB
	case MetricTTFT:
		return t.TTFT
	case MetricInterFrame:
		return t.InterFrame
	}
	return nil
}

// histogramDoc summarises a histogram, in microseconds.
type histogramDoc struct {
	Count  int64   `json:"count"`
	MinUS  int64   `json:"min_us"`
	MaxUS  int64   `json:"max_us"`
	MeanUS float64 `json:"mean_us"`
	// PercentilesUS maps p50, p90, p99, p99.9 and max to their values.
	PercentilesUS map[string]int64 `json:"percentiles_us"`
}

// overheadDoc is a target against the baseline: at each percentile, target
// minus baseline in microseconds (null when either side recorded nothing),
// and the throughput ratio target / baseline (0 when the baseline had none).
type overheadDoc struct {
	Target          string           `json:"target"`
	Baseline        string           `json:"baseline"`
	ThroughputRatio float64          `json:"throughput_ratio"`
	LatencyUS       map[string]int64 `json:"latency_us"`
	TTFBUS          map[string]int64 `json:"ttfb_us"`
	TTFTUS          map[string]int64 `json:"ttft_us"`
	InterFrameUS    map[string]int64 `json:"interframe_us"`
	// ResolutionUS is, per metric, how far apart two values must be for
	// the histograms to tell them apart at the larger max of the two
	// sides: smaller overheads there are below what was measured.
	ResolutionUS map[string]int64 `json:"resolution_us,omitempty"`
}

func (o *overheadDoc) metric(name string) map[string]int64 {
	switch name {
	case MetricLatency:
		return o.LatencyUS
	case MetricTTFB:
		return o.TTFBUS
	case MetricTTFT:
		return o.TTFTUS
	case MetricInterFrame:
		return o.InterFrameUS
	}
	return nil
}

func (o *overheadDoc) setMetric(name string, v map[string]int64) {
	switch name {
	case MetricLatency:
		o.LatencyUS = v
	case MetricTTFB:
		o.TTFBUS = v
	case MetricTTFT:
		o.TTFTUS = v
	case MetricInterFrame:
		o.InterFrameUS = v
	}
}

// rssDoc summarises resident memory samples, in bytes. Start, peak and end
// are of the samples taken under load; after is the last one taken after
// it (the scenario's cooldown), when there are any.
type rssDoc struct {
	Samples int   `json:"samples"` // all of them, after-load ones included
	Start   int64 `json:"start_bytes"`
	Peak    int64 `json:"peak_bytes"`
	PeakAt  int64 `json:"peak_at_ns"`
	End     int64 `json:"end_bytes"`
	// PerStream is (peak − start) / concurrency, when concurrency is known.
	PerStream int64 `json:"per_stream_bytes,omitempty"`

	AfterSamples int   `json:"after_samples,omitempty"`
	After        int64 `json:"after_bytes,omitempty"`
	// AfterFor is how long after the load's end the last sample was taken.
	AfterFor int64 `json:"after_for_ns,omitempty"`

	LevelsOff     *plateauDoc  `json:"levels_off"`
	ComesBackDown *recoveryDoc `json:"comes_back_down"`
}

// Verdicts of the memory checks.
const (
	verdictPass      = "pass"
	verdictFail      = "fail"
	verdictNotJudged = "not judged"
)

// What the memory checks allow. Both are meant to be explained in a
// sentence and loose on purpose: Go's heap grows in steps and goes back
// to the OS gradually, so only a steady climb, or memory that stays up
// once the load is gone, should fail.
const (
	// rssMinLoadSamples is how many samples under load either check
	// needs: halves of fewer say nothing.
	rssMinLoadSamples = 8
	// rssSkipFraction of the samples under load, the first ones, are left
	// out of the plateau check: memory grows while pools and caches fill.
	rssSkipFraction = 0.10
	// rssPlateauGrowth is how much higher than the first half's peak, as a
	// fraction of it, the second half's peak may be and still level off.
	rssPlateauGrowth = 0.10
	// rssReturnFraction: after the load, memory must be back below start
	// plus this fraction of what the load added (peak − start).
	rssReturnFraction = 0.5
	// rssSlack is the least growth either check allows: a few MiB of
	// allocator and runtime noise is no leak.
	rssSlack = 8 << 20
)

// plateauDoc is the "levels off" check: the samples under load, past the
// first tenth, are split into halves in time; memory levels off when the
// second half's peak is at most Limit, the first half's peak plus 10% of
// it or 8 MiB, whichever is more.
type plateauDoc struct {
	Verdict        string `json:"verdict"` // pass, fail or not judged
	FirstHalfPeak  int64  `json:"first_half_peak_bytes,omitempty"`
	SecondHalfPeak int64  `json:"second_half_peak_bytes,omitempty"`
	Limit          int64  `json:"limit_bytes,omitempty"`
	Note           string `json:"note,omitempty"` // why it was not judged
}

// recoveryDoc is the "comes back down" check: the last sample after the
// load must be at most Limit, start plus half of peak − start or 8 MiB,
// whichever is more.
type recoveryDoc struct {
	Verdict string `json:"verdict"` // pass, fail or not judged
	After   int64  `json:"after_bytes,omitempty"`
	Limit   int64  `json:"limit_bytes,omitempty"`
	Note    string `json:"note,omitempty"` // why it was not judged
}

type frontierDoc struct {
	BudgetUS      float64 `json:"budget_us"`
	RateRPS       float64 `json:"rate_rps"`
	P99OverheadUS float64 `json:"p99_overhead_us"`
}

type scorecardDoc struct {
	Rows   []ScoreRow `json:"rows"`
	Passed int        `json:"passed"`
	Failed int        `json:"failed"`
}

// resolution is the width of the bucket of h that holds v: values within
// one bucket are recorded as the same value. It follows hdrhistogram's
// bucket layout: 2^k sub-buckets (enough for the significant figures) per
// power of two above the lowest trackable value.
func resolution(h *hdrhistogram.Histogram, v int64) int64 {
	unit := bits.Len64(uint64(max(h.LowestTrackableValue(), 1))) - 1
	subMag := int(math.Ceil(math.Log2(2 * math.Pow10(int(h.SignificantFigures())))))
	mask := uint64(1)<<subMag - 1
	idx := bits.Len64(uint64(max(v, 0))|mask<<unit) - unit - subMag
	return 1 << (idx + unit)
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func summarize(h *hdrhistogram.Histogram) *histogramDoc {
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	d := &histogramDoc{
		Count:         h.TotalCount(),
		MinUS:         h.Min(),
		MaxUS:         h.Max(),
		MeanUS:        finite(h.Mean()),
		PercentilesUS: make(map[string]int64, len(load.Percentiles)),
	}
	for _, p := range load.Percentiles {
		v := h.ValueAtPercentile(p)
		if p >= 100 {
			v = d.MaxUS
		}
		d.PercentilesUS[percentileLabel(p)] = v
	}
	return d
}

func summarizeRSS(samples []load.RSSSample, concurrency int) *rssDoc {
	if len(samples) == 0 {
		return nil
	}
	var under, after []load.RSSSample
	for _, s := range samples {
		if s.After {
			after = append(after, s)
		} else {
			under = append(under, s)
		}
	}
	base := under
	if len(base) == 0 {
		base = samples // only after-load samples: describe those
	}
	d := &rssDoc{
		Samples:      len(samples),
		Start:        base[0].Bytes,
		End:          base[len(base)-1].Bytes,
		AfterSamples: len(after),
	}
	for _, s := range base {
		if s.Bytes > d.Peak {
			d.Peak, d.PeakAt = s.Bytes, int64(s.At)
		}
	}
	if concurrency > 0 {
		d.PerStream = (d.Peak - d.Start) / int64(concurrency)
	}
	if len(after) > 0 {
		last := after[len(after)-1]
		d.After = last.Bytes
		d.AfterFor = int64(last.At - after[0].At)
	}
	d.LevelsOff = levelsOff(under)
	d.ComesBackDown = comesBackDown(len(under), d.Start, d.Peak, d.After, len(after))
	return d
}

// levelsOff judges whether memory under load stops climbing (plateauDoc).
func levelsOff(under []load.RSSSample) *plateauDoc {
	if len(under) < rssMinLoadSamples {
		return &plateauDoc{Verdict: verdictNotJudged,
			Note: fmt.Sprintf("%d samples under load, %d needed", len(under), rssMinLoadSamples)}
	}
	rest := under[int(float64(len(under))*rssSkipFraction):]
	first, second := rest[:len(rest)/2], rest[len(rest)/2:]
	d := &plateauDoc{FirstHalfPeak: peakBytes(first), SecondHalfPeak: peakBytes(second)}
	d.Limit = d.FirstHalfPeak + max(int64(float64(d.FirstHalfPeak)*rssPlateauGrowth), rssSlack)
	d.Verdict = verdictFail
	if d.SecondHalfPeak <= d.Limit {
		d.Verdict = verdictPass
	}
	return d
}

// comesBackDown judges whether memory falls back once the load is gone
// (recoveryDoc): after is the last of the afterN samples after the load.
func comesBackDown(underN int, start, peak, after int64, afterN int) *recoveryDoc {
	switch {
	case underN < rssMinLoadSamples:
		return &recoveryDoc{Verdict: verdictNotJudged,
			Note: fmt.Sprintf("%d samples under load, %d needed", underN, rssMinLoadSamples)}
	case afterN == 0:
		return &recoveryDoc{Verdict: verdictNotJudged, Note: "no samples after the load (the scenario has no cooldown)"}
	}
	d := &recoveryDoc{After: after}
	d.Limit = start + max(int64(float64(peak-start)*rssReturnFraction), rssSlack)
	d.Verdict = verdictFail
	if d.After <= d.Limit {
		d.Verdict = verdictPass
	}
	return d
}

func peakBytes(samples []load.RSSSample) int64 {
	var p int64
	for _, s := range samples {
		p = max(p, s.Bytes)
	}
	return p
}

// newDocument summarises c, which check has accepted.
func newDocument(c *Comparison) *document {
	d := &document{
		Scenario:    c.Scenario,
		Machine:     c.Machine,
		Command:     c.Command,
		When:        c.When,
		Concurrency: c.Concurrency,
		Percentiles: slices.Clone(load.Percentiles),
	}
	if d.Scenario == "" {
		d.Scenario = c.Results[0].Scenario
	}
	for i, r := range c.Results {
		rc := *r // the copy is what JSON sees; the caller's result is left alone
		rc.Throughput = finite(rc.Throughput)
		t := &targetDoc{
			Name:       targetName(r, i),
			Result:     &rc,
			Latency:    summarize(r.Latency),
			TTFB:       summarize(r.TTFB),
			TTFT:       summarize(r.TTFT),
			InterFrame: summarize(r.InterFrame),
			RSSSummary: summarizeRSS(r.RSS, c.Concurrency),
		}
		d.Targets = append(d.Targets, t)
	}
	base := d.Targets[0]
	d.Baseline = base.Name
	d.Overheads = []*overheadDoc{} // a lone target has none: [] rather than null
	for _, t := range d.Targets[1:] {
		o := &overheadDoc{Target: t.Name, Baseline: base.Name}
		if base.Throughput > 0 {
			o.ThroughputRatio = finite(t.Throughput / base.Throughput)
		}
		for _, m := range metrics {
			b, x := base.metric(m.name), t.metric(m.name)
			if b == nil || x == nil {
				continue
			}
			if o.ResolutionUS == nil {
				o.ResolutionUS = make(map[string]int64, len(metrics))
			}
			o.ResolutionUS[m.name] = max(
				resolution(m.hist(c.Results[0]), max(b.MaxUS, x.MaxUS)),
				resolution(m.hist(t.Result), max(b.MaxUS, x.MaxUS)))
			diff := make(map[string]int64, len(b.PercentilesUS))
			for k, v := range x.PercentilesUS {
				diff[k] = v - b.PercentilesUS[k]
			}
			o.setMetric(m.name, diff)
		}
		d.Overheads = append(d.Overheads, o)
	}
	if len(c.Frontier) > 0 {
		d.Frontier = make(map[string][]*frontierDoc, len(c.Frontier))
		for name, points := range c.Frontier {
			fs := make([]*frontierDoc, 0, len(points))
			for _, p := range points {
				fs = append(fs, &frontierDoc{
					BudgetUS:      micros(p.Budget),
					RateRPS:       finite(p.Rate),
					P99OverheadUS: micros(p.P99Overhead),
				})
			}
			slices.SortStableFunc(fs, func(a, b *frontierDoc) int {
				switch {
				case a.BudgetUS < b.BudgetUS:
					return -1
				case a.BudgetUS > b.BudgetUS:
					return 1
				}
				return 0
			})
			d.Frontier[name] = fs
		}
	}
	if c.Scorecard != nil {
		s := &scorecardDoc{Rows: c.Scorecard}
		for _, r := range c.Scorecard {
			if r.Pass {
				s.Passed++
			} else {
				s.Failed++
			}
		}
		d.Scorecard = s
	}
	return d
}

// WriteJSON writes c as one indented JSON document: every figure of
// WriteText, with each histogram summarised as its count, min, max, mean
// and a map of percentiles (p50, p90, p99, p99.9, max), all in
// microseconds; overheads as the same maps of target minus baseline.
func WriteJSON(w io.Writer, c *Comparison) error {
	if err := check(c); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(newDocument(c)); err != nil {
		return fmt.Errorf("cannot write JSON report: %w", err)
	}
	return nil
}

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

// rssDoc summarises resident memory samples, in bytes.
type rssDoc struct {
	Samples int   `json:"samples"`
	Start   int64 `json:"start_bytes"`
	Peak    int64 `json:"peak_bytes"`
	PeakAt  int64 `json:"peak_at_ns"`
	End     int64 `json:"end_bytes"`
	// PerStream is (peak − start) / concurrency, when concurrency is known.
	PerStream int64 `json:"per_stream_bytes,omitempty"`
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
	d := &rssDoc{
		Samples: len(samples),
		Start:   samples[0].Bytes,
		End:     samples[len(samples)-1].Bytes,
	}
	for _, s := range samples {
		if s.Bytes > d.Peak {
			d.Peak, d.PeakAt = s.Bytes, int64(s.At)
		}
	}
	if concurrency > 0 {
		d.PerStream = (d.Peak - d.Start) / int64(concurrency)
	}
	return d
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

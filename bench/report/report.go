// Package report renders one scenario run against several targets (the
// upstream directly, the gateway, the reference proxy, others) for people
// and for programs: aligned text tables, a JSON document, SVG plots of
// latency percentile curves and of resident memory over time, and one HTML
// page holding them all.
//
// Every figure is in microseconds, as the load harness's histograms hold
// them. The first result is the baseline, and every other target is also
// shown as its overhead over it: target minus baseline at each percentile,
// and its throughput as a ratio of the baseline's. A single result (the
// gateway alone, for a soak) is reported without overheads.
package report

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/edgegw/gateway/bench/load"
)

// Comparison is one scenario run against several targets in one run;
// Results[0] is the baseline (the upstream directly).
type Comparison struct {
	Scenario string
	Machine  string // e.g. "2 vCPU, linux/amd64, go1.26"
	Command  string // the command line that ran it
	When     time.Time
	// Concurrency is how many streams were open at once, when known (closed
	// loop); it turns memory growth into bytes per stream. 0: unknown.
	Concurrency int

	Results []*load.Result

	// Frontier is, per target name, the highest rate each overhead budget
	// allows. May be nil.
	Frontier map[string][]FrontierPoint
	// Scorecard is the conformance checks of the run. May be nil.
	Scorecard []ScoreRow
}

// FrontierPoint is one point of a target's frontier: the highest rate at
// which its p99 overhead over the baseline stayed within Budget.
type FrontierPoint struct {
	Budget      time.Duration
	Rate        float64 // requests per second
	P99Overhead time.Duration
}

// ScoreRow is one conformance check: a case on a wire, what was wanted and
// what was got.
type ScoreRow struct {
	Case string `json:"case"`
	Wire string `json:"wire"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
}

// ErrNoResults is returned for a comparison without results.
var ErrNoResults = errors.New("report: comparison has no results")

// Metric names, as WriteSVG takes them.
const (
	MetricLatency    = "latency"
	MetricTTFB       = "ttfb"
	MetricTTFT       = "ttft"
	MetricInterFrame = "interframe"
	// MetricMemory is the resident memory plot, for runs that sampled it.
	MetricMemory = "memory"
)

// metric is one histogram of a result.
type metric struct {
	name  string // as in JSON and file names
	head  string // table heading
	title string // plot title
	hist  func(*load.Result) *hdrhistogram.Histogram
}

var metrics = []metric{
	{MetricLatency, "LATENCY (to the last byte)", "latency to the last byte",
		func(r *load.Result) *hdrhistogram.Histogram { return r.Latency }},
	{MetricTTFB, "TTFB (to the first byte)", "time to the first byte",
		func(r *load.Result) *hdrhistogram.Histogram { return r.TTFB }},
	{MetricTTFT, "TTFT (to the first token)", "time to the first token",
		func(r *load.Result) *hdrhistogram.Histogram { return r.TTFT }},
	{MetricInterFrame, "INTER-FRAME (every gap between two frames)", "gap between two frames",
		func(r *load.Result) *hdrhistogram.Histogram { return r.InterFrame }},
}

func metricByName(name string) (metric, bool) {
	for _, m := range metrics {
		if m.name == name {
			return m, true
		}
	}
	return metric{}, false
}

// hasData reports whether any result recorded the metric.
func (m metric) hasData(c *Comparison) bool {
	for _, r := range c.Results {
		if h := m.hist(r); h != nil && h.TotalCount() > 0 {
			return true
		}
	}
	return false
}

// percentileLabel names a percentile: p50, p99.9, max.
func percentileLabel(p float64) string {
	if p >= 100 {
		return "max"
	}
	return "p" + strconv.FormatFloat(p, 'f', -1, 64)
}

func check(c *Comparison) error {
	if c == nil || len(c.Results) == 0 {
		return ErrNoResults
	}
	for i, r := range c.Results {
		if r == nil {
			return fmt.Errorf("report: result %d is nil", i)
		}
	}
	return nil
}

// targetName is a result's name in tables and legends.
func targetName(r *load.Result, i int) string {
	if r.Target != "" {
		return r.Target
	}
	return "target " + strconv.Itoa(i)
}

// finite turns NaN and infinities, which JSON cannot carry, into 0.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// WriteAll writes summary.txt, report.json, report.html and latency.svg
// into dir, creating it, plus ttfb.svg, ttft.svg and interframe.svg for the
// metrics some target recorded and memory.svg when some target's memory
// was sampled, and returns the paths written.
func WriteAll(dir string, c *Comparison) (paths []string, err error) {
	if err := check(c); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create report directory: %w", err)
	}
	type file struct {
		name  string
		write func(*bytes.Buffer) error
	}
	files := []file{
		{"summary.txt", func(b *bytes.Buffer) error { return WriteText(b, c) }},
		{"report.json", func(b *bytes.Buffer) error { return WriteJSON(b, c) }},
		{"report.html", func(b *bytes.Buffer) error { return WriteHTML(b, c) }},
	}
	for _, m := range metrics {
		if m.name == MetricLatency || m.hasData(c) {
			files = append(files, file{m.name + ".svg", func(b *bytes.Buffer) error { return WriteSVG(b, c, m.name) }})
		}
	}
	if hasRSS(c) {
		files = append(files, file{MetricMemory + ".svg", func(b *bytes.Buffer) error { return WriteSVG(b, c, MetricMemory) }})
	}
	var buf bytes.Buffer
	for _, f := range files {
		buf.Reset()
		if err := f.write(&buf); err != nil {
			return paths, fmt.Errorf("cannot render %s: %w", f.name, err)
		}
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return paths, fmt.Errorf("cannot write report: %w", err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

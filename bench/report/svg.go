package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The plot's geometry, in SVG user units (pixels at 100%).
const (
	svgWidth     = 960
	plotLeft     = 84
	plotRight    = svgWidth - 36
	plotTop      = 78
	plotBottom   = plotTop + 380
	legendTop    = plotBottom + 66
	legendRow    = 20
	svgFont      = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
	curveSamples = 48 // points per decade of nines
)

// baselineColor draws the baseline; palette the others, in turn
// (Okabe–Ito, distinguishable with the common colour-vision deficiencies).
const baselineColor = "#4d4d4d"

var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255"}

// seriesColor is the colour of result i of n: the baseline's when there
// are others to compare with it, else the palette's in turn.
func seriesColor(i, n int) string {
	switch {
	case n == 1:
		return palette[0]
	case i == 0:
		return baselineColor
	}
	return palette[(i-1)%len(palette)]
}

// series is one target's curve.
type series struct {
	name  string
	color string
	h     *hdrhistogram.Histogram // nil when it recorded nothing
	pts   []point                 // x in nines, y in µs
}

type point struct{ x, y float64 }

// WriteSVG writes a self-contained SVG plot of one metric's percentile
// curves, one line per target overlaid: the x axis is the percentile on a
// log scale of nines (x = -log10(1 - p): 0, 90, 99, 99.9, 99.99 ... and the
// max), the y axis the value, linear from zero. metric is one of "latency",
// "ttfb", "ttft" and "interframe". Targets that recorded nothing are in the
// legend as "no data"; a plot where none did says so. metric "memory"
// plots instead the resident memory samples over time (MetricMemory).
func WriteSVG(w io.Writer, c *Comparison, metric string) error {
	if err := check(c); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	if metric == MetricMemory {
		renderMemorySVG(&b, c)
	} else {
		m, ok := metricByName(metric)
		if !ok {
			return fmt.Errorf("report: unknown metric %q (want latency, ttfb, ttft, interframe or memory)", metric)
		}
		renderSVG(&b, c, m)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("cannot write SVG: %w", err)
	}
	return nil
}

// renderSVG writes the <svg> element, with no XML declaration, so it can
// also be inlined in HTML.
func renderSVG(b *strings.Builder, c *Comparison, m metric) {
	all := make([]*series, len(c.Results))
	var maxCount int64
	yMin, yMax := math.Inf(1), 0.0
	for i, r := range c.Results {
		s := &series{name: targetName(r, i), color: seriesColor(i, len(c.Results))}
		if h := m.hist(r); h != nil && h.TotalCount() > 0 {
			s.h = h
			maxCount = max(maxCount, h.TotalCount())
			yMin = min(yMin, float64(h.Min()))
			yMax = max(yMax, float64(h.Max()))
		}
		all[i] = s
	}
	// Ticks at 0, 90, 99, ... as far as the largest histogram resolves
	// (at least 99.99, at most 99.9999), and the max one decade further.
	nines := 4
	if maxCount > 0 {
		nines = min(max(int(math.Floor(math.Log10(float64(maxCount)))), 4), 6)
	}
	xMax := float64(nines + 1)
	for _, s := range all {
		if s.h != nil {
			s.pts = curve(s.h, nines)
		}
	}
	yBottom, yTop, yStep := niceRange(yMin, yMax)

	height := legendTop + legendRow*len(all) + 12
	xOf := func(x float64) float64 { return plotLeft + x/xMax*(plotRight-plotLeft) }
	yOf := func(y float64) float64 { return plotBottom - (y-yBottom)/(yTop-yBottom)*(plotBottom-plotTop) }

	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height, svgFont)
	fmt.Fprintf(b, `<title>%s</title>`+"\n", esc(c.scenarioName()+": "+m.title))
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, height)

	// Title and subtitle.
	fmt.Fprintf(b, `<text x="%d" y="30" font-size="18" font-weight="600" fill="#1a1a1a">%s</text>`+"\n",
		plotLeft, esc(c.scenarioName()+" · "+m.title))
	var sub []string
	if len(all) == 1 {
		sub = append(sub, "percentile curve of "+all[0].name)
	} else {
		sub = append(sub, "percentile curves of "+strconv.Itoa(len(all))+" targets, baseline "+all[0].name)
	}
	if c.Machine != "" {
		sub = append(sub, c.Machine)
	}
	if !c.When.IsZero() {
		sub = append(sub, c.When.UTC().Format("2006-01-02 15:04 MST"))
	}
	fmt.Fprintf(b, `<text x="%d" y="52" fill="#595959">%s</text>`+"\n", plotLeft, esc(strings.Join(sub, " · ")))

	// Grid and axes.
	b.WriteString(`<g stroke="#e3e3e3" stroke-width="1">` + "\n")
	for _, y := range yTicks(yBottom, yTop, yStep, 1) {
		fmt.Fprintf(b, `<line x1="%d" y1="%s" x2="%d" y2="%s"/>`+"\n", plotLeft, f1(yOf(y)), plotRight, f1(yOf(y)))
	}
	for x := 1; x <= nines+1; x++ {
		fmt.Fprintf(b, `<line x1="%s" y1="%d" x2="%s" y2="%d"/>`+"\n", f1(xOf(float64(x))), plotTop, f1(xOf(float64(x))), plotBottom)
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<path d="M%d %dV%dH%d" fill="none" stroke="#8c8c8c" stroke-width="1"/>`+"\n",
		plotLeft, plotTop, plotBottom, plotRight)

	// Y tick labels.
	b.WriteString(`<g fill="#404040" text-anchor="end">` + "\n")
	for _, y := range yTicks(yBottom, yTop, yStep, 0) {
		fmt.Fprintf(b, `<text x="%d" y="%s">%s</text>`+"\n", plotLeft-8, f1(yOf(y)+4), esc(tickLabel(y, yTop, yStep)))
	}
	b.WriteString("</g>\n")

	// X tick labels.
	b.WriteString(`<g fill="#404040" text-anchor="middle">` + "\n")
	for x := 0; x <= nines+1; x++ {
		fmt.Fprintf(b, `<text x="%s" y="%d">%s</text>`+"\n", f1(xOf(float64(x))), plotBottom+20, esc(ninesLabel(x, nines)))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="#595959" text-anchor="middle">percentile (each step one more nine)</text>`+"\n",
		(plotLeft+plotRight)/2, plotBottom+42)

	// Curves: the baseline last, so the others' colours never hide it.
	if maxCount == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="16" fill="#8c8c8c" text-anchor="middle">no data recorded</text>`+"\n",
			(plotLeft+plotRight)/2, (plotTop+plotBottom)/2)
	}
	order := append(all[1:len(all):len(all)], all[0])
	for _, s := range order {
		if s.h == nil {
			continue
		}
		fmt.Fprintf(b, `<polyline class="series" data-target="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" stroke-linecap="round"`,
			esc(s.name), s.color)
		if s == all[0] && len(all) > 1 {
			b.WriteString(` stroke-dasharray="7 4"`)
		}
		b.WriteString(` points="`)
		for i, p := range s.pts {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(f1(xOf(p.x)))
			b.WriteByte(',')
			b.WriteString(f1(yOf(p.y)))
		}
		fmt.Fprintf(b, `"><title>%s</title></polyline>`+"\n", esc(s.name))
	}

	writeLegend(b, all)
	b.WriteString("</svg>\n")
}

// yTicks lists the values on a y axis from yBottom up to yTop in steps of
// yStep, starting at step first (0 includes yBottom itself).
func yTicks(yBottom, yTop, yStep float64, first int) []float64 {
	var ts []float64
	for i := first; ; i++ {
		y := yBottom + float64(i)*yStep
		if y > yTop+yStep/1e6 {
			return ts
		}
		ts = append(ts, y)
	}
}

func writeLegend(b *strings.Builder, all []*series) {
	rows := make([]legendLine, len(all))
	for i, s := range all {
		rows[i] = legendLine{name: s.name, color: s.color,
			cells: append([]string{s.name}, legendStats(s.h, all[0].h, i == 0, len(all) > 1)...)}
		if i == 0 && len(all) > 1 {
			rows[i].dash = ` stroke-dasharray="7 4"`
		}
		if s.h == nil {
			rows[i].color, rows[i].dash = "#b3b3b3", ` stroke-dasharray="2 3"`
		}
	}
	b.WriteString(`<g class="legend">` + "\n")
	writeLegendRows(b, rows)
	b.WriteString("</g>\n")
}

// legendLine is one line of a plot's legend: a stroke sample and its cells,
// the first of them the target's name.
type legendLine struct {
	name, color, dash string
	cells             []string
}

// writeLegendRows writes rows one under the other, their cells in columns.
func writeLegendRows(b *strings.Builder, rows []legendLine) {
	const charWidth, gap = 7.0, 20.0 // at font-size 12
	var widths []int
	for _, r := range rows {
		for j, c := range r.cells {
			if j == len(widths) {
				widths = append(widths, 0)
			}
			widths[j] = max(widths[j], utf8.RuneCountInString(c))
		}
	}
	for i, r := range rows {
		y := legendTop + i*legendRow
		fmt.Fprintf(b, `<g class="legend-entry" data-target="%s">`, esc(r.name))
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"%s/>`,
			plotLeft, y-4, plotLeft+30, y-4, r.color, r.dash)
		x := float64(plotLeft + 40)
		for j, c := range r.cells {
			if j == 0 {
				fmt.Fprintf(b, `<text x="%s" y="%d" font-weight="600" fill="#1a1a1a">%s</text>`, f1(x), y, esc(c))
			} else if c != "" {
				fmt.Fprintf(b, `<text x="%s" y="%d" fill="#404040">%s</text>`, f1(x), y, esc(c))
			}
			x += float64(widths[j])*charWidth + gap
		}
		b.WriteString("</g>\n")
	}
}

// legendStats is a target's figures beside its name, one per column: a few
// percentiles, the count, and, when there are others to compare, for all
// but the baseline its p99 overhead.
func legendStats(h, base *hdrhistogram.Histogram, isBase, compared bool) []string {
	if h == nil {
		return []string{"no data"}
	}
	p50, p99 := h.ValueAtPercentile(50), h.ValueAtPercentile(99)
	s := []string{
		"p50 " + formatMicros(float64(p50)),
		"p99 " + formatMicros(float64(p99)),
		"max " + formatMicros(float64(h.Max())),
		"n=" + strconv.FormatInt(h.TotalCount(), 10),
	}
	switch {
	case !compared:
	case isBase:
		s = append(s, "baseline")
	case base != nil:
		s = append(s, "p99 overhead "+formatDelta(float64(p99-base.ValueAtPercentile(99))))
	}
	return s
}

// curve samples h along the nines scale up to nines, then the max one
// decade further; runs of equal values keep only their ends.
func curve(h *hdrhistogram.Histogram, nines int) []point {
	lo := float64(h.Min())
	n := nines * curveSamples
	pts := make([]point, 0, n+2)
	for i := 0; i <= n; i++ {
		x := float64(i) / curveSamples
		p := 100 * (1 - math.Pow(10, -x))
		v := max(float64(h.ValueAtPercentile(p)), lo)
		pts = append(pts, point{x, v})
	}
	pts = append(pts, point{float64(nines + 1), float64(h.Max())})
	// Drop the middle of horizontal runs.
	out := pts[:0]
	for i, p := range pts {
		if i > 0 && i < len(pts)-1 && pts[i-1].y == p.y && pts[i+1].y == p.y {
			continue
		}
		out = append(out, p)
	}
	return out
}

// ninesLabel names the tick at x nines: 0%, 90%, 99%, 99.9%, ..., max.
func ninesLabel(x, nines int) string {
	switch {
	case x == 0:
		return "0%"
	case x > nines:
		return "max"
	}
	return strconv.FormatFloat(100*(1-math.Pow(10, -float64(x))), 'f', max(x-2, 0), 64) + "%"
}

// niceRange returns a linear axis that holds lo to hi, and its tick step:
// the smallest of 1, 2 or 5 times a power of ten (at least a microsecond,
// the histograms' unit) that needs at most eight steps. The axis starts
// at zero unless lo is more than half of hi; then it starts at the step
// below lo, so curves of long requests that differ by a few milliseconds
// are not flattened against the top.
func niceRange(lo, hi float64) (bottom, top, step float64) {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		return 0, 1000, 200 // an empty plot spans a millisecond
	}
	if !(lo > hi/2) || math.IsInf(lo, 0) {
		lo = 0
	}
	const maxSteps = 8
	span := max(hi-lo, 1)
	mag := math.Pow(10, math.Floor(math.Log10(span/maxSteps)))
	for _, f := range []float64{1, 2, 5, 10, 20} {
		step = max(f*mag, 1)
		bottom = math.Floor(lo/step) * step
		top = math.Ceil(hi/step-1e-9) * step
		if top <= bottom {
			top = bottom + step
		}
		if (top-bottom)/step <= maxSteps+1e-9 {
			break
		}
	}
	return bottom, top, step
}

// tickLabel writes an axis value in the unit the axis top calls for, with
// as many decimals as the step needs.
func tickLabel(v, top, step float64) string {
	if v == 0 {
		return "0"
	}
	unit, div := "µs", 1.0
	switch {
	case top >= 1e6:
		unit, div = "s", 1e6
	case top >= 1e3:
		unit, div = "ms", 1e3
	}
	dec := 0
	if s := step / div; s < 1 {
		dec = min(int(math.Ceil(-math.Log10(s)-1e-9)), 3)
	}
	return strconv.FormatFloat(v/div, 'f', dec, 64) + unit
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

func esc(s string) string { return xmlEscaper.Replace(s) }

// scenarioName is the scenario's name, from the comparison or its first
// result.
func (c *Comparison) scenarioName() string {
	if c.Scenario != "" {
		return c.Scenario
	}
	if len(c.Results) > 0 && c.Results[0] != nil && c.Results[0].Scenario != "" {
		return c.Results[0].Scenario
	}
	return "scenario"
}

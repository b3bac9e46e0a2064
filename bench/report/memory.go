package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/edgegw/gateway/bench/load"
)

// afterShade fills the part of the memory plot after the load.
const afterShade = "#e8eef5"

// hasRSS reports whether any result sampled resident memory.
func hasRSS(c *Comparison) bool {
	for _, r := range c.Results {
		if len(r.RSS) > 0 {
			return true
		}
	}
	return false
}

// renderMemorySVG writes the <svg> element of the resident memory plot:
// one line per target that sampled memory, over the time since the run
// started, the time after the load shaded. Targets are coloured as in the
// percentile plots (seriesColor).
func renderMemorySVG(b *strings.Builder, c *Comparison) {
	type line struct {
		name, color string
		samples     []load.RSSSample
		doc         *rssDoc
	}
	var lines []line
	var tMax time.Duration
	afterFrom := time.Duration(-1) // the first sample after the load, if any
	yMin, yMax := math.Inf(1), 0.0
	for i, r := range c.Results {
		if len(r.RSS) == 0 {
			continue
		}
		lines = append(lines, line{targetName(r, i), seriesColor(i, len(c.Results)), r.RSS, summarizeRSS(r.RSS, c.Concurrency)})
		for _, s := range r.RSS {
			tMax = max(tMax, s.At)
			yMin = min(yMin, mib(s.Bytes))
			yMax = max(yMax, mib(s.Bytes))
			if s.After && (afterFrom < 0 || s.At < afterFrom) {
				afterFrom = s.At
			}
		}
	}

	// Time in minutes from ten minutes on, else in seconds; memory in MiB.
	unit, perUnit := "s", float64(time.Second)
	if tMax >= 10*time.Minute {
		unit, perUnit = "min", float64(time.Minute)
	}
	xUnits := func(d time.Duration) float64 { return float64(d) / perUnit }
	_, xTop, xStep := niceRange(0, max(xUnits(tMax), 1))
	yBottom, yTop, yStep := niceRange(yMin, yMax)

	rows := len(lines)
	if afterFrom >= 0 {
		rows++ // the shading's key
	}
	height := legendTop + legendRow*max(rows, 1) + 12
	xOf := func(d time.Duration) float64 { return plotLeft + xUnits(d)/xTop*(plotRight-plotLeft) }
	yOf := func(v float64) float64 { return plotBottom - (v-yBottom)/(yTop-yBottom)*(plotBottom-plotTop) }

	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height, svgFont)
	fmt.Fprintf(b, `<title>%s</title>`+"\n", esc(c.scenarioName()+": resident memory"))
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, height)
	fmt.Fprintf(b, `<text x="%d" y="30" font-size="18" font-weight="600" fill="#1a1a1a">%s</text>`+"\n",
		plotLeft, esc(c.scenarioName()+" · resident memory"))
	sub := []string{"resident set over time"}
	if afterFrom >= 0 {
		sub[0] += ", shaded after the load"
	}
	if c.Machine != "" {
		sub = append(sub, c.Machine)
	}
	if !c.When.IsZero() {
		sub = append(sub, c.When.UTC().Format("2006-01-02 15:04 MST"))
	}
	fmt.Fprintf(b, `<text x="%d" y="52" fill="#595959">%s</text>`+"\n", plotLeft, esc(strings.Join(sub, " · ")))

	// The time after the load, behind everything else.
	if afterFrom >= 0 {
		x := xOf(afterFrom)
		fmt.Fprintf(b, `<rect class="after-load" x="%s" y="%d" width="%s" height="%d" fill="%s"/>`+"\n",
			f1(x), plotTop, f1(max(xOf(tMax)-x, 0)), plotBottom-plotTop, afterShade)
		fmt.Fprintf(b, `<text x="%s" y="%d" fill="#595959">after the load</text>`+"\n", f1(x+6), plotBottom-8)
	}

	// Grid and axes.
	b.WriteString(`<g stroke="#e3e3e3" stroke-width="1">` + "\n")
	for _, y := range yTicks(yBottom, yTop, yStep, 1) {
		fmt.Fprintf(b, `<line x1="%d" y1="%s" x2="%d" y2="%s"/>`+"\n", plotLeft, f1(yOf(y)), plotRight, f1(yOf(y)))
	}
	for i := 1; ; i++ {
		x := float64(i) * xStep
		if x > xTop+xStep/1e6 {
			break
		}
		px := plotLeft + x/xTop*(plotRight-plotLeft)
		fmt.Fprintf(b, `<line x1="%s" y1="%d" x2="%s" y2="%d"/>`+"\n", f1(px), plotTop, f1(px), plotBottom)
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<path d="M%d %dV%dH%d" fill="none" stroke="#8c8c8c" stroke-width="1"/>`+"\n",
		plotLeft, plotTop, plotBottom, plotRight)

	b.WriteString(`<g fill="#404040" text-anchor="end">` + "\n")
	for _, y := range yTicks(yBottom, yTop, yStep, 0) {
		fmt.Fprintf(b, `<text x="%d" y="%s">%s</text>`+"\n", plotLeft-8, f1(yOf(y)+4), esc(unitLabel(y, yStep, "MiB")))
	}
	b.WriteString("</g>\n")
	b.WriteString(`<g fill="#404040" text-anchor="middle">` + "\n")
	for i := 0; ; i++ {
		x := float64(i) * xStep
		if x > xTop+xStep/1e6 {
			break
		}
		px := plotLeft + x/xTop*(plotRight-plotLeft)
		fmt.Fprintf(b, `<text x="%s" y="%d">%s</text>`+"\n", f1(px), plotBottom+20, esc(unitLabel(x, xStep, unit)))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="#595959" text-anchor="middle">time since the run started</text>`+"\n",
		(plotLeft+plotRight)/2, plotBottom+42)

	if len(lines) == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="16" fill="#8c8c8c" text-anchor="middle">no memory sampled</text>`+"\n",
			(plotLeft+plotRight)/2, (plotTop+plotBottom)/2)
	}
	for _, l := range lines {
		fmt.Fprintf(b, `<polyline class="series" data-target="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" stroke-linecap="round" points="`,
			esc(l.name), l.color)
		for i, s := range l.samples {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(f1(xOf(s.At)))
			b.WriteByte(',')
			b.WriteString(f1(yOf(mib(s.Bytes))))
		}
		fmt.Fprintf(b, `"><title>%s</title></polyline>`+"\n", esc(l.name))
	}

	// Legend: per target its figures and verdicts, then the shading.
	entries := make([]legendLine, len(lines))
	for i, l := range lines {
		d := l.doc
		cells := []string{l.name, "start " + formatBytes(d.Start), "peak " + formatBytes(d.Peak)}
		if d.AfterSamples > 0 {
			cells = append(cells, "after "+formatBytes(d.After))
		}
		cells = append(cells, "levels off: "+d.LevelsOff.Verdict, "comes back down: "+d.ComesBackDown.Verdict)
		entries[i] = legendLine{name: l.name, color: l.color, cells: cells}
	}
	b.WriteString(`<g class="legend">` + "\n")
	writeLegendRows(b, entries)
	if afterFrom >= 0 {
		y := legendTop + len(lines)*legendRow
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="30" height="12" fill="%s" stroke="#c4ceda"/>`, plotLeft, y-10, afterShade)
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#404040">after the load: sampled with nothing sent</text>`+"\n", plotLeft+40, y)
	}
	b.WriteString("</g>\n")
	b.WriteString("</svg>\n")
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// unitLabel writes an axis value with its unit and as many decimals as
// the step needs.
func unitLabel(v, step float64, unit string) string {
	if v == 0 {
		return "0"
	}
	dec := 0
	if step < 1 {
		dec = min(int(math.Ceil(-math.Log10(step)-1e-9)), 3)
	}
	return strconv.FormatFloat(v, 'f', dec, 64) + " " + unit
}

package report

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgegw/gateway/bench/load"
)

// maxViolationsShown bounds the frame violations printed per target, and
// maxViolationLen the characters of each.
const (
	maxViolationsShown = 3
	maxViolationLen    = 400
)

// WriteText writes c as aligned text tables: per target its requests,
// completions, errors (by code and status) and throughput; latency, time to
// first byte, time to first token and inter-frame gaps at p50, p90, p99,
// p99.9 and max; every other target's overhead over the baseline at each
// percentile and its throughput ratio; the CPU time of the processes
// measured beside each target, per 1,000 requests and frames, with their
// resident memory; frame violations and the first few of them; the
// frontier; the scorecard; and resident memory over time.
func WriteText(w io.Writer, c *Comparison) error {
	if err := check(c); err != nil {
		return err
	}
	d := newDocument(c)
	var b strings.Builder
	writeHeader(&b, d)
	writeRequests(&b, d)
	for _, m := range metrics {
		writeMetric(&b, d, m)
	}
	writeOverhead(&b, d)
	writeCPU(&b, d)
	writeViolations(&b, d)
	writeFrontier(&b, d)
	writeScorecard(&b, d)
	writeRSS(&b, d)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("cannot write text report: %w", err)
	}
	return nil
}

func writeHeader(b *strings.Builder, d *document) {
	var t table
	t.add("scenario", d.Scenario)
	if d.Machine != "" {
		t.add("machine", d.Machine)
	}
	if d.Command != "" {
		t.add("command", d.Command)
	}
	if !d.When.IsZero() {
		t.add("when", d.When.UTC().Format("2006-01-02 15:04:05 MST"))
	}
	if d.Concurrency > 0 {
		t.add("streams", strconv.Itoa(d.Concurrency))
	}
	if len(d.Targets) > 1 {
		t.add("baseline", d.Baseline)
	}
	// Left-aligned values: write by hand rather than as a right-aligned table.
	for _, r := range t.rows {
		fmt.Fprintf(b, "%-9s %s\n", r[0], r[1])
	}
}

func section(b *strings.Builder, title string) {
	b.WriteString("\n")
	b.WriteString(title)
	b.WriteString("\n")
}

func writeRequests(b *strings.Builder, d *document) {
	section(b, "REQUESTS")
	var t table
	t.add("target", "requests", "completed", "errors", "throughput", "elapsed", "frames", "bytes", "conns")
	for _, x := range d.Targets {
		t.add(x.Name,
			strconv.FormatInt(x.Requests, 10),
			strconv.FormatInt(x.Completed, 10),
			strconv.FormatInt(x.Errors, 10),
			formatRate(x.Throughput)+" rps",
			formatMicros(float64(x.Elapsed/time.Microsecond)),
			strconv.FormatInt(x.Frames, 10),
			formatBytes(x.Bytes),
			strconv.FormatInt(x.Connections, 10))
	}
	t.write(b, "")

	var e table
	for _, x := range d.Targets {
		if x.Errors == 0 && len(x.ByCode) == 0 && !hasNon2xx(x.ByStatus) {
			continue
		}
		var parts []string
		if len(x.ByCode) > 0 {
			parts = append(parts, "by code: "+countsByCode(x.ByCode))
		}
		if len(x.ByStatus) > 0 {
			parts = append(parts, "by status: "+countsByStatus(x.ByStatus))
		}
		if len(parts) == 0 {
			parts = append(parts, "transport or stream errors only")
		}
		e.add(x.Name, strconv.FormatInt(x.Errors, 10)+" errors", strings.Join(parts, "; "))
	}
	if len(e.rows) > 0 {
		section(b, "ERRORS")
		for _, r := range e.rows {
			fmt.Fprintf(b, "%-*s  %s  %s\n", nameWidth(d), r[0], r[1], r[2])
		}
	}
}

func nameWidth(d *document) int {
	w := len("target")
	for _, x := range d.Targets {
		w = max(w, len(x.Name))
	}
	return w
}

func hasNon2xx(m map[int]int64) bool {
	for s := range m {
		if s < 200 || s > 299 {
			return true
		}
	}
	return false
}

// countsByCode lists codes by count, most frequent first.
func countsByCode(m map[string]int64) string {
	codes := slices.Collect(maps.Keys(m))
	slices.SortFunc(codes, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(codes))
	for i, k := range codes {
		parts[i] = k + " " + strconv.FormatInt(m[k], 10)
	}
	return strings.Join(parts, ", ")
}

// countsByStatus lists statuses in order.
func countsByStatus(m map[int]int64) string {
	statuses := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(statuses))
	for i, s := range statuses {
		name := strconv.Itoa(s)
		if s == 0 {
			name = "none"
		}
		parts[i] = name + " " + strconv.FormatInt(m[s], 10)
	}
	return strings.Join(parts, ", ")
}

func percentileHeads(first ...string) []string {
	heads := slices.Clone(first)
	for _, p := range load.Percentiles {
		heads = append(heads, percentileLabel(p))
	}
	return heads
}

func writeMetric(b *strings.Builder, d *document, m metric) {
	recorded := false
	for _, x := range d.Targets {
		recorded = recorded || x.metric(m.name) != nil
	}
	if !recorded {
		return
	}
	section(b, m.head)
	var t table
	t.add(append(percentileHeads("target", "count"), "mean")...)
	for _, x := range d.Targets {
		h := x.metric(m.name)
		if h == nil {
			row := []string{x.Name, "0"}
			for range load.Percentiles {
				row = append(row, "-")
			}
			t.add(append(row, "-")...)
			continue
		}
		row := []string{x.Name, strconv.FormatInt(h.Count, 10)}
		for _, p := range load.Percentiles {
			row = append(row, formatMicros(float64(h.PercentilesUS[percentileLabel(p)])))
		}
		t.add(append(row, formatMicros(h.MeanUS))...)
	}
	t.write(b, "")
}

func writeOverhead(b *strings.Builder, d *document) {
	if len(d.Overheads) == 0 {
		return
	}
	section(b, fmt.Sprintf("OVERHEAD vs %s (target − %s, at each percentile)", d.Baseline, d.Baseline))
	t := table{left: 2}
	t.add(append(percentileHeads("target", "metric"), "resolution")...)
	for _, o := range d.Overheads {
		for _, m := range metrics {
			diff := o.metric(m.name)
			if diff == nil {
				continue
			}
			row := []string{o.Target, m.name}
			for _, p := range load.Percentiles {
				row = append(row, formatDelta(float64(diff[percentileLabel(p)])))
			}
			t.add(append(row, "±"+formatMicros(float64(o.ResolutionUS[m.name])))...)
		}
	}
	if len(t.rows) > 1 {
		t.write(b, "")
		b.WriteString("resolution: the histograms' bucket width at the larger max; smaller differences are not measured\n")
	} else {
		b.WriteString("no latency recorded on both sides\n")
	}

	section(b, fmt.Sprintf("THROUGHPUT vs %s (target / %s)", d.Baseline, d.Baseline))
	var r table
	base, measured := cpuPerRequest(d.Targets[0])
	head := []string{"target", "throughput", "ratio"}
	first := []string{d.Targets[0].Name, formatRate(d.Targets[0].Throughput) + " rps", "baseline"}
	if measured {
		head, first = append(head, "cpu ratio"), append(first, "baseline")
	}
	r.add(head...)
	r.add(first...)
	for i, o := range d.Overheads {
		ratio := "-"
		if d.Targets[0].Throughput > 0 {
			ratio = strconv.FormatFloat(o.ThroughputRatio, 'f', 3, 64)
		}
		row := []string{o.Target, formatRate(d.Targets[i+1].Throughput) + " rps", ratio}
		if measured {
			cpu := "-"
			if own, ok := cpuPerRequest(d.Targets[i+1]); ok {
				cpu = strconv.FormatFloat(base/own, 'f', 3, 64)
			}
			row = append(row, cpu)
		}
		r.add(row...)
	}
	r.write(b, "")
	if measured {
		b.WriteString("cpu ratio: the baseline's CPU per request over the target's, every measured process summed " +
			"(the \"all\" rows below): the throughput ratio a run bound by the machine's CPU shows, " +
			"when the targets, the simulator, the load generator and the database share its cores\n")
	}
}

func writeViolations(b *strings.Builder, d *document) {
	section(b, "FRAME VIOLATIONS")
	none := true
	for _, x := range d.Targets {
		if x.FrameViolations == 0 {
			continue
		}
		none = false
		noun := "streams"
		if x.FrameViolations == 1 {
			noun = "stream"
		}
		fmt.Fprintf(b, "%s: %d %s broke the wire's frame grammar\n", x.Name, x.FrameViolations, noun)
		for i, v := range x.FirstViolations {
			if i == maxViolationsShown {
				fmt.Fprintf(b, "  (%d more kept in report.json)\n", len(x.FirstViolations)-i)
				break
			}
			fmt.Fprintf(b, "  %d. %s\n", i+1, oneLine(v, maxViolationLen))
		}
	}
	if none {
		b.WriteString("none\n")
	}
}

// oneLine shows s on one line, newlines escaped, cut to at most n runes.
func oneLine(s string, n int) string {
	s = strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func writeFrontier(b *strings.Builder, d *document) {
	if len(d.Frontier) == 0 {
		return
	}
	section(b, "FRONTIER (highest rate whose p99 overhead stays within the budget)")
	var t table
	t.add("target", "budget", "rate", "p99 overhead")
	for _, name := range frontierOrder(d) {
		for _, p := range d.Frontier[name] {
			t.add(name, formatMicros(p.BudgetUS), formatRate(p.RateRPS)+" rps", formatDelta(p.P99OverheadUS))
		}
	}
	t.write(b, "")
}

// frontierOrder is the frontier's targets in result order, then any
// others by name.
func frontierOrder(d *document) []string {
	var names []string
	seen := map[string]bool{}
	for _, x := range d.Targets {
		if _, ok := d.Frontier[x.Name]; ok && !seen[x.Name] {
			names = append(names, x.Name)
			seen[x.Name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.Frontier)) {
		if !seen[name] {
			names = append(names, name)
		}
	}
	return names
}

func writeScorecard(b *strings.Builder, d *document) {
	if d.Scorecard == nil {
		return
	}
	section(b, "SCORECARD")
	if len(d.Scorecard.Rows) > 0 {
		t := table{left: 5}
		t.add("", "case", "wire", "want", "got")
		for _, r := range d.Scorecard.Rows {
			verdict := "PASS"
			if !r.Pass {
				verdict = "FAIL"
			}
			t.add(verdict, r.Case, r.Wire, r.Want, r.Got)
		}
		t.write(b, "")
	}
	fmt.Fprintf(b, "%d passed, %d failed\n", d.Scorecard.Passed, d.Scorecard.Failed)
}

func writeRSS(b *strings.Builder, d *document) {
	withAfter := false
	for _, x := range d.Targets {
		withAfter = withAfter || (x.RSSSummary != nil && x.RSSSummary.AfterSamples > 0)
	}
	var t, v table
	heads := []string{"target", "samples", "start", "peak", "peak at", "end", "growth", "per stream"}
	if withAfter {
		heads = append(heads, "after", "after for")
	}
	t.add(heads...)
	v = table{left: 4}
	v.add("target", "check", "verdict", "detail")
	for _, x := range d.Targets {
		r := x.RSSSummary
		if r == nil {
			continue
		}
		perStream := "-"
		if d.Concurrency > 0 {
			perStream = formatBytes(r.PerStream)
		}
		growth := formatBytes(r.End - r.Start)
		if r.End >= r.Start {
			growth = "+" + growth
		}
		row := []string{x.Name, strconv.Itoa(r.Samples), formatBytes(r.Start), formatBytes(r.Peak),
			formatMicros(float64(time.Duration(r.PeakAt) / time.Microsecond)),
			formatBytes(r.End), growth, perStream}
		if withAfter {
			if r.AfterSamples > 0 {
				row = append(row, formatBytes(r.After), formatMicros(float64(time.Duration(r.AfterFor)/time.Microsecond)))
			} else {
				row = append(row, "-", "-")
			}
		}
		t.add(row...)
		if p := r.LevelsOff; p != nil {
			detail := p.Note
			if p.Verdict != verdictNotJudged {
				detail = fmt.Sprintf("second-half peak %s, first-half peak %s, limit %s",
					formatBytes(p.SecondHalfPeak), formatBytes(p.FirstHalfPeak), formatBytes(p.Limit))
			}
			v.add(x.Name, "levels off", verdictLabel(p.Verdict), detail)
		}
		if c := r.ComesBackDown; c != nil {
			detail := c.Note
			if c.Verdict != verdictNotJudged {
				detail = fmt.Sprintf("%s %s after the load, start %s, peak %s, limit %s",
					formatBytes(c.After), formatMicros(float64(time.Duration(r.AfterFor)/time.Microsecond)),
					formatBytes(r.Start), formatBytes(r.Peak), formatBytes(c.Limit))
			}
			v.add(x.Name, "comes back down", verdictLabel(c.Verdict), detail)
		}
	}
	if len(t.rows) == 1 {
		return
	}
	title := "MEMORY (resident set; start, peak and end under load)"
	if d.Concurrency > 0 {
		title = fmt.Sprintf("MEMORY (resident set; start, peak and end under load; per stream = (peak − start) / %d streams)", d.Concurrency)
	}
	section(b, title)
	t.write(b, "")

	section(b, "MEMORY VERDICTS")
	v.write(b, "")
	fmt.Fprintf(b, "levels off: past the first %s of the samples under load, the second half's peak is at most the first half's plus %s (at least %s)\n",
		percent(rssSkipFraction), percent(rssPlateauGrowth), formatBytes(rssSlack))
	fmt.Fprintf(b, "comes back down: the last sample after the load is at most start plus %s of (peak − start) (at least %s)\n",
		percent(rssReturnFraction), formatBytes(rssSlack))
	fmt.Fprintf(b, "either needs %d samples under load\n", rssMinLoadSamples)
}

// verdictLabel writes a verdict as the summary shows it.
func verdictLabel(v string) string {
	switch v {
	case verdictPass:
		return "PASS"
	case verdictFail:
		return "FAIL"
	}
	return v
}

func percent(f float64) string { return strconv.FormatFloat(100*f, 'f', -1, 64) + "%" }

// cpuHeads are the columns of the CPU table, in text and in HTML.
var cpuHeads = []string{"target", "process", "pid", "cpu", "cpu/1k req", "cpu/1k frames", "rss at end", "procs"}

// cpuRows returns the rows of the CPU table, one per process measured
// beside a target (its own first, marked *), and a row of dashes for a
// target without any; nil when no target has any.
func cpuRows(d *document) [][]string {
	some := false
	for _, x := range d.Targets {
		some = some || len(x.CPU) > 0
	}
	if !some {
		return nil
	}
	var rows [][]string
	for _, x := range d.Targets {
		if len(x.CPU) == 0 {
			rows = append(rows, []string{x.Name, "-", "-", "-", "-", "-", "-", "-"})
			continue
		}
		for i, c := range x.CPU {
			name := ""
			if i == 0 {
				name = x.Name
			}
			proc := c.Name
			if c.Own {
				proc += "*"
			}
			rows = append(rows, procRow(x, name, proc, strconv.Itoa(c.PID), c))
		}
		if len(x.CPU) > 1 {
			// What the machine spent on the target's window, everything
			// measured included.
			rows = append(rows, procRow(x, "", "all", "", sumCPU(x)))
		}
	}
	return rows
}

// procRow is one row of the CPU table: c's figures for target x, a dash
// for a per-request or per-frame figure x has nothing to divide by.
func procRow(x *targetDoc, name, proc, pid string, c load.ProcCost) []string {
	perReq, perFrames := "-", "-"
	if x.Completed > 0 {
		perReq = formatMicros(c.PerKRequests * 1e6)
	}
	if x.Frames > 0 {
		perFrames = formatMicros(c.PerKFrames * 1e6)
	}
	return []string{name, proc, pid, formatMicros(micros(c.CPU)), perReq, perFrames, formatBytes(c.RSS), strconv.Itoa(c.Processes)}
}

// sumCPU adds up the processes measured with x.
func sumCPU(x *targetDoc) load.ProcCost {
	var s load.ProcCost
	for _, c := range x.CPU {
		s.CPU += c.CPU
		s.PerKRequests += c.PerKRequests
		s.PerKFrames += c.PerKFrames
		s.RSS += c.RSS
		s.Processes += c.Processes
	}
	return s
}

// cpuPerRequest is the CPU seconds per 1,000 requests of every process
// measured beside x, and false when x has none or completed nothing.
func cpuPerRequest(x *targetDoc) (float64, bool) {
	if len(x.CPU) == 0 || x.Completed == 0 {
		return 0, false
	}
	sum := sumCPU(x).PerKRequests
	return sum, sum > 0
}

// cpuNote explains the CPU table.
const cpuNote = "cpu: user+system time from the start of the measured window (every round) to its last request's end, " +
	"from /proc/PID/stat in 10 ms ticks, " +
	"each process with its descendants (the load generator without them: they are the targets); * the target's own process; all: the sum; per 1k req: per 1,000 completed requests, " +
	"per 1k frames: per 1,000 stream frames received; rss: resident memory at the end of the target's last round"

// busyHeads are the columns of the table of the machine's CPUs.
var busyHeads = []string{"target", "cpu", "busy", "softirq", "steal"}

// busyRows returns the rows of the table of the machine's CPUs, one per
// CPU of each target that has them; nil when none has.
func busyRows(d *document) [][]string {
	var rows [][]string
	for _, x := range d.Targets {
		for i, c := range x.CPUs {
			name := ""
			if i == 0 {
				name = x.Name
			}
			rows = append(rows, []string{name, strconv.Itoa(c.CPU), wholePercent(c.Busy), wholePercent(c.SoftIRQ), wholePercent(c.Steal)})
		}
	}
	return rows
}

func wholePercent(f float64) string { return strconv.FormatFloat(100*f, 'f', 0, 64) + "%" }

// busyNote explains the table of the machine's CPUs.
const busyNote = "busy: the share of the measured window a CPU was not idle, from /proc/stat: " +
	"user, system, interrupts, softirq and steal time; softirq: the kernel's network work (loopback's receiving side included), " +
	"charged to the process it interrupted, or to none on kernels that account interrupt time apart; steal: time the hypervisor gave to other machines. " +
	"A CPU busy near 100% is what bounded the target: see which processes ran on it"

func writeCPU(b *strings.Builder, d *document) {
	rows := cpuRows(d)
	if rows == nil {
		return
	}
	textTable(b, "CPU AND MEMORY (per target, over its measured window)", cpuHeads, rows, cpuNote)
	if rows := busyRows(d); rows != nil {
		textTable(b, "CPUS (per target, over its measured window)", busyHeads, rows, busyNote)
	}
}

// textTable writes a section of one table, its first two columns to the
// left, and its note.
func textTable(b *strings.Builder, title string, heads []string, rows [][]string, note string) {
	section(b, title)
	t := table{left: 2}
	t.add(heads...)
	for _, r := range rows {
		t.add(r...)
	}
	t.write(b, "")
	b.WriteString(note + "\n")
}

package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/load"
)

var sampleDir = flag.String("sample", "", "also write the sample report into this directory, to look at")

// record adds each value (µs) n times.
func record(t testing.TB, h *hdrhistogram.Histogram, n int64, values ...int64) {
	t.Helper()
	for _, v := range values {
		require.NoError(t, h.RecordValues(v, n))
	}
}

// exactResult has latencies 1000 µs (500 times), 1200 (400), 1400 (90),
// 1600 (9) and 1800 (1), each plus shift, so p50 is 1000, p90 1200, p99
// 1400, p99.9 1600 and max 1800, plus shift. HDR histograms keep values
// below 2048 exactly, so two such results differ by exactly the difference
// of their shifts at every percentile.
func exactResult(t testing.TB, name string, shift int64, rps float64) *load.Result {
	r := &load.Result{
		Scenario:   "exact",
		Target:     name,
		BaseURL:    "http://127.0.0.1:1",
		Elapsed:    10 * time.Second,
		Requests:   1000,
		Completed:  1000,
		ByStatus:   map[int]int64{200: 1000},
		Bytes:      1 << 20,
		Frames:     64000,
		Throughput: rps,
		Latency:    load.NewHistogram(),
		TTFB:       load.NewHistogram(),
		TTFT:       load.NewHistogram(),
		InterFrame: load.NewHistogram(),
	}
	for _, x := range []struct{ n, v int64 }{{500, 1000}, {400, 1200}, {90, 1400}, {9, 1600}, {1, 1800}} {
		record(t, r.Latency, x.n, x.v+shift)
		record(t, r.TTFB, x.n, x.v/10+shift)
	}
	return r
}

func exactComparison(t testing.TB) *Comparison {
	direct := exactResult(t, "direct", 0, 1000)
	gateway := exactResult(t, "gateway", 100, 990)
	gateway.Requests, gateway.Completed, gateway.Errors = 1003, 1000, 3
	gateway.ByStatus = map[int]int64{200: 1000, 502: 2, 0: 1}
	gateway.ByCode = map[string]int64{"upstream_error": 2, "connection_reset": 1}
	gateway.FrameViolations = 2
	gateway.FirstViolations = []string{"data: {\"id\":1}\n\ndata: [DONE]\n\n(no finish frame)", "second"}
	gateway.RSS = []load.RSSSample{{At: 0, Bytes: 40 << 20}, {At: time.Second, Bytes: 60 << 20}, {At: 2 * time.Second, Bytes: 50 << 20}}
	refproxy := exactResult(t, "refproxy", 20, 1000)
	return &Comparison{
		Scenario:    "exact",
		Machine:     "2 vCPU, linux/amd64, go1.26",
		Command:     "gwbench compare -scenario exact",
		When:        time.Date(2026, 10, 7, 12, 0, 0, 0, time.UTC),
		Concurrency: 100,
		Results:     []*load.Result{direct, gateway, refproxy},
		Frontier: map[string][]FrontierPoint{
			"gateway": {
				{Budget: time.Millisecond, Rate: 8000, P99Overhead: 900 * time.Microsecond},
				{Budget: 100 * time.Microsecond, Rate: 2000, P99Overhead: 95 * time.Microsecond},
			},
		},
		Scorecard: []ScoreRow{
			{Case: "stream order", Wire: "v1", Want: "chunks, finish, usage, [DONE]", Got: "same", Pass: true},
			{Case: "error frame", Wire: "v2", Want: "one error event", Got: "two", Pass: false},
			{Case: "model is the tier", Wire: "openai", Want: "mira", Got: "mira", Pass: true},
		},
	}
}

// section returns the lines of the text report's section titled by a line
// starting with title, up to the next blank line.
func textSection(t *testing.T, text, title string) []string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, title) {
			continue
		}
		var out []string
		for _, l := range lines[i+1:] {
			if l == "" {
				break
			}
			out = append(out, l)
		}
		return out
	}
	t.Fatalf("no section %q in:\n%s", title, text)
	return nil
}

// row returns the fields of the line of lines whose leading fields are
// those given.
func row(t *testing.T, lines []string, lead ...string) []string {
	t.Helper()
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) >= len(lead) && slicesEqual(f[:len(lead)], lead) {
			return f
		}
	}
	t.Fatalf("no row %q in:\n%s", lead, strings.Join(lines, "\n"))
	return nil
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWriteText(t *testing.T) {
	c := exactComparison(t)
	var b strings.Builder
	require.NoError(t, WriteText(&b, c))
	text := b.String()
	t.Log("\n" + text)

	require.Contains(t, text, "scenario  exact\n")
	require.Contains(t, text, "machine   2 vCPU, linux/amd64, go1.26\n")
	require.Contains(t, text, "when      2026-10-07 12:00:00 UTC\n")
	require.Contains(t, text, "baseline  direct\n")

	req := textSection(t, text, "REQUESTS")
	require.Equal(t, []string{"target", "requests", "completed", "errors", "throughput", "elapsed", "frames", "bytes", "conns"}, strings.Fields(req[0]))
	require.Equal(t, []string{"gateway", "1003", "1000", "3", "990.0", "rps", "10.0s", "64000", "1.00", "MiB", "0"}, row(t, req, "gateway"))
	require.Equal(t, []string{"direct", "1000", "1000", "0", "1000.0", "rps", "10.0s", "64000", "1.00", "MiB", "0"}, row(t, req, "direct"))

	errs := textSection(t, text, "ERRORS")
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "gateway")
	require.Contains(t, errs[0], "by code: upstream_error 2, connection_reset 1; by status: none 1, 200 1000, 502 2")

	lat := textSection(t, text, "LATENCY")
	require.Equal(t, []string{"target", "count", "p50", "p90", "p99", "p99.9", "max", "mean"}, strings.Fields(lat[0]))
	require.Equal(t, []string{"direct", "1000", "1.00ms", "1.20ms", "1.40ms", "1.60ms", "1.80ms", "1.12ms"}, row(t, lat, "direct"))
	require.Equal(t, []string{"gateway", "1000", "1.10ms", "1.30ms", "1.50ms", "1.70ms", "1.90ms", "1.22ms"}, row(t, lat, "gateway"))
	require.Equal(t, []string{"direct", "1000", "100µs", "120µs", "140µs", "160µs", "180µs", "112µs"}, row(t, textSection(t, text, "TTFB"), "direct"))
	require.NotContains(t, text, "TTFT", "no target recorded a first token")
	require.NotContains(t, text, "INTER-FRAME")

	over := textSection(t, text, "OVERHEAD vs direct")
	require.Equal(t, []string{"target", "metric", "p50", "p90", "p99", "p99.9", "max", "resolution"}, strings.Fields(over[0]))
	require.Equal(t, []string{"gateway", "latency", "+100µs", "+100µs", "+100µs", "+100µs", "+100µs", "±1µs"}, row(t, over, "gateway", "latency"))
	require.Equal(t, []string{"gateway", "ttfb", "+100µs", "+100µs", "+100µs", "+100µs", "+100µs", "±1µs"}, row(t, over, "gateway", "ttfb"))
	require.Equal(t, []string{"refproxy", "latency", "+20µs", "+20µs", "+20µs", "+20µs", "+20µs", "±1µs"}, row(t, over, "refproxy", "latency"))

	thr := textSection(t, text, "THROUGHPUT vs direct")
	require.Equal(t, []string{"direct", "1000.0", "rps", "baseline"}, row(t, thr, "direct"))
	require.Equal(t, []string{"gateway", "990.0", "rps", "0.990"}, row(t, thr, "gateway"))
	require.Equal(t, []string{"refproxy", "1000.0", "rps", "1.000"}, row(t, thr, "refproxy"))

	viol := textSection(t, text, "FRAME VIOLATIONS")
	require.Equal(t, "gateway: 2 streams broke the wire's frame grammar", viol[0])
	require.Equal(t, `  1. data: {"id":1}\n\ndata: [DONE]\n\n(no finish frame)`, viol[1])
	require.Equal(t, "  2. second", viol[2])

	front := textSection(t, text, "FRONTIER")
	require.Equal(t, []string{"gateway", "100µs", "2000.0", "rps", "+95µs"}, row(t, front, "gateway", "100µs"))
	require.Equal(t, []string{"gateway", "1.00ms", "8000.0", "rps", "+900µs"}, row(t, front, "gateway", "1.00ms"))

	score := textSection(t, text, "SCORECARD")
	require.Equal(t, "2 passed, 1 failed", score[len(score)-1])
	require.Equal(t, []string{"FAIL", "error", "frame", "v2", "one", "error", "event", "two"}, row(t, score, "FAIL"))

	mem := textSection(t, text, "MEMORY")
	// 100 streams: (60 MiB − 40 MiB) / 100 = 205 KiB each.
	require.Equal(t, []string{"gateway", "3", "40.0", "MiB", "60.0", "MiB", "1.00s", "50.0", "MiB", "+10.0", "MiB", "205", "KiB"}, row(t, mem, "gateway"))

	// Columns line up: every row of a table has its p50 at the same place.
	require.Equal(t, strings.Index(lat[0], "p50")+3, strings.Index(lat[1], "1.00ms")+6)
	require.Equal(t, len([]rune(over[0])), len([]rune(over[1])))
}

func TestWriteTextEdges(t *testing.T) {
	t.Run("no results", func(t *testing.T) {
		require.ErrorIs(t, WriteText(io.Discard, &Comparison{}), ErrNoResults)
		require.ErrorIs(t, WriteText(io.Discard, nil), ErrNoResults)
		require.ErrorIs(t, WriteJSON(io.Discard, nil), ErrNoResults)
		require.ErrorIs(t, WriteSVG(io.Discard, nil, "latency"), ErrNoResults)
		require.ErrorIs(t, WriteHTML(io.Discard, nil), ErrNoResults)
		_, err := WriteAll(t.TempDir(), nil)
		require.ErrorIs(t, err, ErrNoResults)
	})
	t.Run("nil result", func(t *testing.T) {
		require.ErrorContains(t, WriteText(io.Discard, &Comparison{Results: []*load.Result{nil}}), "result 0 is nil")
	})
	t.Run("baseline only, nothing recorded", func(t *testing.T) {
		c := &Comparison{Results: []*load.Result{{Scenario: "empty", Target: "direct", Throughput: math.NaN()}}}
		var b strings.Builder
		require.NoError(t, WriteText(&b, c))
		text := b.String()
		require.Contains(t, text, "scenario  empty\n")
		require.NotContains(t, text, "LATENCY")
		require.NotContains(t, text, "OVERHEAD")
		require.Contains(t, text, "FRAME VIOLATIONS\nnone\n")
		require.NotContains(t, text, "SCORECARD")
		require.NoError(t, WriteJSON(io.Discard, c), "NaN throughput is written as 0")
		require.NoError(t, WriteSVG(io.Discard, c, "latency"))
	})
	t.Run("target without data", func(t *testing.T) {
		c := exactComparison(t)
		c.Results[2].Latency = nil
		c.Results[2].TTFB = load.NewHistogram()
		var b strings.Builder
		require.NoError(t, WriteText(&b, c))
		lat := textSection(t, b.String(), "LATENCY")
		require.Equal(t, []string{"refproxy", "0", "-", "-", "-", "-", "-", "-"}, row(t, lat, "refproxy"))
		over := textSection(t, b.String(), "OVERHEAD")
		for _, l := range over {
			require.NotContains(t, l, "refproxy")
		}
	})
	t.Run("empty scorecard", func(t *testing.T) {
		c := exactComparison(t)
		c.Scorecard = []ScoreRow{}
		var b strings.Builder
		require.NoError(t, WriteText(&b, c))
		require.Contains(t, b.String(), "SCORECARD\n0 passed, 0 failed\n")
	})
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		us   float64
		want string
	}{
		{0, "0µs"}, {1, "1µs"}, {87, "87µs"}, {999, "999µs"}, {999.6, "1.00ms"},
		{1000, "1.00ms"}, {1234, "1.23ms"}, {9994, "9.99ms"}, {9996, "10.0ms"}, {45_640, "45.6ms"},
		{99_960, "100ms"}, {789_400, "789ms"}, {999_600, "1.00s"}, {1_234_000, "1.23s"}, {754_000_000, "754s"},
		{-20, "-20µs"}, {-1500, "-1.50ms"},
	} {
		require.Equal(t, tc.want, formatMicros(tc.us), "%v µs", tc.us)
	}
	require.Equal(t, "+100µs", formatDelta(100))
	require.Equal(t, "-20µs", formatDelta(-20))
	require.Equal(t, "0µs", formatDelta(0.2))
	require.Equal(t, "512 B", formatBytes(512))
	require.Equal(t, "45.2 MiB", formatBytes(45<<20+200<<10))
	require.Equal(t, "-1.00 KiB", formatBytes(-1024))
}

func TestNiceRange(t *testing.T) {
	for _, tc := range []struct {
		lo, hi, bottom, top, step float64
		labels                    []string
	}{
		{math.Inf(1), 0, 0, 1000, 200, []string{"0", "0.2ms", "0.4ms", "0.6ms", "0.8ms", "1.0ms"}},
		{1, 7, 0, 7, 1, []string{"0", "1µs", "2µs", "3µs", "4µs", "5µs", "6µs", "7µs"}},
		{1000, 5100, 0, 6000, 1000, []string{"0", "1ms", "2ms", "3ms", "4ms", "5ms", "6ms"}},
		{100, 480, 0, 500, 100, []string{"0", "100µs", "200µs", "300µs", "400µs", "500µs"}},
		{900, 1900, 0, 2000, 500, []string{"0", "0.5ms", "1.0ms", "1.5ms", "2.0ms"}},
		{1, 1000, 0, 1000, 200, nil},
		{200, 23_000, 0, 25_000, 5000, []string{"0", "5ms", "10ms", "15ms", "20ms", "25ms"}},
		// Far from zero: the axis starts below the lowest value.
		{20_003, 24_900, 20_000, 25_000, 1000, []string{"20ms", "21ms", "22ms", "23ms", "24ms", "25ms"}},
		{1_466_100, 1_480_200, 1_466_000, 1_482_000, 2000, []string{"1.466s", "1.468s", "1.470s", "1.472s", "1.474s", "1.476s", "1.478s", "1.480s", "1.482s"}},
		{5000, 5000, 5000, 5001, 1, nil},
	} {
		bottom, top, step := niceRange(tc.lo, tc.hi)
		require.Equal(t, []float64{tc.bottom, tc.top, tc.step}, []float64{bottom, top, step}, "range of %v to %v", tc.lo, tc.hi)
		if tc.labels != nil {
			var got []string
			for y := bottom; y <= top; y += step {
				got = append(got, tickLabel(y, top, step))
			}
			require.Equal(t, tc.labels, got)
		}
	}
	require.Equal(t, []string{"0%", "90%", "99%", "99.9%", "99.99%", "max"},
		[]string{ninesLabel(0, 4), ninesLabel(1, 4), ninesLabel(2, 4), ninesLabel(3, 4), ninesLabel(4, 4), ninesLabel(5, 4)})
}

func TestWriteJSON(t *testing.T) {
	c := exactComparison(t)
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, c))

	var doc map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &doc))
	require.Equal(t, "exact", doc["scenario"])
	require.Equal(t, "direct", doc["baseline"])
	require.Equal(t, "2026-10-07T12:00:00Z", doc["when"])
	require.Equal(t, []any{50.0, 90.0, 99.0, 99.9, 100.0}, doc["percentiles"])

	targets := doc["targets"].([]any)
	require.Len(t, targets, 3)
	gw := targets[1].(map[string]any)
	require.Equal(t, "gateway", gw["name"])
	require.Equal(t, "gateway", gw["target"], "load.Result's own fields are kept")
	require.Equal(t, 1003.0, gw["requests"])
	require.Equal(t, 990.0, gw["throughput_rps"])
	require.Equal(t, 2.0, gw["by_code"].(map[string]any)["upstream_error"])
	require.Equal(t, 2.0, gw["by_status"].(map[string]any)["502"])
	require.Equal(t, 2.0, gw["frame_violations"])
	require.Len(t, gw["first_violations"], 2)
	lat := gw["latency"].(map[string]any)
	require.Equal(t, 1000.0, lat["count"])
	require.Equal(t, 1100.0, lat["min_us"])
	require.Equal(t, 1900.0, lat["max_us"])
	require.InDelta(t, 1222.2, lat["mean_us"], 1e-9)
	require.Equal(t, map[string]any{"p50": 1100.0, "p90": 1300.0, "p99": 1500.0, "p99.9": 1700.0, "max": 1900.0}, lat["percentiles_us"])
	require.Nil(t, gw["ttft"], "nothing recorded")
	require.Nil(t, gw["interframe"])
	rss := gw["rss_summary"].(map[string]any)
	require.Equal(t, float64(60<<20), rss["peak_bytes"])
	require.Equal(t, float64(time.Second), rss["peak_at_ns"])
	require.Equal(t, float64((20<<20)/100), rss["per_stream_bytes"])

	overheads := doc["overheads"].([]any)
	require.Len(t, overheads, 2)
	o := overheads[0].(map[string]any)
	require.Equal(t, "gateway", o["target"])
	require.Equal(t, 0.99, o["throughput_ratio"])
	require.Equal(t, map[string]any{"p50": 100.0, "p90": 100.0, "p99": 100.0, "p99.9": 100.0, "max": 100.0}, o["latency_us"])
	require.Equal(t, 100.0, o["ttfb_us"].(map[string]any)["p50"])
	require.Nil(t, o["ttft_us"])
	require.Equal(t, map[string]any{"latency": 1.0, "ttfb": 1.0}, o["resolution_us"])
	require.Equal(t, 20.0, overheads[1].(map[string]any)["latency_us"].(map[string]any)["p99"])

	front := doc["frontier"].(map[string]any)["gateway"].([]any)
	require.Equal(t, map[string]any{"budget_us": 100.0, "rate_rps": 2000.0, "p99_overhead_us": 95.0}, front[0], "sorted by budget")
	require.Equal(t, 1000.0, front[1].(map[string]any)["budget_us"])

	score := doc["scorecard"].(map[string]any)
	require.Equal(t, 2.0, score["passed"])
	require.Equal(t, 1.0, score["failed"])
	require.Equal(t, "error frame", score["rows"].([]any)[1].(map[string]any)["case"])

	// The typed document reads back as it was written.
	var typed document
	require.NoError(t, json.Unmarshal(b.Bytes(), &typed))
	require.Equal(t, int64(100), typed.Overheads[0].LatencyUS["p50"])
	require.Equal(t, int64(1003), typed.Targets[1].Requests)
	require.Equal(t, "direct", typed.Targets[0].Target)
	var again bytes.Buffer
	enc := json.NewEncoder(&again)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(&typed))
	require.JSONEq(t, b.String(), again.String())

	// The caller's results are untouched.
	require.Equal(t, 990.0, c.Results[1].Throughput)
}

// svgDoc is what the tests read of an SVG.
type svgDoc struct {
	root      string
	polylines []string // data-target of each series
	legend    []string // data-target of each legend entry
	texts     []string
}

func parseSVG(t *testing.T, data []byte) svgDoc {
	t.Helper()
	var d svgDoc
	dec := xml.NewDecoder(bytes.NewReader(data))
	inText := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "well-formed XML")
		switch el := tok.(type) {
		case xml.StartElement:
			if d.root == "" {
				d.root = el.Name.Space + " " + el.Name.Local
			}
			attr := func(name string) string {
				for _, a := range el.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			switch {
			case el.Name.Local == "polyline" && attr("class") == "series":
				d.polylines = append(d.polylines, attr("data-target"))
				require.NotEmpty(t, attr("points"))
			case el.Name.Local == "g" && attr("class") == "legend-entry":
				d.legend = append(d.legend, attr("data-target"))
			case el.Name.Local == "text":
				inText++
			}
		case xml.EndElement:
			if el.Name.Local == "text" {
				inText--
			}
		case xml.CharData:
			if inText > 0 {
				d.texts = append(d.texts, string(el))
			}
		}
	}
	return d
}

func TestWriteSVG(t *testing.T) {
	c := exactComparison(t)
	for _, metric := range []string{"latency", "ttfb"} {
		t.Run(metric, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, WriteSVG(&b, c, metric))
			require.True(t, strings.HasPrefix(b.String(), `<?xml version="1.0" encoding="UTF-8"?>`))
			d := parseSVG(t, b.Bytes())
			require.Equal(t, "http://www.w3.org/2000/svg svg", d.root)
			require.ElementsMatch(t, []string{"direct", "gateway", "refproxy"}, d.polylines, "one curve per target")
			require.Equal(t, []string{"direct", "gateway", "refproxy"}, d.legend, "one legend entry per target, in order")
			all := strings.Join(d.texts, "|")
			require.Contains(t, all, "exact · ")
			for _, tick := range []string{"0%", "90%", "99%", "99.9%", "99.99%", "max"} {
				require.Contains(t, d.texts, tick)
			}
			require.Contains(t, d.texts, "baseline")
			require.Contains(t, all, "p99 overhead +100µs")
			require.NotContains(t, b.String(), "href", "nothing loaded from elsewhere")
		})
	}
	t.Run("latency axis", func(t *testing.T) {
		var b bytes.Buffer
		require.NoError(t, WriteSVG(&b, c, "latency"))
		d := parseSVG(t, b.Bytes())
		// Values from 1 ms to 1.9 ms: the axis starts at 1 ms, ticks every
		// 0.2 ms up to 2 ms.
		for _, tick := range []string{"1.0ms", "1.2ms", "1.4ms", "1.6ms", "1.8ms", "2.0ms"} {
			require.Contains(t, d.texts, tick)
		}
		require.NotContains(t, d.texts, "0")
	})
	t.Run("empty metric", func(t *testing.T) {
		var b bytes.Buffer
		require.NoError(t, WriteSVG(&b, c, "ttft"))
		d := parseSVG(t, b.Bytes())
		require.Empty(t, d.polylines)
		require.Len(t, d.legend, 3)
		require.Contains(t, d.texts, "no data recorded")
		require.Contains(t, d.texts, "no data")
	})
	t.Run("one target without data", func(t *testing.T) {
		c := exactComparison(t)
		c.Results[1].Latency = load.NewHistogram()
		var b bytes.Buffer
		require.NoError(t, WriteSVG(&b, c, "latency"))
		d := parseSVG(t, b.Bytes())
		require.ElementsMatch(t, []string{"direct", "refproxy"}, d.polylines)
		require.Len(t, d.legend, 3)
	})
	t.Run("escaping", func(t *testing.T) {
		c := exactComparison(t)
		c.Scenario = `a<b & "c"`
		c.Results[1].Target = "gw<1>"
		var b bytes.Buffer
		require.NoError(t, WriteSVG(&b, c, "latency"))
		d := parseSVG(t, b.Bytes())
		require.Contains(t, d.polylines, "gw<1>")
	})
	t.Run("unknown metric", func(t *testing.T) {
		require.ErrorContains(t, WriteSVG(io.Discard, c, "bogus"), `unknown metric "bogus"`)
	})
}

func TestResolution(t *testing.T) {
	for _, h := range []*hdrhistogram.Histogram{load.NewHistogram(), hdrhistogram.New(1, 1e9, 2), hdrhistogram.New(16, 1e9, 3)} {
		for _, v := range []int64{0, 1, 17, 1000, 2047, 2048, 4095, 4096, 99_999, 1_466_000, 200_000_000} {
			w := resolution(h, v)
			lo := v - v%w
			require.True(t, h.ValuesAreEquivalent(lo, lo+w-1), "%d: width %d", v, w)
			require.False(t, h.ValuesAreEquivalent(lo, lo+w), "%d: width %d", v, w)
		}
	}
	h := load.NewHistogram()
	require.Equal(t, int64(1), resolution(h, 2047))
	require.Equal(t, int64(2), resolution(h, 2048))
	require.Equal(t, int64(1024), resolution(h, 1_466_000))
}

func TestCurve(t *testing.T) {
	h := load.NewHistogram()
	record(t, h, 99, 1000)
	record(t, h, 1, 9000)
	pts := curve(h, 4)
	require.Equal(t, point{0, 1000}, pts[0])
	require.Equal(t, point{5, float64(h.Max())}, pts[len(pts)-1])
	for i := 1; i < len(pts); i++ {
		require.Greater(t, pts[i].x, pts[i-1].x)
		require.GreaterOrEqual(t, pts[i].y, pts[i-1].y, "percentile curves never fall")
	}
	require.Less(t, len(pts), 4*curveSamples/2, "flat runs are compacted")
}

func TestWriteHTML(t *testing.T) {
	c := exactComparison(t)
	var b strings.Builder
	require.NoError(t, WriteHTML(&b, c))
	page := b.String()
	require.True(t, strings.HasPrefix(page, "<!DOCTYPE html>"))
	require.Equal(t, 3, strings.Count(page, "<svg "), "latency, ttfb and memory; nothing else was recorded")
	require.Contains(t, page, `<figure id="latency">`)
	require.Contains(t, page, `<figure id="ttfb">`)
	require.Contains(t, page, `<figure id="memory">`)
	require.Contains(t, page, "targets: direct, gateway, refproxy (baseline direct)")
	require.NotContains(t, page, `id="ttft"`)
	require.NotContains(t, page, "<?xml", "inline SVG has no XML declaration")
	require.NotContains(t, page, "src=")
	require.NotContains(t, page, "href")

	var text strings.Builder
	require.NoError(t, WriteText(&text, c))
	pre := page[strings.Index(page, "<pre>")+len("<pre>") : strings.Index(page, "</pre>")]
	unescaped := strings.NewReplacer("&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&amp;", "&").Replace(pre)
	require.Equal(t, text.String(), unescaped, "the summary, escaped")
	require.Contains(t, pre, "+100µs")

	// Each inline SVG is well-formed on its own.
	rest := page
	for _, want := range [][]string{{"direct", "gateway", "refproxy"}, {"direct", "gateway", "refproxy"}, {"gateway"}} {
		start := strings.Index(rest, "<svg ")
		end := strings.Index(rest, "</svg>") + len("</svg>")
		d := parseSVG(t, []byte(rest[start:end]))
		require.ElementsMatch(t, want, d.polylines)
		rest = rest[end:]
	}
}

func TestWriteAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "dir")
	paths, err := WriteAll(dir, exactComparison(t))
	require.NoError(t, err)
	var names []string
	for _, p := range paths {
		require.Equal(t, dir, filepath.Dir(p))
		names = append(names, filepath.Base(p))
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Positive(t, st.Size())
	}
	require.Equal(t, []string{"summary.txt", "report.json", "report.html", "latency.svg", "ttfb.svg", "memory.svg"}, names)
}

// sampleComparison is a streamed chat run as the harness would record it:
// 200 ms to the first token, 64 tokens 20 ms apart, the upstream directly,
// through the gateway and through the reference proxy.
func sampleComparison(t testing.TB) *Comparison {
	rng := rand.New(rand.NewPCG(1, 2))
	// jitter is a long-tailed delay in µs: lognormal around median.
	jitter := func(median, sigma float64) int64 {
		return int64(median * math.Exp(sigma*rng.NormFloat64()))
	}
	mk := func(name string, hop, hopSigma float64, rps float64) *load.Result {
		r := &load.Result{
			Scenario: "stream-64", Target: name, BaseURL: "http://127.0.0.1:0",
			Elapsed: 25 * time.Second, Requests: 5000, Completed: 5000, Throughput: rps,
			ByStatus: map[int]int64{200: 5000}, Frames: 5000 * 67, Bytes: 5000 * 67 * 180,
			Latency: load.NewHistogram(), TTFB: load.NewHistogram(), TTFT: load.NewHistogram(), InterFrame: load.NewHistogram(),
		}
		for range 5000 {
			ttfb := 300 + jitter(150, 0.6) + jitter(hop, hopSigma)
			ttft := 200_000 + jitter(400, 0.8) + jitter(hop, hopSigma)
			total := ttft
			for range 63 {
				gap := 20_000 + jitter(60, 0.9) + jitter(hop/4, hopSigma)
				total += gap
				record(t, r.InterFrame, 1, gap)
			}
			record(t, r.TTFB, 1, ttfb)
			record(t, r.TTFT, 1, ttft)
			record(t, r.Latency, 1, total+jitter(200, 0.5))
		}
		return r
	}
	direct := mk("direct", 5, 0.2, 200)
	gateway := mk("gateway", 180, 0.7, 199.6)
	refproxy := mk("refproxy", 70, 0.5, 199.9)
	gateway.Errors, gateway.Requests = 4, 5004
	gateway.ByStatus[503] = 4
	gateway.ByCode = map[string]int64{"upstream_unavailable": 4}
	// Memory fills for the first tenth of the run, then saws up and down
	// under the load, and falls back after it.
	for i := range 120 {
		b := 48<<20 + int64(min(i, 12))<<20 + int64(i%20)<<18
		gateway.RSS = append(gateway.RSS, load.RSSSample{At: time.Duration(i) * 500 * time.Millisecond, Bytes: b})
	}
	for i := range 20 {
		b := 52<<20 + int64(20-i)<<19
		gateway.RSS = append(gateway.RSS, load.RSSSample{At: time.Duration(120+i) * 500 * time.Millisecond, Bytes: b, After: true})
	}
	return &Comparison{
		Scenario: "stream-64", Machine: "2 vCPU, linux/amd64, go1.26", Command: "gwbench compare stream-64.yaml",
		When: time.Date(2026, 10, 7, 9, 30, 0, 0, time.UTC), Concurrency: 40,
		Results: []*load.Result{direct, gateway, refproxy},
		Frontier: map[string][]FrontierPoint{
			"gateway":  {{Budget: 250 * time.Microsecond, Rate: 1800, P99Overhead: 240 * time.Microsecond}, {Budget: time.Millisecond, Rate: 4200, P99Overhead: 930 * time.Microsecond}},
			"refproxy": {{Budget: 250 * time.Microsecond, Rate: 5200, P99Overhead: 180 * time.Microsecond}},
		},
		Scorecard: []ScoreRow{
			{Case: "frame order", Wire: "v1", Want: "chunks, usage, [DONE]", Got: "chunks, usage, [DONE]", Pass: true},
			{Case: "frame order", Wire: "v2", Want: "start, delta, finish", Got: "start, delta, finish", Pass: true},
			{Case: "upstream 503", Wire: "openai", Want: "503 service_unavailable", Got: "502 upstream_error", Pass: false},
		},
	}
}

func TestSampleReport(t *testing.T) {
	dir := *sampleDir
	if dir == "" {
		dir = t.TempDir()
	}
	c := sampleComparison(t)
	paths, err := WriteAll(dir, c)
	require.NoError(t, err)
	require.Len(t, paths, 8, "summary, JSON, HTML, four percentile plots and memory")
	for _, p := range paths {
		if filepath.Ext(p) != ".svg" {
			continue
		}
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		d := parseSVG(t, data)
		if filepath.Base(p) == "memory.svg" {
			require.Equal(t, []string{"gateway"}, d.polylines)
			continue
		}
		require.Len(t, d.polylines, 3, p)
	}
	summary, err := os.ReadFile(filepath.Join(dir, "summary.txt"))
	require.NoError(t, err)
	t.Log("\n" + string(summary))
}

// rssSeries returns samples every 10 s, one per value (MiB), the first
// under load ones under load and the rest after it.
func rssSeries(under int, mibs ...float64) []load.RSSSample {
	out := make([]load.RSSSample, len(mibs))
	for i, m := range mibs {
		out[i] = load.RSSSample{At: time.Duration(i) * 10 * time.Second, Bytes: int64(m * (1 << 20)), After: i >= under}
	}
	return out
}

// flat returns n copies of v.
func flat(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestRSSVerdicts(t *testing.T) {
	const MiB = 1 << 20
	// 20 samples under load: 2 are the skipped tenth, then halves of 9.
	fills := []float64{40, 70}
	t.Run("plateau levels off", func(t *testing.T) {
		v := append(slices.Clone(fills), 90, 100, 95, 98, 100, 97, 99, 96, 100)
		v = append(v, 104, 98, 101, 99, 103, 100, 97, 102, 99) // peak 104 ≤ 100 + 10
		d := summarizeRSS(rssSeries(len(v), v...), 0)
		require.Equal(t, &plateauDoc{Verdict: verdictPass, FirstHalfPeak: 100 * MiB, SecondHalfPeak: 104 * MiB, Limit: 110 * MiB}, d.LevelsOff)
		require.Equal(t, verdictNotJudged, d.ComesBackDown.Verdict, "no cooldown")
		require.Contains(t, d.ComesBackDown.Note, "no samples after the load")
		require.Equal(t, int64(40*MiB), d.Start)
		require.Equal(t, int64(104*MiB), d.Peak)
		require.Equal(t, int64(99*MiB), d.End)
	})
	t.Run("steady climb does not", func(t *testing.T) {
		var v []float64
		for i := range 20 {
			v = append(v, 40+float64(i)*4) // 4 MiB more every sample
		}
		d := summarizeRSS(rssSeries(len(v), v...), 0)
		// Skipped: 40, 44. First half 48..80, second 84..116.
		require.Equal(t, &plateauDoc{Verdict: verdictFail, FirstHalfPeak: 80 * MiB, SecondHalfPeak: 116 * MiB, Limit: 88 * MiB}, d.LevelsOff)
	})
	t.Run("small memory gets the slack", func(t *testing.T) {
		v := append([]float64{8, 9}, flat(9, 10)...)
		v = append(v, flat(9, 17)...) // +70%, but only 7 MiB
		d := summarizeRSS(rssSeries(len(v), v...), 0)
		require.Equal(t, verdictPass, d.LevelsOff.Verdict)
		require.Equal(t, int64(18*MiB), d.LevelsOff.Limit, "10 MiB + 8 MiB")
	})
	t.Run("comes back down", func(t *testing.T) {
		v := append(slices.Clone(fills), flat(18, 100)...)
		v = append(v, 95, 80, 70) // start 40, peak 100: at most 70
		d := summarizeRSS(rssSeries(20, v...), 0)
		require.Equal(t, &recoveryDoc{Verdict: verdictPass, After: 70 * MiB, Limit: 70 * MiB}, d.ComesBackDown)
		require.Equal(t, 3, d.AfterSamples)
		require.Equal(t, int64(70*MiB), d.After)
		require.Equal(t, int64(20*time.Second), d.AfterFor)
		require.Equal(t, int64(100*MiB), d.End, "end is the load's")
		require.Equal(t, 23, d.Samples)
	})
	t.Run("stays up", func(t *testing.T) {
		v := append(slices.Clone(fills), flat(18, 100)...)
		v = append(v, 100, 99, 96)
		d := summarizeRSS(rssSeries(20, v...), 0)
		require.Equal(t, &recoveryDoc{Verdict: verdictFail, After: 96 * MiB, Limit: 70 * MiB}, d.ComesBackDown)
	})
	t.Run("within the slack of start", func(t *testing.T) {
		v := append([]float64{40}, flat(19, 44)...)
		v = append(v, 47) // half of +4 MiB is 2, but 8 MiB of start is allowed
		d := summarizeRSS(rssSeries(20, v...), 0)
		require.Equal(t, &recoveryDoc{Verdict: verdictPass, After: 47 * MiB, Limit: 48 * MiB}, d.ComesBackDown)
	})
	t.Run("too few samples", func(t *testing.T) {
		d := summarizeRSS(rssSeries(7, 40, 50, 60, 70, 80, 90, 100, 60), 0)
		require.Equal(t, &plateauDoc{Verdict: verdictNotJudged, Note: "7 samples under load, 8 needed"}, d.LevelsOff)
		require.Equal(t, &recoveryDoc{Verdict: verdictNotJudged, Note: "7 samples under load, 8 needed"}, d.ComesBackDown)
		require.Equal(t, int64(60*MiB), d.After)

		d = summarizeRSS(rssSeries(8, flat(8, 50)...), 0)
		require.Equal(t, verdictPass, d.LevelsOff.Verdict, "eight are enough")
	})
	t.Run("only after-load samples", func(t *testing.T) {
		d := summarizeRSS(rssSeries(0, 50, 40), 0)
		require.Equal(t, int64(50*MiB), d.Start)
		require.Equal(t, verdictNotJudged, d.LevelsOff.Verdict)
		require.Equal(t, verdictNotJudged, d.ComesBackDown.Verdict)
	})
	require.Nil(t, summarizeRSS(nil, 0))
}

// soakComparison is the gateway alone, as `gwbench local --targets gateway`
// runs a soak: memory levels off, then only part of it comes back.
func soakComparison(t testing.TB) *Comparison {
	gw := exactResult(t, "gateway", 100, 990)
	v := append([]float64{40, 60}, flat(9, 80)...)
	v = append(v, flat(9, 82)...)
	v = append(v, 78, 75, 72) // start 40, peak 82: at most 61
	gw.RSS = rssSeries(20, v...)
	return &Comparison{Scenario: "soak", Results: []*load.Result{gw}}
}

func TestSingleTarget(t *testing.T) {
	c := soakComparison(t)
	var text strings.Builder
	require.NoError(t, WriteText(&text, c))
	t.Log("\n" + text.String())
	require.NotContains(t, text.String(), "baseline", "nothing to compare with")
	require.NotContains(t, text.String(), "OVERHEAD")
	require.NotContains(t, text.String(), "THROUGHPUT vs")
	require.Equal(t, []string{"gateway", "1000", "1.10ms", "1.30ms", "1.50ms", "1.70ms", "1.90ms", "1.22ms"},
		row(t, textSection(t, text.String(), "LATENCY"), "gateway"))

	mem := textSection(t, text.String(), "MEMORY (")
	require.Equal(t, []string{"target", "samples", "start", "peak", "peak", "at", "end", "growth", "per", "stream", "after", "after", "for"}, strings.Fields(mem[0]))
	require.Equal(t, []string{"gateway", "23", "40.0", "MiB", "82.0", "MiB", "110s", "82.0", "MiB", "+42.0", "MiB", "-", "72.0", "MiB", "20.0s"}, row(t, mem, "gateway"))
	verdicts := textSection(t, text.String(), "MEMORY VERDICTS")
	require.Equal(t, []string{"gateway", "levels", "off", "PASS", "second-half", "peak", "82.0", "MiB,", "first-half", "peak", "80.0", "MiB,", "limit", "88.0", "MiB"},
		row(t, verdicts, "gateway", "levels"))
	require.Equal(t, []string{"gateway", "comes", "back", "down", "FAIL", "72.0", "MiB", "20.0s", "after", "the", "load,", "start", "40.0", "MiB,", "peak", "82.0", "MiB,", "limit", "61.0", "MiB"},
		row(t, verdicts, "gateway", "comes"))
	require.Contains(t, text.String(), "levels off: past the first 10% of the samples under load, the second half's peak is at most the first half's plus 10% (at least 8.00 MiB)\n")
	require.Contains(t, text.String(), "comes back down: the last sample after the load is at most start plus 50% of (peak − start) (at least 8.00 MiB)\n")

	var js bytes.Buffer
	require.NoError(t, WriteJSON(&js, c))
	var doc struct {
		Baseline  string            `json:"baseline"`
		Overheads []json.RawMessage `json:"overheads"`
		Targets   []struct {
			RSS []struct {
				AfterLoad *bool `json:"after_load"`
			} `json:"rss"`
			Summary struct {
				AfterBytes    int64          `json:"after_bytes"`
				AfterFor      int64          `json:"after_for_ns"`
				LevelsOff     map[string]any `json:"levels_off"`
				ComesBackDown map[string]any `json:"comes_back_down"`
			} `json:"rss_summary"`
		} `json:"targets"`
	}
	require.NoError(t, json.Unmarshal(js.Bytes(), &doc))
	require.Equal(t, "gateway", doc.Baseline)
	require.NotNil(t, doc.Overheads, "[] rather than null")
	require.Empty(t, doc.Overheads)
	gw := doc.Targets[0]
	require.Len(t, gw.RSS, 23)
	require.False(t, *gw.RSS[19].AfterLoad)
	require.True(t, *gw.RSS[20].AfterLoad)
	require.Equal(t, int64(72<<20), gw.Summary.AfterBytes)
	require.Equal(t, int64(20*time.Second), gw.Summary.AfterFor)
	require.Equal(t, map[string]any{"verdict": "pass", "first_half_peak_bytes": float64(80 << 20),
		"second_half_peak_bytes": float64(82 << 20), "limit_bytes": float64(88 << 20)}, gw.Summary.LevelsOff)
	require.Equal(t, map[string]any{"verdict": "fail", "after_bytes": float64(72 << 20), "limit_bytes": float64(61 << 20)}, gw.Summary.ComesBackDown)

	var svg bytes.Buffer
	require.NoError(t, WriteSVG(&svg, c, "latency"))
	d := parseSVG(t, svg.Bytes())
	require.Equal(t, []string{"gateway"}, d.polylines)
	require.Contains(t, d.texts, "percentile curve of gateway")
	require.NotContains(t, d.texts, "baseline")

	var page strings.Builder
	require.NoError(t, WriteHTML(&page, c))
	require.Contains(t, page.String(), `<p class="meta">target: gateway</p>`)

	paths, err := WriteAll(t.TempDir(), c)
	require.NoError(t, err)
	require.Len(t, paths, 6, "summary, JSON, HTML, latency, ttfb and memory")
}

func TestMemorySVG(t *testing.T) {
	c := soakComparison(t)
	var b bytes.Buffer
	require.NoError(t, WriteSVG(&b, c, MetricMemory))
	require.True(t, strings.HasPrefix(b.String(), `<?xml version="1.0" encoding="UTF-8"?>`))
	d := parseSVG(t, b.Bytes())
	require.Equal(t, []string{"gateway"}, d.polylines)
	require.Equal(t, []string{"gateway"}, d.legend)
	require.Contains(t, d.texts, "soak · resident memory")
	require.Contains(t, d.texts, "after the load")
	require.Contains(t, d.texts, "levels off: pass")
	require.Contains(t, d.texts, "comes back down: fail")
	require.Contains(t, d.texts, "after 72.0 MiB")
	// 40 to 82 MiB from zero, 0 to 220 s.
	for _, tick := range []string{"0", "40 MiB", "100 MiB", "50 s", "250 s"} {
		require.Contains(t, d.texts, tick)
	}
	require.Equal(t, 1, strings.Count(b.String(), `class="after-load"`), "the time after the load is shaded")

	t.Run("no cooldown, no shading", func(t *testing.T) {
		c := soakComparison(t)
		for i := range c.Results[0].RSS {
			c.Results[0].RSS[i].After = false
		}
		var b bytes.Buffer
		require.NoError(t, WriteSVG(&b, c, MetricMemory))
		require.NotContains(t, b.String(), `class="after-load"`)
		require.Contains(t, parseSVG(t, b.Bytes()).texts, "comes back down: not judged")
	})
	t.Run("an hour is in minutes", func(t *testing.T) {
		c := soakComparison(t)
		for i := range c.Results[0].RSS {
			c.Results[0].RSS[i].At *= 18 // 3 min apart: 66 min in all
		}
		var b bytes.Buffer
		require.NoError(t, WriteSVG(&b, c, MetricMemory))
		texts := parseSVG(t, b.Bytes()).texts
		require.Contains(t, texts, "60 min")
	})
	t.Run("nothing sampled", func(t *testing.T) {
		c := exactComparison(t)
		c.Results[1].RSS = nil
		var b bytes.Buffer
		require.NoError(t, WriteSVG(&b, c, MetricMemory))
		d := parseSVG(t, b.Bytes())
		require.Empty(t, d.polylines)
		require.Contains(t, d.texts, "no memory sampled")
		paths, err := WriteAll(t.TempDir(), c)
		require.NoError(t, err)
		for _, p := range paths {
			require.NotEqual(t, "memory.svg", filepath.Base(p))
		}
	})
}

// CPU figures appear in every report for the targets that have them, and
// a target without any shows dashes, not zeros.
func TestCPUReport(t *testing.T) {
	c := exactComparison(t)
	gw := c.Results[1] // 1000 completed, 64000 frames
	gw.CPU = []load.ProcCost{
		{Name: "gateway", PID: 10, Own: true, CPU: 2500 * time.Millisecond, PerKRequests: 2.5, PerKFrames: 2.5 / 64,
			RSS: 50 << 20, Processes: 1},
		{Name: "simulator", PID: 11, CPU: time.Second, PerKRequests: 1, PerKFrames: 1.0 / 64, RSS: 20 << 20, Processes: 1},
	}
	c.Results[2].CPU = []load.ProcCost{{Name: "nginx", PID: 12, Own: true, CPU: 800 * time.Millisecond,
		PerKRequests: 0.8, PerKFrames: 0.8 / 64, RSS: 8 << 20, Processes: 2}}

	var b strings.Builder
	require.NoError(t, WriteText(&b, c))
	cpu := textSection(t, b.String(), "CPU AND MEMORY")
	require.Equal(t, []string{"target", "process", "pid", "cpu", "cpu/1k", "req", "cpu/1k", "frames", "rss", "at", "end", "procs"},
		strings.Fields(cpu[0]))
	require.Equal(t, []string{"direct", "-", "-", "-", "-", "-", "-", "-"}, row(t, cpu, "direct"))
	require.Equal(t, []string{"gateway", "gateway*", "10", "2.50s", "2.50s", "39.1ms", "50.0", "MiB", "1"}, row(t, cpu, "gateway"))
	require.Equal(t, []string{"simulator", "11", "1.00s", "1.00s", "15.6ms", "20.0", "MiB", "1"}, row(t, cpu, "simulator"))
	require.Equal(t, []string{"refproxy", "nginx*", "12", "800ms", "800ms", "12.5ms", "8.00", "MiB", "2"}, row(t, cpu, "refproxy"))
	require.Equal(t, []string{"all", "3.50s", "3.50s", "54.7ms", "70.0", "MiB", "2"}, row(t, cpu, "all"),
		"a target of two processes has their sum")
	require.Len(t, cpu, 7, "heads, direct, gateway, simulator, all, refproxy (one process: no sum), note")
	require.Contains(t, cpu[len(cpu)-1], "/proc/PID/stat")
	require.Equal(t, []string{"target", "throughput", "ratio"}, strings.Fields(textSection(t, b.String(), "THROUGHPUT")[0]),
		"no cpu ratio when the baseline has no CPU measured")

	var j bytes.Buffer
	require.NoError(t, WriteJSON(&j, c))
	var doc struct {
		Targets []struct {
			Name string
			CPU  []map[string]any `json:"cpu"`
		}
	}
	require.NoError(t, json.Unmarshal(j.Bytes(), &doc))
	require.Nil(t, doc.Targets[0].CPU, "direct has no process: no figures")
	require.NotContains(t, strings.SplitN(j.String(), `"name": "gateway"`, 2)[0], `"cpu"`)
	require.Len(t, doc.Targets[1].CPU, 2)
	require.Equal(t, map[string]any{"name": "gateway", "pid": 10.0, "own": true, "cpu_ns": 2.5e9,
		"cpu_s_per_1k_requests": 2.5, "cpu_s_per_1k_frames": 2.5 / 64, "rss_bytes": float64(50 << 20), "processes": 1.0},
		doc.Targets[1].CPU[0])

	var h strings.Builder
	require.NoError(t, WriteHTML(&h, c))
	page := h.String()
	require.Contains(t, page, `<h2 id="cpu">CPU and memory</h2>`)
	require.Contains(t, page, "<tr><td>gateway</td><td>gateway*</td><td>10</td><td>2.50s</td><td>2.50s</td><td>39.1ms</td><td>50.0 MiB</td><td>1</td></tr>")
	require.Contains(t, page, "<tr><td>direct</td><td>-</td>")

	// With the baseline measured, the throughput table has the ratio its
	// CPU per request predicts: direct 0.5 s per 1,000, gateway 3.5 s,
	// nginx 0.8 s.
	c.Results[0].CPU = []load.ProcCost{{Name: "simulator", PID: 11, Own: true, CPU: 500 * time.Millisecond,
		PerKRequests: 0.5, RSS: 20 << 20, Processes: 1}}
	b.Reset()
	require.NoError(t, WriteText(&b, c))
	through := textSection(t, b.String(), "THROUGHPUT")
	require.Equal(t, []string{"target", "throughput", "ratio", "cpu", "ratio"}, strings.Fields(through[0]))
	require.Equal(t, "baseline", row(t, through, "direct")[4])
	require.Equal(t, "0.143", row(t, through, "gateway")[4])
	require.Equal(t, "0.625", row(t, through, "refproxy")[4])
	require.Contains(t, through[len(through)-1], "cpu ratio: ")

	// Without any process measured, no section at all.
	c = exactComparison(t)
	b.Reset()
	require.NoError(t, WriteText(&b, c))
	require.NotContains(t, b.String(), "CPU AND MEMORY")
	h.Reset()
	require.NoError(t, WriteHTML(&h, c))
	require.NotContains(t, h.String(), `id="cpu"`)
}

// The machine's CPUs over each target's window follow the processes'
// table, in text, JSON and HTML, for the targets measured on it; a report
// without them has no such section.
func TestCPUBusyReport(t *testing.T) {
	c := exactComparison(t)
	gw := c.Results[1]
	gw.CPU = []load.ProcCost{{Name: "gateway", PID: 10, Own: true, CPU: time.Second, PerKRequests: 1, RSS: 1 << 20, Processes: 1}}
	var b strings.Builder
	require.NoError(t, WriteText(&b, c))
	require.NotContains(t, b.String(), "CPUS", "no CPU figures, no section")

	gw.CPUs = []load.CPUBusy{{CPU: 0, Busy: 0.994, SoftIRQ: 0.16, Steal: 0}, {CPU: 1, Busy: 0.755, SoftIRQ: 0.104, Steal: 0.021}}
	b.Reset()
	require.NoError(t, WriteText(&b, c))
	busy := textSection(t, b.String(), "CPUS")
	require.Equal(t, []string{"target", "cpu", "busy", "softirq", "steal"}, strings.Fields(busy[0]))
	require.Equal(t, []string{"gateway", "0", "99%", "16%", "0%"}, row(t, busy, "gateway"))
	require.Equal(t, []string{"1", "76%", "10%", "2%"}, strings.Fields(busy[2]))
	require.Len(t, busy, 4, "heads, two CPUs of the one target that has them, note")
	require.Contains(t, busy[3], "/proc/stat")

	var j bytes.Buffer
	require.NoError(t, WriteJSON(&j, c))
	var doc struct {
		Targets []struct {
			CPUs []map[string]any `json:"cpus"`
		}
	}
	require.NoError(t, json.Unmarshal(j.Bytes(), &doc))
	require.Nil(t, doc.Targets[0].CPUs)
	require.Equal(t, []map[string]any{
		{"cpu": 0.0, "busy": 0.994, "softirq": 0.16, "steal": 0.0},
		{"cpu": 1.0, "busy": 0.755, "softirq": 0.104, "steal": 0.021},
	}, doc.Targets[1].CPUs)

	var h strings.Builder
	require.NoError(t, WriteHTML(&h, c))
	require.Contains(t, h.String(), `<h2 id="cpus">CPUs</h2>`)
	require.Contains(t, h.String(), "<tr><td>gateway</td><td>0</td><td>99%</td><td>16%</td><td>0%</td></tr>")
}

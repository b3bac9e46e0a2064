package report

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// formatMicros writes a duration given in microseconds with two or three
// significant digits: 87µs, 1.23ms, 45.6ms, 789ms, 1.23s.
func formatMicros(us float64) string {
	neg := us < 0
	if neg {
		us = -us
	}
	var s string
	switch {
	case us < 999.5:
		s = strconv.FormatFloat(math.Round(us), 'f', 0, 64) + "µs"
	case us < 999_500:
		s = sig3(us/1e3) + "ms"
	default:
		s = sig3(us/1e6) + "s"
	}
	if neg {
		return "-" + s
	}
	return s
}

// formatDelta is formatMicros with a sign: +100µs, -20µs, 0µs.
func formatDelta(us float64) string {
	if math.Round(us) > 0 {
		return "+" + formatMicros(us)
	}
	if math.Round(us) == 0 {
		return "0µs"
	}
	return formatMicros(us)
}

// sig3 formats v (at least 1) with three significant digits, or as a whole
// number when it has more: 1.00, 1.23, 12.3, 123, 1234.
func sig3(v float64) string {
	switch {
	case v < 9.995:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 99.95:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

// formatBytes writes a byte count in binary units: 512 B, 45.2 MiB.
func formatBytes(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	var s string
	switch {
	case n < 1<<10:
		s = strconv.FormatInt(n, 10) + " B"
	case n < 1<<20:
		s = sig3(float64(n)/(1<<10)) + " KiB"
	case n < 1<<30:
		s = sig3(float64(n)/(1<<20)) + " MiB"
	default:
		s = sig3(float64(n)/(1<<30)) + " GiB"
	}
	if neg {
		return "-" + s
	}
	return s
}

// formatRate writes requests per second to a tenth: 0.5, 87.3, 1234.0.
func formatRate(rps float64) string {
	return strconv.FormatFloat(rps, 'f', 1, 64)
}

// table is a text table: the first left columns left-aligned (at least
// one), the others right-aligned.
type table struct {
	left int
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(b *strings.Builder, indent string) {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	left := max(t.left, 1)
	var line strings.Builder
	for _, r := range t.rows {
		line.Reset()
		line.WriteString(indent)
		for i, c := range r {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i < left {
				line.WriteString(c)
				line.WriteString(pad)
			} else {
				line.WriteString(pad)
				line.WriteString(c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
}

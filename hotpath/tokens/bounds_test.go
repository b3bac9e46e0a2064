package tokens

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/cputest"
)

func TestCutAt(t *testing.T) {
	f := func(text string, want int) {
		t.Helper()
		require.Equal(t, want, cutAt(text), "%.40q", text)
	}
	f("", 0)
	f("hello world", len("hello world"))
	f(strings.Repeat("a", MaxRun+10), MaxRun)
	f(strings.Repeat(" ", MaxRun+10), MaxRun)
	f("ab "+strings.Repeat("a", MaxRun+10), 2)
	// A run is never cut inside a UTF-8 sequence.
	f(strings.Repeat("é", MaxRun), MaxRun)
	f("x"+strings.Repeat("é", MaxRun), MaxRun-1)
	// Long ordinary text is cut before a word, near maxSegment.
	text := strings.Repeat("word ", 2*maxSegment/5)
	n := cutAt(text)
	require.LessOrEqual(t, n, maxSegment)
	require.Greater(t, n, maxSegment-MaxRun)
	require.Equal(t, byte(' '), text[n])
}

// TestCountSegmentsExact: cutting ordinary text where the pre-tokenizer
// splits anyway changes nothing, so long text counts as its parts.
func TestCountSegmentsExact(t *testing.T) {
	text := string(AppendWords(nil, 7, 5000))
	require.Equal(t, 5000, Count(text))
	multi := strings.Repeat("line one\nline two, with (brackets) and 12345 numbers!\n", 400)
	n := 0
	for _, line := range strings.SplitAfter(multi, "\n") {
		n += Count(line)
	}
	require.Equal(t, n, Count(multi))
}

// TestCountLongRunLinear: one unbroken word is counted in MaxRun parts,
// so a 1 MiB word costs about what 1 MiB of words costs; before the bound,
// 140 KiB alone took over 8 s of CPU.
func TestCountLongRunLinear(t *testing.T) {
	Count(" ") // load the encoding outside the measurement
	word := strings.Repeat("a", 1<<20)
	start := cputest.Used(t)
	n := Count(word)
	used := cputest.Used(t) - start
	require.Greater(t, n, 0)
	require.Less(t, used, 3*time.Second*cpuScale, "1 MiB unbroken run")
	require.Equal(t, n, len(Split(word)))
}

func TestCountLimitStops(t *testing.T) {
	text := string(AppendWords(nil, 3, 200_000))
	Count(" ")
	start := cputest.Used(t)
	n := CountLimit(text, 1000)
	used := cputest.Used(t) - start
	require.Greater(t, n, 1000)
	require.Less(t, used, 200*time.Millisecond*cpuScale)
	// A run the encoder-free bound cannot settle is counted only a little
	// past the limit.
	run := strings.Repeat("b", 1<<20)
	require.Less(t, CountLimit(run, 1000), 1000+maxSegment)

	msgs := []Message{{Role: "user", Content: text}, {Role: "user", Content: text}}
	m := CountChatLimit(msgs, nil, 5000)
	require.Greater(t, m, 5000)
	require.Equal(t, CountChat(msgs[:1], nil), CountChatLimit(msgs[:1], nil, 1<<30))
}

// TestMinTokensIsALowerBound: the encoder-free bound never exceeds the count.
func TestMinTokensIsALowerBound(t *testing.T) {
	for _, text := range []string{
		"", "a", "hello world", " leading space", "trailing space ", "a  b   c", "line\nnext\n\nthird",
		string(AppendWords(nil, 9, 3000)), strings.Repeat("x y\n", 500), "émigré café, naïve — 東京 タワー",
		strings.Repeat("(a) [b] {c}, d; e: f! ", 300), strings.Repeat("1234567 89 ", 200),
	} {
		require.LessOrEqual(t, minTokens(text, math.MaxInt), Count(text), "%.40q", text)
	}
	words := string(AppendWords(nil, 1, 100_000))
	require.Greater(t, CountLimit(words, 1000), 1000)
	require.Greater(t, minTokens(words, math.MaxInt), 80_000)
	// With a limit it stops reading as soon as the bound passes it.
	require.Equal(t, 1001, minTokens(words, 1000))
}

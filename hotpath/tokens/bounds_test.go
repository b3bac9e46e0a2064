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

// countBySegment counts text as countText does, without its memo: every
// segment encoded on its own.
func countBySegment(text string) int {
	e, s := encoder(), new(scratch)
	n := 0
	for len(text) > 0 {
		k := cutAt(text)
		n += e.count(text[:k], s)
		text = text[k:]
	}
	return n
}

// TestRepeatedSegmentsCountedOnce: a segment met again within one text
// takes its count from the memo, and the memo never changes a count:
// repeated characters and patterns (of every phase count up to the memo's
// slots and past them), repeated paragraphs, and text between repeats.
func TestRepeatedSegmentsCountedOnce(t *testing.T) {
	para := string(AppendWords(nil, 5, 900))
	for _, text := range []string{
		strings.Repeat("a", 300<<10),
		strings.Repeat("abc", 100<<10),
		strings.Repeat("abcdefgh", 40<<10),
		strings.Repeat("abcdefghi", 40<<10), // nine phases: more than the memo holds
		strings.Repeat("中文", 50<<10),
		strings.Repeat("é", 100<<10) + " tail",
		strings.Repeat(para, 12),
		strings.Repeat("x", 5000) + " " + para + strings.Repeat("x", 5000),
	} {
		require.Equal(t, countBySegment(text), Count(text), "%.30q", text)
		require.Equal(t, countBySegment(text), CountChat([]Message{{Role: "user", Content: text}}, nil)-
			CountChat([]Message{{Role: "user"}}, nil), "%.30q", text)
	}

	// The memo is what makes a repeated run cheap: 8 MiB of one letter
	// cost about 0.8 s of CPU encoded part by part, and is one part's
	// encoding and 8,192 comparisons with it.
	word := strings.Repeat("a", 8<<20)
	Count(" ")
	start := cputest.Used(t)
	n := Count(word)
	used := cputest.Used(t) - start
	require.Equal(t, 8<<20/MaxRun*Count(word[:MaxRun]), n)
	require.Less(t, used, 150*time.Millisecond*cpuScale, "8 MiB of one letter")
}

// TestAppendLetters: n letters, the same for the same seed, one unbroken
// run that only the MaxRun bound cuts.
func TestAppendLetters(t *testing.T) {
	run := AppendLetters(nil, 9, 4096)
	require.Len(t, run, 4096)
	require.Equal(t, run, AppendLetters(nil, 9, 4096))
	require.NotEqual(t, run, AppendLetters(nil, 10, 4096))
	for _, c := range run {
		require.True(t, c >= 'a' && c <= 'z', "%q", c)
	}
	require.Equal(t, MaxRun, cutAt(string(run)), "an unbroken run, cut at MaxRun")
	// The bench's random_word is over mira's 65,536-token window.
	require.Greater(t, Count(string(AppendLetters(nil, 280, 280<<10))), 65536)
}

package tokens

import (
	"math/rand/v2"
	"strings"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
	"github.com/stretchr/testify/require"
)

// reference is the published o200k_base encoder, the oracle the gateway's
// own merge must agree with token for token.
func reference(t testing.TB) *tiktoken.Tiktoken {
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	e, err := tiktoken.GetEncoding(Encoding)
	require.NoError(t, err)
	return e
}

// alphabet mixes what the pre-tokenizer treats differently: cases,
// digits, punctuation, spaces and line ends, apostrophes, non-Latin
// letters, combining marks, emoji, and bytes that are not UTF-8.
var alphabet = []string{
	"a", "e", "t", "q", "z", "A", "T", "Z", "0", "1", "7", "9", " ", " ", "  ", "\n", "\r\n", "\t",
	".", ",", "!", "/", "'s", "'LL", "-", "_", "{", "}", "\"", "é", "ß", "ж", "中", "文", "ـ",
	"\u0301", "😀", "\xff", "\xe2\x82", "th", "ing", "tion", "http://", "==", "\\u00",
}

func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// TestMergeMatchesReference proves the heap merge gives the reference
// encoder's tokens, not only their number: counts and token boundaries are
// compared on random text and on long unbroken runs of every kind.
func TestMergeMatchesReference(t *testing.T) {
	ref := reference(t)
	e := encoder()
	s := new(scratch)
	r := rand.New(rand.NewPCG(1, 2))
	texts := []string{
		"", "assistant\n", "Hello, world! It's 2026.", strings.Repeat("a", MaxRun),
		strings.Repeat("ab", MaxRun/2), strings.Repeat("9", 700), strings.Repeat("!?", 300),
		strings.Repeat(" ", 900), strings.Repeat("\n", 500), strings.Repeat("中文", 150),
		strings.Repeat("xyzzy", 200), "Ünïcödé wörds and CamelCaseWordsLikeThis",
	}
	for range 400 {
		texts = append(texts, randomText(r, 1+r.IntN(300)))
	}
	for range 40 {
		// Unbroken runs: letters only, so the whole run is one piece.
		var b strings.Builder
		for b.Len() < 200+r.IntN(800) {
			b.WriteByte("abcdefghijklmnopqrstuvwxyz"[r.IntN(26)])
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		want := ref.EncodeOrdinary(text)
		require.Equal(t, len(want), e.count(text, s), "count of %q", text)
		// Boundaries: rebuild the reference tokens' byte lengths.
		got := []int{}
		e.segment(text, func(piece string) {
			if _, ok := e.vocab.rank(piece); ok {
				got = append(got, len(piece))
				return
			}
			cuts := e.merge(piece, s)
			for i, c := range cuts {
				end := int32(len(piece))
				if i+1 < len(cuts) {
					end = cuts[i+1]
				}
				got = append(got, int(end-c))
			}
		})
		wantLens := make([]int, len(want))
		for i, id := range want {
			wantLens[i] = len(ref.Decode([]int{id}))
		}
		require.Equal(t, wantLens, got, "tokens of %q", text)
	}
}

// TestLongRunCostIsLinear bounds the merge's work on the worst piece, an
// unbroken run, by counting rank lookups: a quadratic merge makes about
// n²/2 of them for a run of n bytes, this one a small multiple of n.
func TestLongRunCostIsLinear(t *testing.T) {
	e := encoder()
	run := AppendLetters(nil, 3, MaxRun)
	s := new(scratch)
	e.merge(string(run), s)
	lookups := s.lookups
	require.Less(t, lookups, 4*len(run), "rank lookups for a %d-byte run", len(run))
}

// BenchmarkLongRun counts one unbroken 280 KiB word, the hostile
// scenario's: of one repeated letter, and of random letters.
func BenchmarkLongRun(b *testing.B) {
	random := string(AppendLetters(nil, 1, 280<<10))
	for name, text := range map[string]string{"repeated": strings.Repeat("a", 280<<10), "random": random} {
		b.Run(name, func(b *testing.B) {
			Count(text)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				Count(text)
			}
		})
	}
}

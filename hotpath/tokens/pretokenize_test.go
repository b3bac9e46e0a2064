package tokens

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
	"github.com/stretchr/testify/require"
)

// o200kPattern is the o200k_base pre-tokenizer as its encoding defines it:
// the scanner in pretokenize.go must cut every text exactly as it does.
var o200kPattern = strings.Join([]string{
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`\p{N}{1,3}`,
	` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
	`\s*[\r\n]+`,
	`\s+(?!\S)`,
	`\s+`,
}, "|")

// patternPieces cuts text as the pattern does, run by a backtracking
// engine: the oracle for nextPiece.
func patternPieces(t testing.TB, text string) []string {
	re := regexp2.MustCompile(o200kPattern, regexp2.None)
	runes := []rune(text)
	var pieces []string
	m, err := re.FindRunesMatch(runes)
	require.NoError(t, err)
	for m != nil {
		pieces = append(pieces, string(runes[m.Index:m.Index+m.Length]))
		m, err = re.FindNextMatch(m)
		require.NoError(t, err)
	}
	return pieces
}

func scannerPieces(text string) []string {
	var pieces []string
	encoder().segment(text, func(piece string) { pieces = append(pieces, piece) })
	return pieces
}

// preAlphabet holds a character of every class the pattern tells apart,
// beyond ASCII: title case (ǅ), modifier (ʰ) and other letters (中, ـ),
// marks that combine and that do not (U+0301, U+0903), numbers that are
// letters-like or fractions (Ⅻ, ½, ٣), spaces outside ASCII (U+00A0,
// U+0085, U+2028, U+3000), controls, and the contractions in mixed case.
var preAlphabet = []string{
	"a", "Z", "q", "ǅ", "ʰ", "中", "ـ", "é", "ß", "Ж", "\u0301", "\u0903", "Ⅻ", "½", "٣", "7", "42",
	" ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u0085", "\u2028", "\u3000", "\v", "\f",
	"'", "'s", "'S", "'t", "'re", "'RE", "'rE", "'ve", "'m", "'ll", "'Ll", "'d", "'x", "'l",
	".", ",", "/", "//", "-", "\"", "\x00", "\x7f", "😀", "\xff", "\xe2\x82", "http://x.y/z",
}

// TestPretokenizerMatchesPattern holds the scanner to the pattern on
// random texts over every class, and on the texts most likely to tell a
// backtracking rule apart.
func TestPretokenizerMatchesPattern(t *testing.T) {
	texts := []string{
		"", "a", " ", "\n", "  \n  ", "hello world", " hello", "  hello", "\thello", "HELLO", "HELLOworld",
		"Helloʰ", "ǅx", "ǅ", "ʰ", "中文", "\u0301", "a\u0301", "\u0301a", "x'S", "don't", "we'LL", "I'm",
		"you're", "'re", "a're", "a'r", "a'", "123456", "1,234", "   ", "a   b", "a  \n  b", "\r\n\r\n",
		" !!!", " !!!\n", "!!/\n/", "a\u00a0b", "a\u00a0\u00a0b", "x\u0085y",
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 2000 {
		var b strings.Builder
		for n := 1 + r.IntN(30); n > 0; n-- {
			b.WriteString(preAlphabet[r.IntN(len(preAlphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		// The oracle reads the text as runes: each bad byte is U+FFFD.
		require.Equal(t, patternPieces(t, text), scannerPieces(text), "pieces of %q", text)
	}
}

// FuzzPretokenizer holds the scanner to the pattern on any input.
func FuzzPretokenizer(f *testing.F) {
	for _, s := range preAlphabet {
		f.Add(s + " " + s + "x")
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 512 {
			return // the backtracking oracle is slow; the scanner is not
		}
		require.Equal(t, patternPieces(t, text), scannerPieces(text), "pieces of %q", text)
	})
}

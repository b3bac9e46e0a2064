package tokens

import (
	"unicode"
	"unicode/utf8"
)

// The o200k pre-tokenizer, as a scanner. Its definition is the regular
// expression the tests hold it equal to (o200kPattern); a backtracking regular-expression engine
// runs the pattern at a few megabytes a second, which made the pattern, not
// the merge, most of what counting a prompt cost.
//
// The pattern's alternatives, tried in order at each position (the first
// that matches wins, and each tries its own options in the engine's order):
//
//  1. [^\r\n\p{L}\p{N}]?[A]*[B]+('s|'t|'re|'ve|'m|'ll|'d)?   (suffix any case)
//  2. [^\r\n\p{L}\p{N}]?[A]+[B]*('s|'t|'re|'ve|'m|'ll|'d)?
//  3. \p{N}{1,3}
//  4. ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
//  5. \s*[\r\n]+
//  6. \s+(?!\S)
//  7. \s+
//
// with A = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and B = [\p{Ll}\p{Lm}\p{Lo}\p{M}].
// Every character starts some alternative, so the pieces tile the text.

// class is what the scanner needs to know of a character, as bits.
type class uint8

const (
	cLetter  class = 1 << iota // \p{L}
	cNumber                    // \p{N}
	cSpace                     // \s
	cNewline                   // \r or \n
	cUpper                     // A
	cLower                     // B
)

// asciiClass holds the class of each ASCII character.
var asciiClass = func() (t [utf8.RuneSelf]class) {
	for c := range utf8.RuneSelf {
		t[c] = classify(rune(c))
	}
	return t
}()

// classify computes a character's class from the Unicode tables, as the
// pattern's classes read them.
func classify(r rune) class {
	var c class
	switch {
	case unicode.Is(unicode.Lu, r), unicode.Is(unicode.Lt, r):
		c = cLetter | cUpper
	case unicode.Is(unicode.Ll, r):
		c = cLetter | cLower
	case unicode.Is(unicode.Lm, r), unicode.Is(unicode.Lo, r):
		c = cLetter | cUpper | cLower
	case unicode.Is(unicode.M, r):
		c = cUpper | cLower
	case unicode.Is(unicode.N, r):
		c = cNumber
	}
	if unicode.IsSpace(r) {
		c |= cSpace
	}
	if r == '\r' || r == '\n' {
		c |= cNewline
	}
	return c
}

// at decodes the character at i of text (valid UTF-8) and its class.
func at(text string, i int) (rune, int, class) {
	if c := text[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, n := utf8.DecodeRuneInString(text[i:])
	return r, n, classify(r)
}

// prefixable is the class of [^\r\n\p{L}\p{N}].
func prefixable(c class) bool { return c&(cLetter|cNumber|cNewline) == 0 }

// other is the class of [^\s\p{L}\p{N}].
func other(c class) bool { return c&(cLetter|cNumber|cSpace) == 0 }

// nextPiece returns the end of the piece that starts at i (i < len(text),
// text valid UTF-8).
func nextPiece(text string, i int) int {
	_, n, c := at(text, i)
	if c&(cLetter|cUpper|cLower) != 0 || prefixable(c) {
		if prefixable(c) && i+n < len(text) {
			if e := wordTail(text, i+n, true); e > 0 {
				return e
			}
		}
		if e := wordTail(text, i, true); e > 0 {
			return e
		}
		if prefixable(c) && i+n < len(text) {
			if e := wordTail(text, i+n, false); e > 0 {
				return e
			}
		}
		if e := wordTail(text, i, false); e > 0 {
			return e
		}
	}
	if c&cNumber != 0 {
		e := i + n
		for k := 1; k < 3 && e < len(text); k++ {
			_, m, d := at(text, e)
			if d&cNumber == 0 {
				break
			}
			e += m
		}
		return e
	}
	if text[i] == ' ' && i+1 < len(text) {
		if _, _, d := at(text, i+1); other(d) {
			return punctuation(text, i+1)
		}
	}
	if other(c) {
		return punctuation(text, i)
	}
	// c is a space: alternatives 5 to 7. Scan the run of spaces once,
	// noting the last newline in it and where its last character starts.
	e, lastNewline, last := i, -1, i
	for e < len(text) {
		_, m, d := at(text, e)
		if d&cSpace == 0 {
			break
		}
		if d&cNewline != 0 {
			lastNewline = e + m
		}
		last = e
		e += m
	}
	switch {
	case lastNewline > 0: // \s*[\r\n]+ backs off to the run's last newline
		return lastNewline
	case e == len(text): // \s+(?!\S) at the end of the text
		return e
	case last > i: // \s+(?!\S) leaves the space before the word
		return last
	default:
		return e
	}
}

// wordTail matches, from q, [A]*[B]+ (lowerLed) or [A]+[B]* (not
// lowerLed), then the optional contraction, and returns the end, or -1.
func wordTail(text string, q int, lowerLed bool) int {
	// The greedy run of A, remembering the end of its last B character:
	// where [A]*[B]+ lands when it must give characters back.
	e, backoff := q, -1
	for e < len(text) {
		_, m, d := at(text, e)
		if d&cUpper == 0 {
			break
		}
		e += m
		if d&cLower != 0 {
			backoff = e
		}
	}
	if !lowerLed && e == q {
		return -1
	}
	// The greedy run of B after it.
	f := e
	for f < len(text) {
		_, m, d := at(text, f)
		if d&cLower == 0 {
			break
		}
		f += m
	}
	if lowerLed && f == e {
		if backoff < 0 {
			return -1
		}
		f = backoff
	}
	return contraction(text, f)
}

// contraction returns the end of ('s|'t|'re|'ve|'m|'ll|'d), matched without
// regard to case, at e, or e when there is none.
func contraction(text string, e int) int {
	if e+1 >= len(text) || text[e] != '\'' {
		return e
	}
	r, n, _ := at(text, e+1)
	switch unicode.ToLower(r) {
	case 's', 't', 'm', 'd':
		return e + 1 + n
	case 'r', 'v':
		return follow(text, e+1+n, 'e', e)
	case 'l':
		return follow(text, e+1+n, 'l', e)
	}
	return e
}

// follow returns the end of want at j, matched without regard to case, or
// miss.
func follow(text string, j int, want rune, miss int) int {
	if j >= len(text) {
		return miss
	}
	if r, n, _ := at(text, j); unicode.ToLower(r) == want {
		return j + n
	}
	return miss
}

// punctuation matches [^\s\p{L}\p{N}]+[\r\n/]* from j, whose character is
// one of the first class, and returns the end.
func punctuation(text string, j int) int {
	for j < len(text) {
		_, m, d := at(text, j)
		if !other(d) {
			break
		}
		j += m
	}
	for j < len(text) && (text[j] == '\r' || text[j] == '\n' || text[j] == '/') {
		j++
	}
	return j
}

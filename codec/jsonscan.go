package codec

import (
	"encoding/binary"
	"errors"
	"math/bits"
)

// Strict JSON scanning without decoding. The helpers here find the spans of
// values in a JSON text and validate the grammar of RFC 8259 as they go;
// they never allocate and never copy. Like encoding/json, they do not check
// that strings are valid UTF-8.

// maxJSONDepth is the deepest nesting of objects and arrays skipValue
// accepts; encoding/json allows 10000.
const maxJSONDepth = 1000

var (
	errJSONSyntax = errors.New("invalid JSON")
	errJSONDepth  = errors.New("JSON nested too deeply")
)

// ValidJSONString reports whether raw is exactly one JSON string literal,
// quotes included, with valid escapes and no control characters. Like
// encoding/json.Valid it does not check that the bytes are valid UTF-8.
func ValidJSONString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	end, err := skipString(raw, 0)
	return err == nil && end == len(raw)
}

// isJSONSpace reports whether c is JSON whitespace.
func isJSONSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t'
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace, or len(b).
func skipSpace(b []byte, i int) int {
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// skipValue skips the whitespace at b[i:] and the JSON value after it, and
// returns the index just past the value. It validates the value, and fails
// on objects and arrays nested deeper than maxJSONDepth. It does not skip
// the whitespace after the value. On failure end is where the error was
// found.
func skipValue(b []byte, i int) (end int, err error) {
	i = skipSpace(b, i)
	if i < len(b) && (b[i] == '{' || b[i] == '[') {
		return skipContainer(b, i)
	}
	return skipScalar(b, i)
}

// skipScalar skips the string, number or literal at b[i].
func skipScalar(b []byte, i int) (int, error) {
	if i >= len(b) {
		return i, errJSONSyntax
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case 't':
		return skipLiteral(b, i, "true")
	case 'f':
		return skipLiteral(b, i, "false")
	case 'n':
		return skipLiteral(b, i, "null")
	}
	return skipNumber(b, i)
}

// skipContainer skips the object or array whose opening brace or bracket
// is at b[i], iteratively.
func skipContainer(b []byte, i int) (int, error) {
	// stack has bit d set when nesting level d is an object.
	var stack [(maxJSONDepth + 63) / 64]uint64
	depth := 0
	var err error
	for {
		// A value starts at i.
		i = skipSpace(b, i)
		if i >= len(b) {
			return i, errJSONSyntax
		}
		if c := b[i]; c == '{' || c == '[' {
			if depth == maxJSONDepth {
				return i, errJSONDepth
			}
			if c == '{' {
				stack[depth>>6] |= 1 << (depth & 63)
			} else {
				stack[depth>>6] &^= 1 << (depth & 63)
			}
			depth++
			i = skipSpace(b, i+1)
			if i >= len(b) {
				return i, errJSONSyntax
			}
			if b[i] != c+2 { // '}' and ']' follow '{' and '[' by two
				if c == '{' {
					if i, err = skipKey(b, i); err != nil {
						return i, err
					}
				}
				continue
			}
			i++
			depth--
		} else if i, err = skipScalar(b, i); err != nil {
			return i, err
		}

		// After a value: close containers until one goes on.
		for {
			if depth == 0 {
				return i, nil
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, errJSONSyntax
			}
			d := depth - 1
			isObject := stack[d>>6]&(1<<(d&63)) != 0
			c := b[i]
			if c == ',' {
				i++
				if isObject {
					if i, err = skipKey(b, skipSpace(b, i)); err != nil {
						return i, err
					}
				}
				break
			}
			if isObject && c == '}' || !isObject && c == ']' {
				i++
				depth--
				continue
			}
			return i, errJSONSyntax
		}
	}
}

// skipKey skips an object key at b[i], the whitespace after it and the
// colon, and returns the index after the colon.
func skipKey(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return i, errJSONSyntax
	}
	i, err := skipString(b, i)
	if err != nil {
		return i, err
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, errJSONSyntax
	}
	return i + 1, nil
}

// skipLiteral skips lit (true, false or null) at b[i].
func skipLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, errJSONSyntax
	}
	return i + len(lit), nil
}

// skipNumber skips the number at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) (int, error) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, errJSONSyntax
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return i, errJSONSyntax
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return j, errJSONSyntax
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return j, errJSONSyntax
		}
		i = j
	}
	return i, nil
}

// skipDigits returns the index of the first byte at or after i that is not
// an ASCII digit, eight bytes at a time while there are eight.
func skipDigits(b []byte, i int) int {
	for i+8 <= len(b) {
		if m := nonDigitMask8(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for i < len(b) && b[i]-'0' <= 9 {
		i++
	}
	return i
}

// nonDigitMask8 returns a word with the high bit of every byte of x (in
// little-endian order) that is not an ASCII digit set: a digit's high
// nibble is 3 and its low nibble plus 6 stays below 16. No step carries
// across bytes.
func nonDigitMask8(x uint64) uint64 {
	const hiNibbles, loNibbles = 0xF0F0F0F0F0F0F0F0, 0x0F0F0F0F0F0F0F0F
	const threes, sixes = 0x3030303030303030, 0x0606060606060606
	const low7, high = 0x7F7F7F7F7F7F7F7F, 0x8080808080808080
	nd := (x&hiNibbles ^ threes) | ((x&loNibbles + sixes) & hiNibbles)
	return ((nd&low7 + low7) | nd) & high
}

// skipString skips the string literal whose opening quote is at b[i] and
// returns the index after its closing quote.
func skipString(b []byte, i int) (int, error) {
	i++
	for {
		// Skip plain bytes eight at a time, up to the first that is not.
		for i+8 <= len(b) {
			if m := stringMask8(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(b) {
			return i, errJSONSyntax
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(b) {
				return i, errJSONSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, errJSONSyntax
				}
				i += 6
			default:
				return i, errJSONSyntax
			}
		case c < 0x20:
			return i, errJSONSyntax
		default:
			i++
		}
	}
}

// stringMask8 returns a word whose lowest set bit lies in the first byte of
// x (in little-endian order) that ends a run of plain string bytes: '"',
// '\\' or a control character. It is zero when there is none. Bytes >= 0x80
// are plain. Borrows only mark bytes above one already marked, so the
// lowest mark is exact.
func stringMask8(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	return ((x - 0x20*lo) | ((x ^ '"'*lo) - lo) | ((x ^ '\\'*lo) - lo)) &^ x & hi
}

// isHex reports whether c is an ASCII hex digit.
func isHex(c byte) bool {
	return c-'0' <= 9 || (c|0x20)-'a' <= 5
}

// parseInt parses raw, the span of a JSON number, as an int64. It fails
// when raw is not an integer (a fraction or an exponent) or overflows.
func parseInt(raw []byte) (int64, bool) {
	neg := len(raw) > 0 && raw[0] == '-'
	digits := raw
	if neg {
		digits = raw[1:]
	}
	if len(digits) == 0 || digits[0] == '0' && len(digits) > 1 {
		return 0, false
	}
	var n uint64
	for _, c := range digits {
		d := uint64(c - '0')
		if d > 9 || n > (1<<63-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if neg {
		return -int64(n), true // n == 1<<63 wraps to math.MinInt64
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

// objectIter walks the members of a JSON object without closures:
//
//	var it objectIter
//	if !it.start(b, i) { ... it.err ... }
//	for key, ok := it.next(); ok; key, ok = it.next() {
//		// it.pos is the start of the member's value: consume it with
//		// it.value, it.skip or a parser that sets it.pos past the value.
//	}
//	if it.err != nil { ... }
//	// it.pos is past the closing brace.
//
// Keys are returned raw, between the quotes and with escapes intact, so
// they compare by their bytes; that is exact for the plain ASCII keys of the
// wire formats parsed here.
type objectIter struct {
	b   []byte
	pos int
	n   int // members returned
	err error
}

// start positions it on the object at b[i:], after whitespace. It fails
// when no object starts there.
func (it *objectIter) start(b []byte, i int) bool {
	*it = objectIter{b: b}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		it.err = errJSONSyntax
		return false
	}
	it.pos = i + 1
	return true
}

// next returns the next member's key and leaves it.pos at its value. It
// reports ok=false at the closing brace, leaving it.pos past it, and on a
// syntax error, setting it.err.
func (it *objectIter) next() (key []byte, ok bool) {
	if it.err != nil {
		return nil, false
	}
	b := it.b
	i := skipSpace(b, it.pos)
	if i >= len(b) {
		return it.fail(i)
	}
	if b[i] == '}' {
		it.pos = i + 1
		return nil, false
	}
	if it.n > 0 {
		if b[i] != ',' {
			return it.fail(i)
		}
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return it.fail(i)
	}
	end, err := skipString(b, i)
	if err != nil {
		return it.fail(end)
	}
	key = b[i+1 : end-1]
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return it.fail(i)
	}
	it.pos = skipSpace(b, i+1)
	it.n++
	return key, true
}

func (it *objectIter) fail(i int) ([]byte, bool) {
	it.pos = i
	it.err = errJSONSyntax
	return nil, false
}

// value skips the current member's value and returns its raw span.
func (it *objectIter) value() ([]byte, bool) {
	start := it.pos
	end, err := skipValue(it.b, start)
	if err != nil {
		it.pos, it.err = end, err
		return nil, false
	}
	it.pos = end
	return it.b[start:end], true
}

// skip skips the current member's value.
func (it *objectIter) skip() {
	it.value()
}

// arrayIter walks the elements of a JSON array the way objectIter walks
// members: next leaves it.pos at the element, which the caller consumes.
type arrayIter struct {
	b   []byte
	pos int
	n   int // elements returned
	err error
}

// start positions it on the array at b[i:], after whitespace.
func (it *arrayIter) start(b []byte, i int) bool {
	*it = arrayIter{b: b}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '[' {
		it.err = errJSONSyntax
		return false
	}
	it.pos = i + 1
	return true
}

// next reports whether another element follows, and leaves it.pos at it.
// It reports false at the closing bracket, leaving it.pos past it, and on a
// syntax error, setting it.err.
func (it *arrayIter) next() bool {
	if it.err != nil {
		return false
	}
	b := it.b
	i := skipSpace(b, it.pos)
	if i >= len(b) {
		return it.fail(i)
	}
	if b[i] == ']' {
		it.pos = i + 1
		return false
	}
	if it.n > 0 {
		if b[i] != ',' {
			return it.fail(i)
		}
		i = skipSpace(b, i+1)
	}
	it.pos = i
	it.n++
	return true
}

func (it *arrayIter) fail(i int) bool {
	it.pos = i
	it.err = errJSONSyntax
	return false
}

// skip skips the current element.
func (it *arrayIter) skip() {
	end, err := skipValue(it.b, it.pos)
	it.pos = end
	if err != nil {
		it.err = err
	}
}

// ArrayLongerThan reports whether the top-level object in body has a member
// key whose value is an array of more than n elements. It reads the body
// once, stops at the (n+1)th element and allocates nothing, so a request
// can be refused for a bound before it is decoded: decoding 20,000 tools
// costs milliseconds of CPU and megabytes of garbage only to be refused.
// Malformed JSON reports false, and the decoder then says what is wrong.
func ArrayLongerThan(body []byte, key string, n int) bool {
	var obj objectIter
	if !obj.start(body, 0) {
		return false
	}
	for {
		k, ok := obj.next()
		if !ok {
			return false
		}
		if string(k) != key {
			obj.skip()
			continue
		}
		var arr arrayIter
		if !arr.start(body, obj.pos) {
			obj.skip()
			continue
		}
		for arr.next() {
			if arr.n > n {
				return true
			}
			arr.skip()
		}
		if arr.err != nil {
			return false
		}
		obj.pos = arr.pos
	}
}

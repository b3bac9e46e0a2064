package frameorder

// A small strict JSON walker for the frames the checker reads beyond what
// codec.ParseChunk reports. It validates the grammar of RFC 8259 as it
// goes, never allocates and never copies: values are spans of the input.
// Keys are compared as raw bytes, escapes undecoded (the gateway never
// escapes a key).

import (
	"encoding/binary"
	"math/bits"
)

// maxDepth is the deepest nesting of objects and arrays accepted.
const maxDepth = 64

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// watchKey is the member name the walker reports wherever it appears.
const watchKey = "reasoning_content"

// skipValue validates the value starting at b[i] (no leading whitespace)
// and returns the index just past it. When found is not nil it is set to
// true if an object anywhere in the value has a member named watchKey.
func skipValue(b []byte, i, depth int, found *bool) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{':
		return skipObject(b, i, depth+1, found)
	case c == '[':
		return skipArray(b, i, depth+1, found)
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	}
	return i, false
}

func skipLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return i, false
}

// skipString skips the string literal at b[i] (its opening quote). Plain
// runs are skipped eight bytes at a time.
func skipString(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		for len(b)-j >= 8 {
			m := stringStops(binary.LittleEndian.Uint64(b[j:]))
			if m != 0 {
				j += bits.TrailingZeros64(m) / 8
				break
			}
			j += 8
		}
		if j >= len(b) {
			return len(b), false
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c == '\\':
			j++
			if j >= len(b) {
				return j, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-j < 5 || !isHex(b[j+1]) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) {
					return j, false
				}
				j += 4
			default:
				return j, false
			}
		case c < 0x20:
			return j, false
		}
		j++
	}
}

// stringStops marks, in the high bit of each byte of the eight bytes v
// (little endian), the bytes a string cannot hold as they are: a quote, a
// backslash or a control character. The lowest mark is exact; marks above
// it may be spurious.
func stringStops(v uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q := v ^ (lo * '"')
	s := v ^ (lo * '\\')
	return ((v-lo*0x20) & ^v | (q-lo) & ^q | (s-lo) & ^s) & hi
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// skipNumber skips the number at b[i].
func skipNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, true
}

func skipObject(b []byte, i, depth int, found *bool) (int, bool) {
	if depth > maxDepth {
		return i, false
	}
	it := object{b: b, i: i + 1, depth: depth}
	for key, ok := it.next(); ok; key, ok = it.next() {
		if found != nil && string(key) == watchKey {
			*found = true
		}
		if !it.skip(found) {
			return it.i, false
		}
	}
	return it.i, !it.bad
}

func skipArray(b []byte, i, depth int, found *bool) (int, bool) {
	if depth > maxDepth {
		return i, false
	}
	it := array{b: b, i: i + 1, depth: depth}
	for it.next() {
		if !it.skip(found) {
			return it.i, false
		}
	}
	return it.i, !it.bad
}

// object iterates the members of an object. After next reports a key, i
// is at the member's value, which the caller consumes with skip or value
// before calling next again.
type object struct {
	b     []byte
	i     int
	n     int
	depth int
	bad   bool
}

// openObject starts iterating the object that is the whole of raw (with
// surrounding whitespace), or reports false when raw is not an object.
func openObject(raw []byte) (object, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return object{}, false
	}
	return object{b: raw, i: i + 1, depth: 1}, true
}

func (o *object) next() (key []byte, ok bool) {
	b := o.b
	i := skipSpace(b, o.i)
	if i >= len(b) {
		o.bad = true
		return nil, false
	}
	if b[i] == '}' {
		o.i = i + 1
		return nil, false
	}
	if o.n > 0 {
		if b[i] != ',' {
			o.bad = true
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		o.bad = true
		return nil, false
	}
	end, good := skipString(b, i)
	if !good {
		o.bad = true
		return nil, false
	}
	key = b[i+1 : end-1]
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		o.bad = true
		return nil, false
	}
	o.i = skipSpace(b, i+1)
	o.n++
	return key, true
}

// skip consumes the current member's value.
func (o *object) skip(found *bool) bool {
	end, ok := skipValue(o.b, o.i, o.depth, found)
	o.i = end
	if !ok {
		o.bad = true
	}
	return ok
}

// value consumes the current member's value and returns its span.
func (o *object) value(found *bool) ([]byte, bool) {
	start := o.i
	if !o.skip(found) {
		return nil, false
	}
	return o.b[start:o.i], true
}

// array iterates the elements of an array; after next reports true, i is
// at the element, which the caller consumes with skip or value.
type array struct {
	b     []byte
	i     int
	n     int
	depth int
	bad   bool
}

func openArray(raw []byte) (array, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return array{}, false
	}
	return array{b: raw, i: i + 1, depth: 1}, true
}

func (a *array) next() bool {
	b := a.b
	i := skipSpace(b, a.i)
	if i >= len(b) {
		a.bad = true
		return false
	}
	if b[i] == ']' {
		a.i = i + 1
		return false
	}
	if a.n > 0 {
		if b[i] != ',' {
			a.bad = true
			return false
		}
		i = skipSpace(b, i+1)
	}
	a.i = i
	a.n++
	return true
}

func (a *array) skip(found *bool) bool {
	end, ok := skipValue(a.b, a.i, a.depth, found)
	a.i = end
	if !ok {
		a.bad = true
	}
	return ok
}

func (a *array) value() ([]byte, bool) {
	start := a.i
	if !a.skip(nil) {
		return nil, false
	}
	return a.b[start:a.i], true
}

// member returns the span of the member key of the object raw, or nil
// when raw is not an object or has no such member. A member given twice
// reads as its last value, as in encoding/json.
func member(raw []byte, key string) []byte {
	o, ok := openObject(raw)
	if !ok {
		return nil
	}
	var v []byte
	for k, more := o.next(); more; k, more = o.next() {
		span, good := o.value(nil)
		if !good {
			return nil
		}
		if string(k) == key {
			v = span
		}
	}
	return v
}

// isString reports whether raw is a JSON string literal.
func isString(raw []byte) bool { return len(raw) >= 2 && raw[0] == '"' }

// isObject reports whether raw is a JSON object.
func isObject(raw []byte) bool { return len(raw) >= 2 && raw[0] == '{' }

// isNull reports whether raw is the literal null.
func isNull(raw []byte) bool { return string(raw) == "null" }

// isEmptyObject reports whether raw is an object with no members.
func isEmptyObject(raw []byte) bool {
	o, ok := openObject(raw)
	if !ok {
		return false
	}
	_, more := o.next()
	return !more && !o.bad
}

// unquote returns the contents of the string literal raw without its
// quotes, escapes left as they are.
func unquote(raw []byte) []byte {
	if !isString(raw) {
		return nil
	}
	return raw[1 : len(raw)-1]
}

// toolIndex reads a tool-call fragment's index: a non-negative integer
// below one million.
func toolIndex(raw []byte) (int, bool) {
	if len(raw) == 0 || len(raw) > 6 {
		return 0, false
	}
	n := 0
	for _, c := range raw {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if len(raw) > 1 && raw[0] == '0' {
		return 0, false
	}
	return n, true
}

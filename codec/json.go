package codec

import (
	"math/bits"
	"unicode/utf8"
	"unsafe"
)

const hexDigits = "0123456789abcdef"

// jsonSafe[b] is true for ASCII bytes that may appear unescaped inside a
// JSON string. Bytes >= 0x80 are false and take the UTF-8 path.
var jsonSafe = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// AppendJSONString appends s to dst as a quoted JSON string and returns the
// extended buffer.
//
// It escapes '"', '\\' and control characters (\n, \r, \t, \b and \f by name,
// the rest as \u00XX), and U+2028 and U+2029, which JavaScript treats as line
// terminators. Each run of invalid UTF-8 bytes becomes a single \ufffd, so
// the decoded value equals strings.ToValidUTF8(s, "\uFFFD"). HTML characters
// ('<', '>', '&') are not escaped.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0   // s[start:i] is pending, to be copied as is
	runEnd := -1 // end of the last invalid UTF-8 byte; an invalid byte there extends its run
	for i := 0; i < len(s); {
		// Skip safe ASCII eight bytes at a time, then up to the first byte
		// that needs attention.
		if i+8 <= len(s) {
			m := unsafeMask8(load8(s, i))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		}
		b := s[i]
		if b < utf8.RuneSelf {
			if jsonSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendEscapedASCII(dst, b)
			i++
			start = i
			continue
		}
		// Stay on the rune path while the text is not ASCII.
		for i < len(s) && s[i] >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				dst = append(dst, s[start:i]...)
				if i != runEnd {
					dst = append(dst, `\ufffd`...)
				}
				runEnd = i + 1
			case r == '\u2028' || r == '\u2029':
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\u202`...)
				dst = append(dst, hexDigits[r&0xf])
			default:
				i += size
				continue
			}
			i += size
			start = i
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendJSONBytes is AppendJSONString for a byte slice. It does not retain b.
func AppendJSONBytes(dst, b []byte) []byte {
	return AppendJSONString(dst, b2s(b))
}

// appendEscapedASCII appends the escape sequence of the ASCII byte b, which
// is '"', '\\' or a control character.
func appendEscapedASCII(dst []byte, b byte) []byte {
	switch b {
	case '"', '\\':
		return append(dst, '\\', b)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
}

// load8 returns the eight bytes of s at i as a little-endian word.
func load8(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// unsafeMask8 returns a word whose lowest set bit lies in the first byte of
// x (in little-endian order) that needs the slow path: a control character,
// '"', '\\' or a byte >= 0x80. It is zero when all eight bytes are safe.
// A subtraction that borrows can only mark bytes above a byte that is
// already marked, so the lowest mark is exact.
func unsafeMask8(x uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	return (x | (x - 0x20*lo) | ((x ^ '"'*lo) - lo) | ((x ^ '\\'*lo) - lo)) & hi
}

// StringLiteralView returns the value of the JSON string literal raw when
// it holds no escape, as a view of raw's bytes without copying: it is valid
// only while raw is, and must not be kept past it. ok is false for anything
// else, which the caller decodes instead.
func StringLiteralView(raw []byte) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' || c == '"' {
			return "", false
		}
	}
	return b2s(inner), true
}

// BytesView returns b as a string without copying, for a decoder that
// reads a string and keeps views of it (sonic.NoCopyRawMessage): the string
// and every view taken of it are valid only while b is unchanged, and must
// not be kept past the buffer b belongs to.
func BytesView(b []byte) string { return b2s(b) }

// b2s converts b to a string without copying. The string must not outlive
// b or be used after b changes.
func b2s(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

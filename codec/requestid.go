package codec

import "slices"

// MaxRequestIDLen is the longest request id ValidRequestID accepts.
const MaxRequestIDLen = 128

// UUIDLen is the length of the text form AppendUUID writes.
const UUIDLen = 36

// requestIDChar[b] is true for the bytes allowed in a request id.
var requestIDChar = func() (t [256]bool) {
	for b := range 256 {
		t[b] = b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
	}
	return t
}()

// ValidRequestID reports whether b is an acceptable client-supplied request
// id: 1 to MaxRequestIDLen bytes of [A-Za-z0-9_-]. Such an id needs no
// escaping in JSON or in a header.
func ValidRequestID(b []byte) bool {
	if len(b) == 0 || len(b) > MaxRequestIDLen {
		return false
	}
	for _, c := range b {
		if !requestIDChar[c] {
			return false
		}
	}
	return true
}

// UUIDv7 returns the two halves of an RFC 9562 version 7 UUID, first eight
// bytes then last eight: the 48 low bits of unixMilli, then 74 bits taken
// from the random hi and lo (the low 12 bits of hi, the low 62 of lo; the
// version and variant bits overwrite the rest). Ids minted later sort
// later, as text and as bytes, so an index of them grows at its right edge
// instead of at a random page.
func UUIDv7(unixMilli int64, hi, lo uint64) (uint64, uint64) {
	hi = uint64(unixMilli)<<16 | 0x7<<12 | hi&0x0fff // version 7: high nibble of byte 6
	lo = lo&^(0x3<<62) | 0x2<<62                     // variant 10xx: top bits of byte 8
	return hi, lo
}

// AppendUUIDv7 appends the version 7 UUID UUIDv7 makes of unixMilli, hi
// and lo to dst, lowercase, in the 36-character form
// xxxxxxxx-xxxx-7xxx-Vxxx-xxxxxxxxxxxx.
func AppendUUIDv7(dst []byte, unixMilli int64, hi, lo uint64) []byte {
	hi, lo = UUIDv7(unixMilli, hi, lo)
	n := len(dst)
	dst = slices.Grow(dst, UUIDLen)[:n+UUIDLen]
	b := dst[n:]
	hexUint(b[0:8], hi>>32)
	b[8] = '-'
	hexUint(b[9:13], hi>>16)
	b[13] = '-'
	hexUint(b[14:18], hi)
	b[18] = '-'
	hexUint(b[19:23], lo>>48)
	b[23] = '-'
	hexUint(b[24:36], lo)
	return dst
}

// hexUint fills b with the len(b) low hex digits of v, most significant first.
func hexUint(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = hexDigits[v&0xf]
		v >>= 4
	}
}

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

// AppendUUID appends a lowercase RFC 9562 version 4 UUID built from the 128
// random bits hi (the first eight bytes) and lo (the last eight) to dst, in
// the 36-character form xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx. The version
// and variant bits of hi and lo are overwritten, leaving 122 random bits.
func AppendUUID(dst []byte, hi, lo uint64) []byte {
	hi = hi&^(0xf<<12) | 0x4<<12 // version 4: high nibble of byte 6
	lo = lo&^(0x3<<62) | 0x2<<62 // variant 10xx: top bits of byte 8

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

package codec

// TraceparentLen is the length of a version-00 W3C traceparent:
// "00-" 32 hex digits "-" 16 hex digits "-" 2 hex digits.
const TraceparentLen = 55

// MaxTracestateLen is the longest tracestate forwarded with a traceparent;
// a longer one is dropped whole (W3C Trace Context allows a vendor to
// drop what it cannot carry).
const MaxTracestateLen = 512

// ValidTraceparent reports whether b is a W3C traceparent (Trace Context
// level 1) that can be carried on: a version other than ff, a trace id and
// a parent id of lowercase hex that are not all zeros, and flags. A
// version above 00 may carry more fields after a dash; only the first 55
// bytes are read, as the specification says a reader of an older version
// does.
func ValidTraceparent(b []byte) bool {
	if len(b) < TraceparentLen || len(b) > TraceparentLen && (b[0] == '0' && b[1] == '0' || b[TraceparentLen] != '-') {
		return false
	}
	if !lowerHex(b[0:2]) || b[0] == 'f' && b[1] == 'f' || b[2] != '-' || b[35] != '-' || b[52] != '-' {
		return false
	}
	return lowerHex(b[3:35]) && !allZero(b[3:35]) && lowerHex(b[36:52]) && !allZero(b[36:52]) && lowerHex(b[53:55])
}

func lowerHex(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}

// AppendTraceparent appends a version-00 traceparent for trace id hi:lo
// and parent id span, flags 00 (not sampled). A zero trace id or span is
// made non-zero, since W3C forbids both.
func AppendTraceparent(dst []byte, hi, lo, span uint64) []byte {
	if hi|lo == 0 {
		lo = 1
	}
	if span == 0 {
		span = 1
	}
	dst = append(dst, "00-"...)
	dst = appendHex64(dst, hi)
	dst = appendHex64(dst, lo)
	dst = append(dst, '-')
	dst = appendHex64(dst, span)
	return append(dst, "-00"...)
}

func appendHex64(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[(v>>uint(shift))&0xf])
	}
	return dst
}

// AppendTraceparentIDs appends the version-00 traceparent for a trace id
// and a span id in their binary form, with the sampled flag when sampled.
func AppendTraceparentIDs(dst []byte, traceID [16]byte, spanID [8]byte, sampled bool) []byte {
	dst = append(dst, "00-"...)
	dst = appendHexBytes(dst, traceID[:])
	dst = append(dst, '-')
	dst = appendHexBytes(dst, spanID[:])
	if sampled {
		return append(dst, "-01"...)
	}
	return append(dst, "-00"...)
}

func appendHexBytes(dst, src []byte) []byte {
	const digits = "0123456789abcdef"
	for _, v := range src {
		dst = append(dst, digits[v>>4], digits[v&0xf])
	}
	return dst
}

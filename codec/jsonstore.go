package codec

import "bytes"

// Bounds on a stored JSON number's decimal magnitude: the significand's
// first digit times 10^e, with e within float64's range. PostgreSQL's jsonb
// holds far more (10^131071), but writes such a number out in full: nine
// bytes of request could become 128 KiB of stored text.
const (
	maxNumberExp = 308
	minNumberExp = -324
)

// JSONUnstorable reports why PostgreSQL would refuse to store raw, a
// compacted and valid JSON text, as jsonb, or "" when it would not: a NUL
// character (valid JSON carries it only as the escape \u0000), an escaped
// surrogate that is not half of a pair, or a number outside the bounds
// above. Any of these would otherwise reach the database and fail there.
func JSONUnstorable(raw []byte) string {
	if bytes.IndexByte(raw, 0) >= 0 {
		return "must not contain NUL characters."
	}
	why := ""
	findUnstorable(raw, func(kind unstorable, _, _ int) bool {
		why = kind.String()
		return false
	})
	return why
}

// StorableJSON returns raw, a compacted and valid JSON text, with what jsonb
// would refuse put right: a NUL and an unpaired surrogate escape become
// \ufffd, a number beyond the bounds null. A text that is storable comes
// back as it is. It stores what a model wrote, which the gateway may not
// refuse as it refuses a request.
func StorableJSON(raw []byte) []byte {
	if JSONUnstorable(raw) == "" {
		return raw
	}
	out := make([]byte, 0, len(raw)+8)
	last := 0
	findUnstorable(raw, func(kind unstorable, at, end int) bool {
		out = append(out, raw[last:at]...)
		if kind == unstorableNumber {
			out = append(out, "null"...)
		} else {
			out = append(out, `\ufffd`...)
		}
		last = end
		return true
	})
	return append(out, raw[last:]...)
}

// unstorable is what jsonb refuses in a JSON text.
type unstorable int

const (
	unstorableNUL unstorable = iota
	unstorableSurrogate
	unstorableNumber
)

func (u unstorable) String() string {
	switch u {
	case unstorableNUL:
		return "must not contain NUL characters."
	case unstorableSurrogate:
		return "must not contain an unpaired surrogate escape."
	}
	return "must not contain a number beyond 1e308 in magnitude, or below 1e-324 other than zero."
}

// findUnstorable calls found with each stretch raw[at:end] that jsonb would
// refuse, in order, until found returns false.
func findUnstorable(raw []byte, found func(kind unstorable, at, end int) bool) {
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == 0:
			if !found(unstorableNUL, i, i+1) {
				return
			}
		case inString && c == '\\':
			if i+1 < len(raw) && raw[i+1] == 'u' {
				r, ok := hex4(raw, i+2)
				switch {
				case !ok:
				case r == 0:
					if !found(unstorableNUL, i, i+6) {
						return
					}
				case r >= 0xDC00 && r <= 0xDFFF:
					if !found(unstorableSurrogate, i, i+6) {
						return
					}
				case r >= 0xD800 && r <= 0xDBFF:
					if lo, ok := hex4(raw, i+8); !ok || raw[i+6] != '\\' || raw[i+7] != 'u' || lo < 0xDC00 || lo > 0xDFFF {
						if !found(unstorableSurrogate, i, i+6) {
							return
						}
					} else {
						i += 6 // the low half is read
					}
				}
				i += 5
			} else {
				i++ // the escaped character, which starts nothing
			}
		case c == '"':
			inString = !inString
		case !inString && (c == '-' || c >= '0' && c <= '9'):
			n := numberEnd(raw, i)
			if !storableNumber(raw[i:n]) && !found(unstorableNumber, i, n) {
				return
			}
			i = n - 1
		}
	}
}

// hex4 reads the four hex digits at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// numberEnd is the end of the number token starting at raw[i].
func numberEnd(raw []byte, i int) int {
	for i < len(raw) {
		switch c := raw[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			i++
		default:
			return i
		}
	}
	return i
}

// storableNumber reports whether the JSON number n is zero or has its first
// significant digit at a power of ten within [minNumberExp, maxNumberExp].
func storableNumber(n []byte) bool {
	if len(n) > 0 && n[0] == '-' {
		n = n[1:]
	}
	// first is the power of ten of the first nonzero digit before the
	// exponent applies; ok is false while every digit is zero.
	var first, intDigits int
	ok, frac := false, false
	i := 0
	for ; i < len(n) && n[i] != 'e' && n[i] != 'E'; i++ {
		switch c := n[i]; {
		case c == '.':
			frac = true
		case !frac:
			if ok || c != '0' {
				if !ok {
					ok = true
				}
				intDigits++
			}
		case !ok:
			first--
			if c != '0' {
				ok = true
			}
		}
	}
	if !ok {
		return true // zero, whatever its exponent
	}
	if intDigits > 0 {
		first = intDigits - 1
	}
	exp, sign := 0, 1
	if i < len(n) {
		i++
		if i < len(n) && (n[i] == '-' || n[i] == '+') {
			if n[i] == '-' {
				sign = -1
			}
			i++
		}
		for ; i < len(n); i++ {
			if exp < 1e6 {
				exp = exp*10 + int(n[i]-'0')
			}
		}
	}
	e := first + sign*exp
	return e >= minNumberExp && e <= maxNumberExp
}

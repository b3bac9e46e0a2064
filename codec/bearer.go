package codec

// token68Char[b] is true for the RFC 6750 token68 characters
// A-Z a-z 0-9 - . _ ~ + / (the '=' padding is handled separately).
var token68Char = func() (t [256]bool) {
	for b := range 256 {
		t[b] = b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' ||
			b == '-' || b == '.' || b == '_' || b == '~' || b == '+' || b == '/'
	}
	return t
}()

// ParseBearer extracts the token from an Authorization header value of the
// form
//
//	Bearer <token68>
//
// The scheme is matched case-insensitively and must be followed by one or
// more spaces or tabs. The token is one or more of A-Za-z0-9-._~+/ followed
// by optional '=' padding; trailing spaces and tabs are allowed, and nothing
// else may follow. Leading whitespace is not accepted.
//
// The returned token aliases h: copy it before h is reused.
func ParseBearer(h []byte) (token []byte, ok bool) {
	const scheme = "bearer"
	if len(h) < len(scheme)+2 {
		return nil, false
	}
	for i := range len(scheme) {
		if h[i]|0x20 != scheme[i] { // scheme is lowercase letters only
			return nil, false
		}
	}
	i := len(scheme)
	if h[i] != ' ' && h[i] != '\t' {
		return nil, false
	}
	for i < len(h) && (h[i] == ' ' || h[i] == '\t') {
		i++
	}
	start := i
	for i < len(h) && token68Char[h[i]] {
		i++
	}
	if i == start {
		return nil, false
	}
	for i < len(h) && h[i] == '=' {
		i++
	}
	end := i
	for i < len(h) && (h[i] == ' ' || h[i] == '\t') {
		i++
	}
	if i != len(h) {
		return nil, false
	}
	return h[start:end], true
}

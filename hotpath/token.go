package hotpath

import (
	"crypto/rand"
	"crypto/sha256"
	"hash/crc32"
)

// TokenKind tells a user key from a service token by its prefix.
type TokenKind uint8

const (
	// TokenInvalid is anything that is not a well-formed token.
	TokenInvalid TokenKind = iota
	// TokenUser is a gw_live_ user key (signed-in, developer or headless).
	TokenUser
	// TokenService is a gw_svc_ service token minted by an operator.
	TokenService
)

// Token prefixes. Everything after a prefix is opaque to clients.
const (
	UserPrefix    = "gw_live_"
	ServicePrefix = "gw_svc_"
)

// A token is prefix + 43 random base62 characters (256 bits) + 6 base62
// characters of CRC-32 over the random part. The checksum lets the gateway
// refuse mistyped or made-up tokens without a database round trip; it is not
// a secret and adds no strength.
const (
	tokenBodyLen  = 43
	tokenCheckLen = 6
	tokenTailLen  = tokenBodyLen + tokenCheckLen
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// TokenHash is the SHA-256 of a whole token, prefix included. Only hashes are
// stored and cached; the secret itself lives only in the client's hands.
type TokenHash [32]byte

// HashToken returns the hash under which a token is stored.
func HashToken(token []byte) TokenHash {
	return sha256.Sum256(token)
}

// GenerateToken returns a fresh random token of the given kind and its hash.
func GenerateToken(kind TokenKind) (string, TokenHash) {
	prefix := UserPrefix
	if kind == TokenService {
		prefix = ServicePrefix
	}
	buf := make([]byte, 0, len(prefix)+tokenTailLen)
	buf = append(buf, prefix...)
	var rnd [64]byte
	for n := 0; n < tokenBodyLen; {
		_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails on supported platforms
		for _, b := range rnd {
			// Rejection sampling keeps every character equally likely.
			if b >= 248 {
				continue
			}
			buf = append(buf, base62[b%62])
			if n++; n == tokenBodyLen {
				break
			}
		}
	}
	buf = appendChecksum(buf, buf[len(prefix):])
	return string(buf), HashToken(buf)
}

func appendChecksum(dst, body []byte) []byte {
	sum := crc32.ChecksumIEEE(body)
	var tmp [tokenCheckLen]byte
	for i := tokenCheckLen - 1; i >= 0; i-- {
		tmp[i] = base62[sum%62]
		sum /= 62
	}
	return append(dst, tmp[:]...)
}

// CheckToken reports the kind of a well-formed token with a valid checksum,
// or TokenInvalid. It allocates nothing.
func CheckToken(token []byte) TokenKind {
	var kind TokenKind
	var tail []byte
	switch {
	case hasPrefix(token, UserPrefix):
		kind, tail = TokenUser, token[len(UserPrefix):]
	case hasPrefix(token, ServicePrefix):
		kind, tail = TokenService, token[len(ServicePrefix):]
	default:
		return TokenInvalid
	}
	if len(tail) != tokenTailLen {
		return TokenInvalid
	}
	for _, c := range tail {
		if !isBase62(c) {
			return TokenInvalid
		}
	}
	var want [tokenCheckLen]byte
	if string(appendChecksum(want[:0], tail[:tokenBodyLen])) != string(tail[tokenBodyLen:]) {
		return TokenInvalid
	}
	return kind
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

func isBase62(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

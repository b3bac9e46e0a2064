package codec

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseBearer(t *testing.T) {
	long := strings.Repeat("A", 4096)
	tests := []struct {
		name  string
		in    string
		token string
		ok    bool
	}{
		{"simple", "Bearer sk-abc123", "sk-abc123", true},
		{"lower scheme", "bearer tok", "tok", true},
		{"upper scheme", "BEARER tok", "tok", true},
		{"mixed scheme", "bEaReR tok", "tok", true},
		{"all token68 chars", "Bearer AZaz09-._~+/==", "AZaz09-._~+/==", true},
		{"padding only after chars", "Bearer abc===", "abc===", true},
		{"several spaces", "Bearer  \t tok", "tok", true},
		{"tab separator", "Bearer\ttok", "tok", true},
		{"trailing whitespace", "Bearer tok \t ", "tok", true},
		{"long token", "Bearer " + long, long, true},
		{"empty", "", "", false},
		{"scheme only", "Bearer", "", false},
		{"scheme and space", "Bearer ", "", false},
		{"no separator", "Bearertok", "", false},
		{"basic scheme", "Basic dXNlcjpwYXNz", "", false},
		{"leading space", " Bearer tok", "", false},
		{"padding only", "Bearer ==", "", false},
		{"padding in middle", "Bearer ab=cd", "", false},
		{"two tokens", "Bearer tok more", "", false},
		{"comma", "Bearer tok,", "", false},
		{"crlf", "Bearer tok\r\n", "", false},
		{"nul", "Bearer tok\x00", "", false},
		{"unicode token", "Bearer tøk", "", false},
		{"non-breaking space", "Bearer\u00a0tok", "", false},
		{"quoted", `Bearer "tok"`, "", false},
		{"scheme lookalike", "Bearer\x00tok", "", false},
		{"shifted scheme", "B\x05arer tok", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := []byte(tt.in)
			token, ok := ParseBearer(h)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.token, string(token))
			if ok {
				require.Same(t, &h[strings.Index(tt.in, tt.token)], &token[0], "token aliases h")
			}
		})
	}
}

var bearerRe = regexp.MustCompile(`^(?i:bearer)[ \t]+([A-Za-z0-9\-._~+/]+=*)[ \t]*$`)

func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{
		"", "Bearer", "Bearer ", "Bearer tok", "bearer\ttok\t", "BEARER a==",
		"Bearer ==", "Bearer a=b", "Bearer tok\r\n", "Bearer tok\x00", "Bearer\x00tok",
		"Bearer tøk", "Bearer\u00a0tok", "Basic dXNlcjpwYXNz", " Bearer tok",
		"Bearer " + strings.Repeat("t", 8192), "Bearer 🎉",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		token, ok := ParseBearer([]byte(s))
		m := bearerRe.FindStringSubmatch(s)
		require.Equal(t, m != nil, ok, "input %q", s)
		if ok {
			require.Equal(t, m[1], string(token), "input %q", s)
		} else {
			require.Nil(t, token)
		}
	})
}

func BenchmarkParseBearer(b *testing.B) {
	h := []byte("Bearer sk-live-0123456789abcdefghijklmnopqrstuvwxyzABCDEF")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseBearer(h); !ok {
			b.Fatal("rejected")
		}
	}
}

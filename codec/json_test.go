package codec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestAppendJSONString(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty", "", `""`},
		{"ascii", "hello, world", `"hello, world"`},
		{"quote and backslash", `a"b\c`, `"a\"b\\c"`},
		{"named controls", "\n\r\t\b\f", `"\n\r\t\b\f"`},
		{"other controls", "\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"del kept", "\x7f", "\"\x7f\""},
		{"html kept", "<a href='x'>&</a>", `"<a href='x'>&</a>"`},
		{"slash kept", "a/b", `"a/b"`},
		{"crlf", "line\r\nnext", `"line\r\nnext"`},
		{"multibyte kept", "héllo 世界 🎉", `"héllo 世界 🎉"`},
		{"line separators", "a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"replacement char kept", "\uFFFD", "\"\uFFFD\""},
		{"invalid byte", "a\xffb", `"a\ufffdb"`},
		{"invalid run collapsed", "a\xff\xfe\xfdb", `"a\ufffdb"`},
		{"truncated rune", "\xe4\xb8", `"\ufffd"`},
		{"invalid runs split by valid", "\xff\uFFFD\xff", "\"\\ufffd\uFFFD\\ufffd\""},
		{"invalid runs split by escape", "\xff\n\xff", `"\ufffd\n\ufffd"`},
		{"surrogate half", "\xed\xa0\x80", `"\ufffd"`},
		{"overlong", "\xc0\xaf", `"\ufffd"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, string(AppendJSONString(nil, tt.in)))
			require.Equal(t, "x"+tt.want, string(AppendJSONBytes([]byte("x"), []byte(tt.in))))
			checkJSONString(t, tt.in, AppendJSONString(nil, tt.in))
		})
	}
}

// TestAppendJSONStringWordBoundaries puts each kind of special byte at every
// offset around the eight-byte fast path.
func TestAppendJSONStringWordBoundaries(t *testing.T) {
	specials := []struct {
		name string
		s    string
	}{
		{"quote", `"`}, {"backslash", `\`}, {"nul", "\x00"}, {"unit separator", "\x1f"},
		{"space", " "}, {"del", "\x7f"}, {"latin", "é"}, {"emoji", "🎉"},
		{"invalid", "\xff"}, {"line separator", "\u2028"},
	}
	for _, sp := range specials {
		t.Run(sp.name, func(t *testing.T) {
			for pre := 0; pre <= 17; pre++ {
				for post := 0; post <= 9; post++ {
					s := strings.Repeat("a", pre) + sp.s + strings.Repeat("z", post)
					checkJSONString(t, s, AppendJSONString(nil, s))
				}
			}
		})
	}
}

// TestAppendJSONStringMatchesEncodingJSON compares with encoding/json on
// valid UTF-8 without HTML characters, where both must agree byte for byte.
func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	var all strings.Builder
	for r := rune(0); r < 0x3000; r++ {
		if r == '<' || r == '>' || r == '&' {
			continue
		}
		all.WriteRune(r)
	}
	tests := []struct {
		name string
		in   string
	}{
		{"bmp prefix", all.String()},
		{"astral", "𝄞😀\U0010FFFF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal(tt.in)
			require.NoError(t, err)
			require.Equal(t, string(want), string(AppendJSONString(nil, tt.in)))
		})
	}
}

// checkJSONString is the fuzz oracle: out is valid JSON that decodes to s
// with each run of invalid UTF-8 replaced by U+FFFD.
func checkJSONString(t *testing.T, s string, out []byte) {
	t.Helper()
	if !json.Valid(out) || !utf8.Valid(out) {
		t.Fatalf("AppendJSONString(%q) = %q: not valid JSON in UTF-8", s, out)
	}
	if bytes.ContainsRune(out, '\u2028') || bytes.ContainsRune(out, '\u2029') {
		t.Fatalf("AppendJSONString(%q) = %q: raw line separator", s, out)
	}
	var got string
	require.NoError(t, json.Unmarshal(out, &got))
	if want := strings.ToValidUTF8(s, "\uFFFD"); got != want {
		t.Fatalf("AppendJSONString(%q) = %q decodes to %q, want %q", s, out, got, want)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{
		"",
		"plain ascii",
		`"\`,
		"\x00",
		"a\x00b",
		"\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"\u2028\u2029",
		"héllo 世界 🎉",
		"\uFFFD\xff\uFFFD",
		"\xff\xfe",
		"\xed\xa0\x80\xed\xbf\xbf",
		"\xf4\x90\x80\x80",
		"\xe4\xb8",
		strings.Repeat("long ", 200),
		strings.Repeat("\x01é\xff\u2028", 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendJSONString(nil, s)
		checkJSONString(t, s, out)
		if b := AppendJSONBytes(nil, []byte(s)); !bytes.Equal(b, out) {
			t.Fatalf("AppendJSONBytes(%q) = %q, AppendJSONString = %q", s, b, out)
		}
		if p := AppendJSONString([]byte("pre"), s); string(p[:3]) != "pre" || !bytes.Equal(p[3:], out) {
			t.Fatalf("AppendJSONString with prefix = %q", p)
		}
	})
}

func BenchmarkAppendJSONString(b *testing.B) {
	inputs := []struct {
		name string
		s    string
	}{
		{"ascii", strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)},
		{"escapes", strings.Repeat("line \"one\"\n\tline two\\\n", 40)},
		{"unicode", strings.Repeat("Grüße aus 東京 🎉 ", 40)},
		{"cjk", strings.Repeat("東京都の天気は晴れです。", 30)},
	}
	for _, in := range inputs {
		b.Run(in.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.s)))
			dst := make([]byte, 0, 4*len(in.s))
			for b.Loop() {
				dst = AppendJSONString(dst[:0], in.s)
			}
		})
	}
}

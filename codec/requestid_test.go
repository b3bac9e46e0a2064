package codec

import (
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidRequestID(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"empty", "", false},
		{"one byte", "a", true},
		{"all classes", "AZaz09_-", true},
		{"uuid", "0f8fad5b-d9cb-469f-a165-70867728950e", true},
		{"max length", strings.Repeat("x", 128), true},
		{"too long", strings.Repeat("x", 129), false},
		{"space", "req 1", false},
		{"dot", "req.1", false},
		{"quote", `req"1`, false},
		{"crlf", "req\r\n", false},
		{"nul", "req\x00", false},
		{"unicode", "réq", false},
		{"high byte", "\xff", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, ValidRequestID([]byte(tt.in)))
		})
	}
}

var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func FuzzValidRequestID(f *testing.F) {
	for _, s := range []string{
		"", "a", "req_01-ABC", "0f8fad5b-d9cb-469f-a165-70867728950e",
		strings.Repeat("z", 128), strings.Repeat("z", 129), strings.Repeat("9", 4096),
		"req\r\n", "\x00", "réq", "\xff", "a b", "a\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		require.Equal(t, requestIDRe.MatchString(s), ValidRequestID([]byte(s)), "input %q", s)
	})
}

// checkUUIDv4 is a hand-written check of the 8-4-4-4-12 lowercase form with
// version 4 and variant 10xx.
func checkUUIDv4(t *testing.T, s string) {
	t.Helper()
	require.Len(t, s, 36)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			require.Equalf(t, byte('-'), c, "byte %d of %q", i, s)
		default:
			require.Truef(t, c >= '0' && c <= '9' || c >= 'a' && c <= 'f', "byte %d of %q", i, s)
		}
	}
	require.Equal(t, byte('4'), s[14], "version of %q", s)
	require.Contains(t, "89ab", string(s[19]), "variant of %q", s)
}

func TestAppendUUID(t *testing.T) {
	tests := []struct {
		name   string
		hi, lo uint64
		want   string
	}{
		{"zero", 0, 0, "00000000-0000-4000-8000-000000000000"},
		{"ones", math.MaxUint64, math.MaxUint64, "ffffffff-ffff-4fff-bfff-ffffffffffff"},
		{"pattern", 0x0123456789abcdef, 0xfedcba9876543210, "01234567-89ab-4def-bedc-ba9876543210"},
		{"rfc 9562 example bits", 0x919108f752d133a0, 0x2ee4ad1b9b1b4c11, "919108f7-52d1-43a0-aee4-ad1b9b1b4c11"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendUUID([]byte("id="), tt.hi, tt.lo)
			require.Equal(t, "id="+tt.want, string(got))
			checkUUIDv4(t, string(got[3:]))
			require.True(t, ValidRequestID(got[3:]))
		})
	}
}

func TestAppendUUIDRandomBits(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 { // splitmix64
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return z ^ z>>31
	}
	seen := make(map[string]bool)
	for range 1000 {
		s := string(AppendUUID(nil, next(), next()))
		checkUUIDv4(t, s)
		require.False(t, seen[s])
		seen[s] = true
	}
}

func BenchmarkValidRequestID(b *testing.B) {
	id := []byte("0f8fad5b-d9cb-469f-a165-70867728950e")
	b.ReportAllocs()
	for b.Loop() {
		if !ValidRequestID(id) {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkAppendUUID(b *testing.B) {
	b.ReportAllocs()
	dst := make([]byte, 0, UUIDLen)
	for b.Loop() {
		dst = AppendUUID(dst[:0], 0x0123456789abcdef, 0xfedcba9876543210)
	}
}

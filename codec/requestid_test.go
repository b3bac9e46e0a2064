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

// checkUUIDv7 is a hand-written check of the 8-4-4-4-12 lowercase form with
// version 7 and variant 10xx.
func checkUUIDv7(t *testing.T, s string) {
	t.Helper()
	require.Len(t, s, 36)
	for i := range len(s) {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			require.Equalf(t, byte('-'), c, "byte %d of %q", i, s)
		default:
			require.Truef(t, c >= '0' && c <= '9' || c >= 'a' && c <= 'f', "byte %d of %q", i, s)
		}
	}
	require.Equal(t, byte('7'), s[14], "version of %q", s)
	require.Contains(t, "89ab", string(s[19]), "variant of %q", s)
}

func TestAppendUUIDv7(t *testing.T) {
	tests := []struct {
		name   string
		ms     int64
		hi, lo uint64
		want   string
	}{
		{"zero", 0, 0, 0, "00000000-0000-7000-8000-000000000000"},
		{"ones", 1<<48 - 1, math.MaxUint64, math.MaxUint64, "ffffffff-ffff-7fff-bfff-ffffffffffff"},
		{"only 48 bits of time", 1<<48 | 5, 0, 0, "00000000-0005-7000-8000-000000000000"},
		// RFC 9562, appendix A.6: 2022-02-22 19:22:22 UTC.
		{"rfc 9562 example", 0x017f22e279b0, 0xcc3, 0x18c4dc0c0c07398f, "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendUUIDv7([]byte("id="), tt.ms, tt.hi, tt.lo)
			require.Equal(t, "id="+tt.want, string(got))
			checkUUIDv7(t, string(got[3:]))
			require.True(t, ValidRequestID(got[3:]))
		})
	}
}

func TestAppendUUIDv7RandomBitsAndOrder(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 { // splitmix64
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return z ^ z>>31
	}
	seen := make(map[string]bool)
	prev, ms := "", int64(1_700_000_000_000)
	for i := range 1000 {
		ms += int64(1 + i%3) // a later millisecond each time
		s := string(AppendUUIDv7(nil, ms, next(), next()))
		checkUUIDv7(t, s)
		require.False(t, seen[s])
		seen[s] = true
		require.Less(t, prev, s, "an id minted later sorts later")
		prev = s
	}
}

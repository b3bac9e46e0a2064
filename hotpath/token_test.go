package hotpath

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGenerateTokenRoundTrips(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		tok, h := GenerateToken(TokenUser)
		require.True(t, strings.HasPrefix(tok, UserPrefix))
		require.Len(t, tok, len(UserPrefix)+tokenTailLen)
		require.Equal(t, TokenUser, CheckToken([]byte(tok)))
		require.Equal(t, HashToken([]byte(tok)), h)
		require.False(t, seen[tok])
		seen[tok] = true
	}
	svc, _ := GenerateToken(TokenService)
	require.Equal(t, TokenService, CheckToken([]byte(svc)))
}

func TestCheckTokenRefuses(t *testing.T) {
	good, _ := GenerateToken(TokenUser)
	flip := []byte(good)
	flip[len(UserPrefix)+3] ^= 1 // still base62, checksum no longer matches
	cases := map[string]string{
		"empty":        "",
		"prefix only":  UserPrefix,
		"other prefix": "sk-" + good[len(UserPrefix):],
		"short":        good[:len(good)-1],
		"long":         good + "A",
		"bad char":     good[:len(good)-2] + "-" + good[len(good)-1:],
		"bad checksum": string(flip),
		"uppercase":    strings.ToUpper(UserPrefix) + good[len(UserPrefix):],
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, TokenInvalid, CheckToken([]byte(tok)))
		})
	}
}

func FuzzCheckToken(f *testing.F) {
	good, _ := GenerateToken(TokenUser)
	f.Add(good)
	f.Add("gw_svc_")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		kind := CheckToken([]byte(s))
		if kind == TokenInvalid {
			return
		}
		// Whatever passes has the exact shape and a matching checksum.
		prefix := UserPrefix
		if kind == TokenService {
			prefix = ServicePrefix
		}
		require.True(t, strings.HasPrefix(s, prefix))
		tail := s[len(prefix):]
		require.Len(t, tail, tokenTailLen)
		require.Equal(t, string(appendChecksum(nil, []byte(tail[:tokenBodyLen]))), tail[tokenBodyLen:])
	})
}

func TestScopes(t *testing.T) {
	s, err := ParseScopes([]string{"memory", " rules ", ""})
	require.NoError(t, err)
	require.True(t, s.Has(FamilyMemory))
	require.True(t, s.Has(FamilyRules))
	require.True(t, s.Has(FamilyNone))
	require.False(t, s.Has(FamilyChat))
	require.Equal(t, []string{"memory", "rules"}, s.Names())

	var all Scopes
	require.True(t, all.Has(FamilyChat))
	require.Equal(t, FamilyNames(), all.Names(), "an unscoped key's effective list is every family")
	require.Equal(t, []string{}, all.Stored())

	_, err = ParseScopes([]string{"chat", "admin"})
	require.ErrorContains(t, err, `"admin"`)
}

func TestMicroUSD(t *testing.T) {
	ok := map[string]int64{"0.76": 760_000, "12": 12_000_000, "0.000001": 1, ".5": 500_000, "3.": 3_000_000, "0": 0}
	for in, want := range ok {
		got, err := ParseMicroUSD(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", ".", "-1", "1e3", "0.0000001", "1,5", " 1", "99999999999999999999"} {
		_, err := ParseMicroUSD(in)
		require.Error(t, err, in)
	}
	out := map[int64]string{760_000: "0.76", 12_000_000: "12", 1: "0.000001", 0: "0", -1_500_000: "-1.5"}
	for in, want := range out {
		require.Equal(t, want, string(AppendMicroUSD(nil, in)))
	}
}

func TestDefaultTiersValid(t *testing.T) {
	tiers := DefaultTiers()
	require.Len(t, tiers, 3)
	caps := map[string]int{"kavi": 8192, "vaani": 4096, "mira": 2048}
	for _, tr := range tiers {
		require.NoError(t, tr.Validate(), tr.Name)
		require.Equal(t, caps[tr.Name], tr.MaxOutput, tr.Name)
		require.True(t, IsTierName(tr.Name))
	}
	bad := tiers[0]
	bad.DefaultEffort = "minimal"
	require.ErrorContains(t, bad.Validate(), "default_effort")
}

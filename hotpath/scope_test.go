package hotpath

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestScopesLacking(t *testing.T) {
	parse := func(names ...string) Scopes {
		s, err := ParseScopes(names)
		require.NoError(t, err)
		return s
	}
	chatOrg := parse("chat", "org")
	require.Equal(t, FamilyNone, parse("chat").Lacking(chatOrg))
	require.Equal(t, FamilyMemory, parse("chat", "memory").Lacking(chatOrg))
	require.Equal(t, FamilyTokens, Scopes(0).Lacking(chatOrg), "an unscoped set holds every family")
	require.Equal(t, FamilyNone, parse("memory").Lacking(0), "an unscoped holder lacks nothing")
	require.Equal(t, FamilyNone, Scopes(0).Lacking(0))
}

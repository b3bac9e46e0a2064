package proxy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseGuard(t *testing.T) {
	f := func(reply string, ok, flagged bool, codes ...string) {
		t.Helper()
		v, got := parseGuard(reply)
		require.Equal(t, ok, got, "%q", reply)
		if !ok {
			return
		}
		require.Equal(t, flagged, v.flagged, "%q", reply)
		if flagged {
			if codes == nil {
				codes = []string{}
			}
			require.Equal(t, codes, v.codes, "%q", reply)
		}
	}
	f("safe", true, false)
	f("\n\nsafe\n", true, false)
	f("Safe", true, false)
	f("unsafe", true, true)
	f("unsafe\nS1", true, true, "S1")
	f("\n\nunsafe\nS1,S10\n", true, true, "S1", "S10")
	f("unsafe\nS10, s2 ,S10", true, true, "S10", "S2")
	f("unsafe\nS15", true, true, "S15") // unknown: kept, no category
	// Not verdicts: never guessed.
	f("", false, false)
	f("safe\nS1", false, false)
	f("unsafe\nS1\nS2", false, false)
	f("unsafe\nviolence", false, false)
	f("unsafe\nS", false, false)
	f("unsafe\nS01", false, false)
	f("unsafe\nS0", false, false)
	f("unsafe\nS100", false, false)
	f("I think it is safe", false, false)
	f("safety first", false, false)
}

func TestHazardBitsFollowTheTable(t *testing.T) {
	for code, cats := range HazardCategories {
		v, ok := parseGuard("unsafe\n" + code)
		require.True(t, ok)
		var names []string
		for i, name := range ModerationCategories {
			if v.cats&(1<<i) != 0 {
				names = append(names, name)
			}
		}
		require.ElementsMatch(t, cats, names, code)
	}
	for _, code := range []string{"S6", "S7", "S8", "S13"} {
		require.Empty(t, HazardCategories[code], "the spec maps %s to no category", code)
	}
}

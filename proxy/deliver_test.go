package proxy

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A reply past the kept bound hands its text to the background counter in
// pieces, at word boundaries; the kept text stays bounded and the counts
// add up to the count of the whole text.
func TestDeliverCountsLongRepliesInBoundedMemory(t *testing.T) {
	// Words arrive in pieces, as upstreams send them: " inter", "national".
	words := []string{"international", "gateway", "streaming", "tokens,", "quickly.", "Übermensch", "naïvely", "123456", "x=42;", "don't", "\n\n", "😀😀", "résumé", "C++", "--", "  spaced"}
	var all []byte
	tr := &turn{}
	maxLen := 0
	for i := range 90000 {
		w := " " + words[i*7%len(words)]
		cut := len(w) / 2
		for _, piece := range []string{w[:cut], w[cut:]} {
			frag := []byte(strconv.Quote(piece))
			all = append(all, frag...)
			tr.deliver(frag)
			maxLen = max(maxLen, len(tr.delivered))
		}
	}
	require.Greater(t, len(all), 3*deliveredKeep)
	require.Less(t, maxLen, deliveredKeep+64, "the kept text stays bounded")
	got := tr.foldedTokens()
	require.Positive(t, got, "text was counted in the background")
	got += int64(countLiterals(tr.delivered))
	require.Equal(t, int64(countLiterals(all)), got)
}

// Replies within the bound are never counted while they stream.
func TestDeliverKeepsRepliesWithinTheBound(t *testing.T) {
	tr := &turn{}
	var all []string
	for i := range 20000 {
		frag := fmt.Sprintf("%q", " word"+strconv.Itoa(i))
		all = append(all, frag)
		tr.deliver([]byte(frag))
	}
	require.Zero(t, tr.foldedTokens())
	require.Equal(t, strings.Join(all, ""), string(tr.delivered))
}

package proxy

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A long stream keeps a bounded buffer of delivered text, and the tokens it
// counts in pieces are the tokens of the whole text.
func TestDeliverCountsLongRepliesInBoundedMemory(t *testing.T) {
	// Words arrive in pieces, as upstreams send them: " inter", "national".
	words := []string{"international", "gateway", "streaming", "tokens,", "quickly.", "Übermensch", "naïvely", "123456", "x=42;", "don't", "\n\n", "😀😀", "résumé", "C++", "--", "  spaced"}
	var all []byte
	tr := &turn{}
	maxCap := 0
	for i := range 12000 {
		w := " " + words[i*7%len(words)]
		cut := len(w) / 2
		for _, piece := range []string{w[:cut], w[cut:]} {
			frag := []byte(strconv.Quote(piece))
			all = append(all, frag...)
			tr.deliver(frag)
			maxCap = max(maxCap, cap(tr.delivered))
		}
	}
	require.Less(t, maxCap, 4*deliveredFold, "the kept text stays bounded")
	require.Positive(t, tr.deliveredTokens, "text was folded into the count")
	got := tr.deliveredTokens + int64(countLiterals(tr.delivered))
	require.Equal(t, int64(countLiterals(all)), got)
}

// Short replies are counted once, at the end, exactly as before.
func TestDeliverShortReplyIsNotFolded(t *testing.T) {
	tr := &turn{}
	var all []string
	for i := range 20 {
		frag := fmt.Sprintf("%q", " word"+strconv.Itoa(i))
		all = append(all, frag)
		tr.deliver([]byte(frag))
	}
	require.Zero(t, tr.deliveredTokens)
	require.Equal(t, strings.Join(all, ""), string(tr.delivered))
}

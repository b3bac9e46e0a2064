package memory

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodeDecodeCosine(t *testing.T) {
	v := Decode(Encode(nil, []float32{3, 4}))
	require.InDelta(t, 0.6, v[0], 1e-6)
	require.InDelta(t, 0.8, v[1], 1e-6)
	require.InDelta(t, 1, Cosine(v, v), 1e-6)
	require.Zero(t, Cosine(v, []float32{1, 0, 0}), "different lengths")
	require.Nil(t, Decode([]byte{1, 2, 3}), "malformed")
	require.Nil(t, Decode(nil))
}

func TestRankKeepsTheBudgetAndTheThreshold(t *testing.T) {
	q := []float32{1, 0, 0}
	cands := []Candidate{
		{Scope: "personal", Key: "far", Value: "x", Vector: []float32{0, 1, 0}},
		{Scope: "org", Key: "near", Value: "y", Vector: []float32{0.9, 0.1, 0}},
		{Scope: "vault", Key: "words", Value: "z", TextRank: 0.1},
		{Scope: "personal", Key: "big", Value: string(make([]byte, 4096)), Vector: []float32{1, 0, 0}},
		{Scope: "vault", Key: "mentioned", Value: "m", Vector: []float32{0.5, 0.5, 0}, Mentioned: true},
	}
	var keys []string
	for _, r := range Rank(cands, q, BudgetTokens) {
		keys = append(keys, r.Key)
	}
	require.Equal(t, []string{"near", "mentioned", "words"}, keys, "best first; below the threshold and over the budget left out")
	keys = keys[:0]
	for _, r := range Rank(cands, nil, BudgetTokens) {
		keys = append(keys, r.Key)
	}
	require.Equal(t, []string{"words"}, keys, "without a query vector, full text alone")
}

package proxy

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/memory"
	"github.com/edgegw/gateway/hotpath/meter"
)

// A signed-in turn reads rules and recalls once it is admitted; a turn
// the limits refuse never reaches the store.
func TestMemoryRunsOnlyForAdmittedTurns(t *testing.T) {
	store := &countingStore{}
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.RequestsPerMinute = 1 }))
	p := uncapped()
	p.Kind = hotpath.KindSignedIn
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.limits, o.principal = l, p
		o.memory = &MemoryConfig{Store: store, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	})
	body := `{"model":"mira","max_tokens":8,"memory":{"capture":false},"messages":[{"role":"user","content":"hello there"}]}`
	require.Equal(t, 200, f.post(t, "/api/v1/chat", body).status)
	require.EqualValues(t, 2, store.calls.Load(), "rules and candidates")
	require.Equal(t, 429, f.post(t, "/api/v1/chat", body).status)
	require.EqualValues(t, 2, store.calls.Load(), "a refused turn reads nothing")
}

func TestRankKeepsTheBudgetAndTheThreshold(t *testing.T) {
	q := []float32{1, 0, 0}
	cands := []memory.Candidate{
		{Scope: "personal", Key: "far", Value: "x", Vector: []float32{0, 1, 0}},
		{Scope: "org", Key: "near", Value: "y", Vector: []float32{0.9, 0.1, 0}},
		{Scope: "vault", Key: "words", Value: "z", TextRank: 0.1},
		{Scope: "personal", Key: "big", Value: string(make([]byte, 4096)), Vector: []float32{1, 0, 0}},
		{Scope: "vault", Key: "mentioned", Value: "m", Vector: []float32{0.5, 0.5, 0}, Mentioned: true},
	}
	var keys []string
	for _, r := range memory.Rank(cands, q, memory.BudgetTokens) {
		keys = append(keys, r.Key)
	}
	require.Equal(t, []string{"near", "mentioned", "words"}, keys, "best first; below the threshold and over the budget left out")
	keys = keys[:0]
	for _, r := range memory.Rank(cands, nil, memory.BudgetTokens) {
		keys = append(keys, r.Key)
	}
	require.Equal(t, []string{"words"}, keys, "without a query vector, full text alone")
}

// countingStore counts every call chat makes to the memory store.
type countingStore struct{ calls atomic.Int64 }

func (s *countingStore) Candidates(context.Context, memory.Caller, string) ([]memory.Candidate, error) {
	s.calls.Add(1)
	return nil, nil
}

func (s *countingStore) Capture(context.Context, memory.Caller, []memory.Fact, [][]float32) ([]memory.Captured, error) {
	s.calls.Add(1)
	return nil, nil
}

func (s *countingStore) Rules(context.Context, memory.Caller) ([]memory.Rule, error) {
	s.calls.Add(1)
	return nil, nil
}

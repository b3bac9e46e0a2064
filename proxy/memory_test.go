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

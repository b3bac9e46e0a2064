package meter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// entries counts what m holds, sweeping every shard at now first.
func (m *MemoryCounters) entries(now time.Time) (windows, leases, budgets int) {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		sh.maybeSweep(now.UnixMilli())
		windows += len(sh.windows)
		leases += len(sh.leases) + len(sh.held)
		budgets += len(sh.budgets)
		sh.mu.Unlock()
	}
	return windows, leases, budgets
}

// Memory stays bounded: what has ended is dropped as time moves on, and
// nothing that still counts is.
func TestMemoryCountersDropWhatEnded(t *testing.T) {
	m := NewMemoryCounters(nil)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC)
	out := make([]WindowState, 1)
	var open Reservation
	for i := range 200 {
		_, err := m.Hit(ctx, t0, []Window{{Key: fmt.Sprintf("rl:key:%d", i), Limit: 5, Length: time.Minute}}, out)
		require.NoError(t, err)
		l := admitOK(t, m, t0, &Admission{LeaseKey: fmt.Sprintf("cc:%d", i), LeaseLimit: 1}, new(Reservation))
		require.NoError(t, m.Finish(ctx, l, new(Reservation), nil))
		subject := fmt.Sprintf("s%d", i)
		var r Reservation
		admitOK(t, m, t0, &Admission{Budgets: []Budget{
			{Kind: BudgetKeySpend, Subject: subject, Cap: -1},
			{Kind: BudgetCredits, Subject: subject, Cap: -1},
			{Kind: BudgetPoolBurst, Subject: subject, Cap: -1},
		}, Amounts: []int64{1, 1, 1}}, &r)
		if i == 0 {
			open = r
		}
	}
	held := admitOK(t, m, t0, &Admission{LeaseKey: "cc:held", LeaseLimit: 1}, new(Reservation))

	w, l, b := m.entries(t0.Add(30 * time.Second))
	require.Equal(t, []int{200, 200 + 1 + 1, 600}, []int{w, l, b}, "nothing has ended yet")

	w, l, b = m.entries(t0.Add(2 * time.Minute))
	require.Zero(t, w, "ended windows are dropped")
	require.Equal(t, 2, l, "idle lease sets are dropped; the held lease stays")
	require.Equal(t, 600, b)

	_, _, b = m.entries(t0.Add(2 * time.Hour))
	require.Equal(t, 600, b, "the old month is kept for late settlements")
	require.NoError(t, m.Finish(ctx, Lease{}, &open, []int64{5, 5, 5}))
	st := make([]BudgetState, 1)
	require.NoError(t, m.Usage(ctx, t0, []Budget{{Kind: BudgetKeySpend, Subject: "s0"}}, st))
	require.Equal(t, int64(5), st[0].Used, "a settlement after the rollover corrects March")

	_, _, b = m.entries(t0.Add(13 * time.Hour))
	require.Equal(t, 400, b, "burst rings with nothing in the window are dropped")
	_, _, b = m.entries(time.Date(2026, 4, 11, 0, 0, 0, 0, time.UTC))
	require.Equal(t, 200, b, "a month counter goes 40 days after its month began")
	_, l, b = m.entries(t0.Add(LifetimeCounterIdle + time.Hour))
	require.Zero(t, b, "idle lifetime counters go too")
	require.Equal(t, 2, l)
	require.NoError(t, m.Finish(ctx, held, new(Reservation), nil))
	_, l, _ = m.entries(t0.Add(LifetimeCounterIdle + 2*time.Hour))
	require.Zero(t, l)
}

// admitOK admits a and returns the slot it took.
func admitOK(t *testing.T, m *MemoryCounters, now time.Time, a *Admission, r *Reservation) Lease {
	t.Helper()
	res, err := m.Admit(context.Background(), now, a, r)
	require.NoError(t, err)
	require.Equal(t, AdmitOK, res.Refused)
	return res.Lease
}

type panickySeeder struct{ panics bool }

func (s *panickySeeder) SeedBudget(ctx context.Context, b Budget, from, to time.Time, slot time.Duration) ([]int64, error) {
	if s.panics {
		panic("seeder bug")
	}
	return NoSeeder{}.SeedBudget(ctx, b, from, to, slot)
}

// A seeder that panics fails its caller loudly and leaves no caller
// waiting on a seed that will never come.
func TestMemoryCountersSeederPanic(t *testing.T) {
	s := &panickySeeder{panics: true}
	m := NewMemoryCounters(s)
	b := []Budget{{Kind: BudgetKeySpend, Subject: "k", Cap: 10}}
	now := time.Now()
	a := func() *Admission { return &Admission{Budgets: b, Amounts: []int64{1}} }
	require.Panics(t, func() { _, _ = m.Admit(context.Background(), now, a(), new(Reservation)) })
	s.panics = false
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			res, err := m.Admit(context.Background(), now, a(), new(Reservation))
			assert.NoError(t, err)
			assert.Equal(t, AdmitOK, res.Refused)
		})
	}
	wg.Wait()
	st := make([]BudgetState, 1)
	require.NoError(t, m.Usage(context.Background(), now, b, st))
	require.Equal(t, int64(10), st[0].Used)
}

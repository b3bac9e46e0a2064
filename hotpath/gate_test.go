package hotpath

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGateRefusesAtTheCeiling(t *testing.T) {
	g := NewGate(2)
	require.True(t, g.TryAcquire())
	require.True(t, g.TryAcquire())
	require.False(t, g.TryAcquire(), "refused at once, not queued")
	require.Equal(t, 2, g.InFlight())
	g.Release()
	require.True(t, g.TryAcquire())
	g.Release()
	g.Release()
	require.Zero(t, g.InFlight())
}

func TestGateUnderContention(t *testing.T) {
	g := NewGate(8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	held, peak := 0, 0
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if !g.TryAcquire() {
					continue
				}
				mu.Lock()
				held++
				peak = max(peak, held)
				mu.Unlock()
				mu.Lock()
				held--
				mu.Unlock()
				g.Release()
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, peak, 8)
	require.Zero(t, g.InFlight())
}

func BenchmarkGate(b *testing.B) {
	g := NewGate(1 << 20)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if g.TryAcquire() {
				g.Release()
			}
		}
	})
}

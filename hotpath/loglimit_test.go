package hotpath

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLogLimiterLetsOneLineThroughPerInterval(t *testing.T) {
	ll := LogLimiter{Every: time.Hour}
	ok, n := ll.Allow()
	require.True(t, ok)
	require.Zero(t, n)
	for range 3 {
		ok, _ = ll.Allow()
		require.False(t, ok, "held back within the interval")
	}
	ll.next.Store(0) // the interval has passed
	ok, n = ll.Allow()
	require.True(t, ok)
	require.Equal(t, int64(3), n, "and says how many it held back")
	require.Zero(t, testing.AllocsPerRun(100, func() { ll.Allow() }))
}

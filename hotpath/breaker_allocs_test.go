//go:build !race

package hotpath_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
)

func TestBreakerAllocatesNothing(t *testing.T) {
	b, clk := newTestBreaker(hotpath.BreakerConfig{MinRequests: 2, Cooldown: time.Second})
	allocs := testing.AllocsPerRun(1000, func() {
		b.Allow() // closed
		b.Success()
		b.FailureOf(7 << 32)
		b.FailureOf(7 << 32) // a repeat: not counted
		b.Failure()          // opens: 2 of 3
		_ = b.RetryAfter()
		b.Allow()   // open
		b.Failure() // ignored while cooling
		_ = b.State()
		clk.Advance(time.Second)
		b.Allow()   // the probe
		b.Allow()   // refused
		b.Failure() // re-opens
		clk.Advance(time.Second)
		b.Allow()
		b.Success() // closes
	})
	require.Zero(t, allocs)
	require.Equal(t, hotpath.BreakerClosed, b.State())

	d := hotpath.NewBreaker(hotpath.BreakerConfig{MinRequests: 1}, nil) // time.Now
	allocs = testing.AllocsPerRun(1000, func() {
		d.Allow()
		d.Failure()
		d.Allow()
		d.Success()
	})
	require.Zero(t, allocs)
}

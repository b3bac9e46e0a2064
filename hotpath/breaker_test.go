package hotpath_test

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
)

const cooldown = 10 * time.Second

func newTestBreaker(cfg hotpath.BreakerConfig) (*hotpath.Breaker, *testClock) {
	clk := newTestClock()
	return hotpath.NewBreaker(cfg, clk.now), clk
}

// open fails b until it opens.
func open(t *testing.T, b *hotpath.Breaker) {
	t.Helper()
	for b.State() == hotpath.BreakerClosed {
		require.True(t, b.Allow())
		b.Failure()
	}
	require.Equal(t, hotpath.BreakerOpen, b.State())
}

func TestBreakerTransitions(t *testing.T) {
	t.Run("OpensAfterFailuresInARow", func(t *testing.T) {
		b, _ := newTestBreaker(hotpath.BreakerConfig{})
		for range 4 {
			require.True(t, b.Allow())
			b.Failure()
		}
		require.Equal(t, hotpath.BreakerClosed, b.State())
		b.Failure()
		require.Equal(t, hotpath.BreakerOpen, b.State())
		require.False(t, b.Allow())
	})

	t.Run("OpensOnTheRateOverTheWindow", func(t *testing.T) {
		b, _ := newTestBreaker(hotpath.BreakerConfig{})
		for range 10 {
			b.Success()
		}
		for range 9 {
			b.Failure()
		}
		require.Equal(t, hotpath.BreakerClosed, b.State(), "9 failures of 19 requests are under half")
		b.Failure()
		require.Equal(t, hotpath.BreakerOpen, b.State(), "10 of 20 are half")
	})

	t.Run("NeedsTheMinimumVolume", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{MinRequests: 3})
		b.Failure()
		b.Failure()
		clk.Advance(10 * time.Second) // both leave the window
		b.Failure()
		b.Failure()
		require.Equal(t, hotpath.BreakerClosed, b.State())
		clk.Advance(time.Second)
		b.Failure()
		require.Equal(t, hotpath.BreakerOpen, b.State())
	})

	t.Run("AClientRetryingOneRequestCountsOnce", func(t *testing.T) {
		b, _ := newTestBreaker(hotpath.BreakerConfig{})
		for range 3 { // the OpenAI SDKs' default: three attempts
			b.FailureOf(0xfeedbeef01)
		}
		for range 3 {
			b.FailureOf(0xfeedbeef01)
			b.FailureOf(0xc0ffee0002)
			b.FailureOf(0xfeedbeef01)
		}
		require.Equal(t, hotpath.BreakerClosed, b.State(), "two distinct requests, retried, are two")
		b.FailureOf(3)
		b.FailureOf(4)
		require.Equal(t, hotpath.BreakerClosed, b.State())
		b.FailureOf(5)
		require.Equal(t, hotpath.BreakerOpen, b.State(), "the fifth distinct failing request opens it")
	})

	t.Run("ARetryAfterTheWindowCountsAgain", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{MinRequests: 1})
		b.Success()
		b.Success()
		b.FailureOf(77 << 32)
		require.Equal(t, hotpath.BreakerClosed, b.State())
		clk.Advance(25 * time.Second) // past the window and the cooldown after it
		b.Success()
		b.FailureOf(77 << 32)
		require.Equal(t, hotpath.BreakerOpen, b.State(), "1 of 2 in the new window")
	})

	t.Run("RetryAfterIsTheRestOfTheCooldown", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{})
		require.Zero(t, b.RetryAfter())
		open(t, b)
		require.Equal(t, cooldown, b.RetryAfter())
		clk.Advance(3 * time.Second)
		require.Equal(t, cooldown-3*time.Second, b.RetryAfter())
		clk.Advance(cooldown)
		require.Zero(t, b.RetryAfter(), "half-open: the next request probes")
		require.True(t, b.Allow())
		require.Equal(t, cooldown, b.RetryAfter(), "the probe's time")
	})

	t.Run("AProbeRepeatingAFailedRequestGivesTheSlotBack", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{})
		for i := range 5 {
			b.FailureOf(uint64(i+1)<<32 | uint64(i+1))
		}
		require.Equal(t, hotpath.BreakerOpen, b.State())
		clk.Advance(cooldown)
		require.True(t, b.Allow())
		b.FailureOf(5<<32 | 5)
		require.Equal(t, hotpath.BreakerHalfOpen, b.State())
		require.True(t, b.Allow(), "the next request probes")
		b.FailureOf(6<<32 | 6)
		require.Equal(t, hotpath.BreakerOpen, b.State())
	})

	t.Run("ClosingForgetsTheWindow", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{})
		open(t, b)
		clk.Advance(cooldown)
		require.True(t, b.Allow())
		b.Success()
		require.Equal(t, hotpath.BreakerClosed, b.State())
		for range 4 {
			b.Failure()
		}
		require.Equal(t, hotpath.BreakerClosed, b.State())
	})

	t.Run("CoolsDownThenLetsOneProbe", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{})
		open(t, b)
		clk.Advance(cooldown - time.Nanosecond)
		require.False(t, b.Allow())
		require.Equal(t, hotpath.BreakerOpen, b.State())
		clk.Advance(time.Nanosecond)
		require.Equal(t, hotpath.BreakerHalfOpen, b.State())
		require.True(t, b.Allow(), "the probe")
		require.False(t, b.Allow(), "one probe at a time")
		require.Equal(t, hotpath.BreakerHalfOpen, b.State())
	})

	t.Run("ProbeSuccessCloses", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{MinRequests: 2})
		open(t, b)
		clk.Advance(cooldown)
		require.True(t, b.Allow())
		b.Success()
		require.Equal(t, hotpath.BreakerClosed, b.State())
		require.True(t, b.Allow())
		require.True(t, b.Allow())
		b.Failure()
		require.Equal(t, hotpath.BreakerClosed, b.State(), "the count starts again")
	})

	t.Run("ProbeFailureReopens", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{})
		open(t, b)
		clk.Advance(cooldown + time.Minute)
		require.True(t, b.Allow())
		b.Failure()
		require.Equal(t, hotpath.BreakerOpen, b.State())
		clk.Advance(cooldown - time.Nanosecond)
		require.False(t, b.Allow(), "a whole cooldown again")
		clk.Advance(time.Nanosecond)
		require.True(t, b.Allow())
	})

	t.Run("FailuresWhileCoolingChangeNothing", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{})
		open(t, b)
		clk.Advance(cooldown / 2)
		b.Failure()
		b.Failure()
		clk.Advance(cooldown / 2)
		require.Equal(t, hotpath.BreakerHalfOpen, b.State(), "the cooldown was not extended")
	})

	t.Run("FailureWhenHalfOpenReopens", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{})
		open(t, b)
		clk.Advance(cooldown)
		b.Failure() // a request admitted before the breaker opened
		require.Equal(t, hotpath.BreakerOpen, b.State())
	})

	t.Run("LateSuccessCloses", func(t *testing.T) {
		b, _ := newTestBreaker(hotpath.BreakerConfig{})
		open(t, b)
		b.Success() // a request admitted before the breaker opened: the tier answers
		require.Equal(t, hotpath.BreakerClosed, b.State())
		require.True(t, b.Allow())
	})

	t.Run("LostProbeIsReplaced", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{Cooldown: time.Second, ProbeTimeout: time.Minute})
		open(t, b)
		clk.Advance(time.Second)
		require.True(t, b.Allow()) // and never reports
		clk.Advance(time.Minute - time.Nanosecond)
		require.False(t, b.Allow())
		require.Equal(t, hotpath.BreakerHalfOpen, b.State())
		clk.Advance(time.Nanosecond)
		require.True(t, b.Allow(), "a new probe")
		require.False(t, b.Allow())
		b.Success()
		require.Equal(t, hotpath.BreakerClosed, b.State())
	})

	t.Run("ProbeTimeoutDefaultsToCooldown", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{Cooldown: time.Second})
		open(t, b)
		clk.Advance(time.Second)
		require.True(t, b.Allow())
		clk.Advance(time.Second - time.Nanosecond)
		require.False(t, b.Allow())
		clk.Advance(time.Nanosecond)
		require.True(t, b.Allow())
	})

	t.Run("FailureOfALostProbeReopens", func(t *testing.T) {
		b, clk := newTestBreaker(hotpath.BreakerConfig{})
		open(t, b)
		clk.Advance(cooldown)
		require.True(t, b.Allow())
		clk.Advance(time.Hour)
		b.Failure()
		require.Equal(t, hotpath.BreakerOpen, b.State())
		clk.Advance(cooldown)
		require.True(t, b.Allow())
	})
}

func TestBreakerDefaultClock(t *testing.T) {
	b := hotpath.NewBreaker(hotpath.BreakerConfig{MinRequests: 1, Cooldown: time.Hour}, nil)
	b.Failure()
	require.Equal(t, hotpath.BreakerOpen, b.State())
	require.False(t, b.Allow())
}

func TestBreakerConfigValidate(t *testing.T) {
	c := hotpath.BreakerConfig{}
	require.NoError(t, c.Validate())
	require.Equal(t, hotpath.BreakerConfig{Window: 10 * time.Second, MinRequests: 5, FailurePercent: 50,
		Cooldown: 10 * time.Second, ProbeTimeout: 10 * time.Second}, c)

	c = hotpath.BreakerConfig{Cooldown: time.Second}
	require.NoError(t, c.Validate())
	require.Equal(t, time.Second, c.ProbeTimeout)

	for _, bad := range []hotpath.BreakerConfig{{MinRequests: -1}, {Window: -1}, {Cooldown: -1}, {ProbeTimeout: -1}, {FailurePercent: 101}} {
		require.Error(t, bad.Validate())
	}
}

func TestBreakerStateString(t *testing.T) {
	for s, want := range map[hotpath.BreakerState]string{
		hotpath.BreakerClosed:   "closed",
		hotpath.BreakerOpen:     "open",
		hotpath.BreakerHalfOpen: "half_open",
		hotpath.BreakerState(9): "unknown",
	} {
		require.Equal(t, want, s.String())
	}
}

// Many callers race for the probe; exactly one gets it, every round.
func TestBreakerConcurrentProbe(t *testing.T) {
	b, clk := newTestBreaker(hotpath.BreakerConfig{})
	open(t, b)
	for round := range 20 {
		clk.Advance(cooldown)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			allowed atomic.Int64
		)
		for range 64 {
			wg.Go(func() {
				<-start
				if b.Allow() {
					allowed.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, allowed.Load(), "round %d", round)
		b.Failure()
		require.Equal(t, hotpath.BreakerOpen, b.State())
	}
}

// Callers racing on every method while the clock moves leave the breaker in
// a state it could reach, and a success still closes it.
func TestBreakerConcurrentUse(t *testing.T) {
	b, clk := newTestBreaker(hotpath.BreakerConfig{MinRequests: 3, Cooldown: time.Millisecond})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(50 * time.Microsecond)
			}
		}
	})
	var workers sync.WaitGroup
	for range 16 {
		workers.Go(func() {
			for range 5000 {
				switch rand.IntN(4) {
				case 0:
					b.Success()
				case 1, 2:
					b.Failure()
				default:
					_ = b.Allow()
				}
				if s := b.State(); s > hotpath.BreakerHalfOpen {
					t.Errorf("state %d", s)
					return
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	b.Success()
	require.Equal(t, hotpath.BreakerClosed, b.State())
	require.True(t, b.Allow())
}

func BenchmarkBreakerAllowClosed(b *testing.B) {
	br := hotpath.NewBreaker(hotpath.BreakerConfig{}, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !br.Allow() {
				b.Error("refused while closed")
				return
			}
			br.Success()
		}
	})
}

func BenchmarkBreakerAllowOpen(b *testing.B) {
	br := hotpath.NewBreaker(hotpath.BreakerConfig{MinRequests: 1, Cooldown: time.Hour}, nil)
	br.Failure()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if br.Allow() {
				b.Error("allowed while open")
				return
			}
		}
	})
}

func BenchmarkBreakerMixed(b *testing.B) {
	br := hotpath.NewBreaker(hotpath.BreakerConfig{Cooldown: time.Microsecond}, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if br.Allow() {
				if i%3 == 0 {
					br.Failure()
				} else {
					br.Success()
				}
			}
			i++
		}
	})
}

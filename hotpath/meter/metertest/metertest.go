// Package metertest is the contract every meter.Counters passes: the
// in-process store and the Redis one run the same tests, so limits behave
// the same with one gateway process or a fleet. The suite reaches a store
// only through the calls production makes (Hit, PeekWindows, Usage, Admit
// and Finish): slots, reservations and settlements are all admissions and
// finishes, so every rule it checks is checked on the path requests take.
//
// Time moves through the clock readings the suite passes, never by
// waiting; every store must take its notion of "now" for windows and
// budgets from them. Leases are the exception the interface allows: a
// lease held by a live store is never lost however far the clock moves,
// and how a dead process's leases expire is each store's own test.
package metertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/meter"
)

// newCountersFunc returns an empty store that seeds budgets from seeder.
type newCountersFunc func(t *testing.T, seeder meter.BudgetSeeder) meter.Counters

// t0 is the suite's clock: a quarter second past a whole second, so that a
// window's reset second is visibly rounded up.
var t0 = time.Date(2026, 3, 10, 12, 7, 0, 250_000_000, time.UTC)

// Run runs the contract against stores newCounters makes, one per case.
func Run(t *testing.T, newCounters func(t *testing.T, seeder meter.BudgetSeeder) meter.Counters) {
	t.Run("Windows", func(t *testing.T) { runWindows(t, newCounters) })
	t.Run("Leases", func(t *testing.T) { runSlots(t, newCounters) })
	t.Run("Budgets", func(t *testing.T) { runBudgets(t, newCounters) })
	t.Run("Seeding", func(t *testing.T) { runSeeding(t, newCounters) })
	t.Run("Admission", func(t *testing.T) { runAdmission(t, newCounters) })
}

func empty(t *testing.T, newCounters newCountersFunc) meter.Counters {
	return newCounters(t, newSeeder())
}

func hit(t *testing.T, c meter.Counters, now time.Time, ws ...meter.Window) (bool, []meter.WindowState) {
	t.Helper()
	out := make([]meter.WindowState, len(ws))
	ok, err := c.Hit(t.Context(), now, ws, out)
	require.NoError(t, err)
	return ok, out
}

func peek(t *testing.T, c meter.Counters, now time.Time, ws ...meter.Window) []meter.WindowState {
	t.Helper()
	out := make([]meter.WindowState, len(ws))
	require.NoError(t, c.PeekWindows(t.Context(), now, ws, out))
	return out
}

// resetSecond is the reset a window opened at `at` reports.
func resetSecond(at time.Time, length time.Duration) int64 {
	return meter.ResetSecond(at.Add(length).UnixMilli())
}

func runWindows(t *testing.T, newCounters newCountersFunc) {
	key := meter.Window{Key: "rl:key:k1:requests", Limit: 3, Length: time.Minute}
	org := meter.Window{Key: "rl:org:o1:requests", Limit: 10, Length: time.Minute}

	t.Run("OpensAtFirstHit", func(t *testing.T) {
		c := empty(t, newCounters)
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 3}}, peek(t, c, t0, key),
			"a window nobody opened has no reset")
		ok, out := hit(t, c, t0.Add(5*time.Second), key)
		require.True(t, ok)
		reset := resetSecond(t0.Add(5*time.Second), time.Minute)
		require.Equal(t, t0.Unix()+66, reset, "the reset second is rounded up")
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 2, ResetAt: reset}}, out)
		ok, out = hit(t, c, t0.Add(30*time.Second), key)
		require.True(t, ok)
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 1, ResetAt: reset}}, out,
			"later hits do not move the reset")
	})

	t.Run("FullWindowRefusesAndCountsNothing", func(t *testing.T) {
		c := empty(t, newCounters)
		for i := range 3 {
			ok, out := hit(t, c, t0.Add(time.Duration(i)*time.Second), key, org)
			require.True(t, ok)
			require.Equal(t, int64(2-i), out[0].Remaining)
		}
		reset := resetSecond(t0, time.Minute)
		for range 3 {
			ok, out := hit(t, c, t0.Add(10*time.Second), key, org)
			require.False(t, ok)
			require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 0, ResetAt: reset}, {Limit: 10, Remaining: 7, ResetAt: reset}}, out)
		}
		require.Equal(t, int64(7), peek(t, c, t0.Add(11*time.Second), org)[0].Remaining,
			"a refused request is counted in no window")
	})

	t.Run("BothOrNeither", func(t *testing.T) {
		c := empty(t, newCounters)
		small := meter.Window{Key: "rl:org:o2:requests", Limit: 2, Length: time.Minute}
		other := meter.Window{Key: "rl:key:k2:requests", Limit: 3, Length: time.Minute}
		for range 2 {
			ok, _ := hit(t, c, t0, key, small)
			require.True(t, ok)
		}
		ok, out := hit(t, c, t0, key, small)
		require.False(t, ok, "the organization's window is full")
		require.Equal(t, int64(1), out[0].Remaining, "so the key's window did not count")
		require.Equal(t, int64(0), out[1].Remaining)
		ok, out = hit(t, c, t0, other, small)
		require.False(t, ok, "another key of the organization is refused too")
		require.Equal(t, meter.WindowState{Limit: 3, Remaining: 3}, out[0], "and its window stays unopened")
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 1, ResetAt: resetSecond(t0, time.Minute)}}, peek(t, c, t0, key))
	})

	t.Run("ResetsAfterLength", func(t *testing.T) {
		c := empty(t, newCounters)
		w := meter.Window{Key: "rl:key:k1:tokens", Limit: 1, Length: 10 * time.Second}
		ok, _ := hit(t, c, t0, w)
		require.True(t, ok)
		ok, out := hit(t, c, t0.Add(w.Length-time.Millisecond), w)
		require.False(t, ok, "the window lasts its whole length")
		require.Equal(t, resetSecond(t0, w.Length), out[0].ResetAt)
		ok, out = hit(t, c, t0.Add(w.Length), w)
		require.True(t, ok, "a new window opens at the reset")
		require.Equal(t, meter.WindowState{Limit: 1, Remaining: 0, ResetAt: resetSecond(t0.Add(w.Length), w.Length)}, out[0])
		require.Equal(t, []meter.WindowState{{Limit: 1, Remaining: 1}}, peek(t, c, t0.Add(time.Hour), w),
			"a window long over reads as unopened")
	})

	t.Run("RemainingNeverBelowZero", func(t *testing.T) {
		c := empty(t, newCounters)
		w := meter.Window{Key: "rl:key:k1:requests", Limit: 1, Length: time.Minute}
		for i := range 5 {
			ok, out := hit(t, c, t0, w)
			require.Equal(t, i == 0, ok)
			require.Equal(t, int64(0), out[0].Remaining)
		}
		require.Equal(t, int64(0), peek(t, c, t0, w)[0].Remaining)
		zero := meter.Window{Key: "rl:key:k3:requests", Limit: 0, Length: time.Minute}
		ok, out := hit(t, c, t0, zero)
		require.False(t, ok, "a zero limit admits nothing")
		require.Equal(t, meter.WindowState{}, out[0])
	})

	t.Run("PeekDoesNotCount", func(t *testing.T) {
		c := empty(t, newCounters)
		for range 10 {
			require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 3}, {Limit: 10, Remaining: 10}}, peek(t, c, t0, key, org))
		}
		ok, out := hit(t, c, t0, key)
		require.True(t, ok)
		require.Equal(t, int64(2), out[0].Remaining)
		for range 10 {
			require.Equal(t, int64(2), peek(t, c, t0.Add(time.Second), key)[0].Remaining)
		}
	})

	t.Run("ConcurrentHitsStopAtTheLimit", func(t *testing.T) {
		c := empty(t, newCounters)
		shared := meter.Window{Key: "rl:org:busy:requests", Limit: 300, Length: time.Minute}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for g := range 200 {
			wg.Go(func() {
				own := meter.Window{Key: fmt.Sprintf("rl:key:g%d:requests", g), Limit: 4, Length: time.Minute}
				out := make([]meter.WindowState, 2)
				for range 5 {
					ok, err := c.Hit(context.Background(), t0, []meter.Window{own, shared}, out)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int64(300), admitted.Load())
		require.Equal(t, int64(0), peek(t, c, t0, shared)[0].Remaining)
	})

	t.Run("BadArguments", func(t *testing.T) {
		c := empty(t, newCounters)
		_, err := c.Hit(t.Context(), t0, []meter.Window{key, org}, make([]meter.WindowState, 1))
		requireCallerError(t, err)
		_, err = c.Hit(t.Context(), t0, []meter.Window{{Key: "rl:x", Limit: 1}}, make([]meter.WindowState, 1))
		requireCallerError(t, err)
		_, err = c.Hit(t.Context(), t0, []meter.Window{key, key}, make([]meter.WindowState, 2))
		requireCallerError(t, err)
		requireCallerError(t, c.PeekWindows(t.Context(), t0, []meter.Window{key}, nil))
		ok, err := c.Hit(t.Context(), t0, nil, nil)
		require.NoError(t, err)
		require.True(t, ok, "no window, nothing to refuse")
	})
}

// requireCallerError checks an error the caller caused: not a store outage.
func requireCallerError(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.NotErrorIs(t, err, meter.ErrCountersUnavailable)
}

func acquire(t *testing.T, c meter.Counters, now time.Time, key string, limit int64) (meter.Lease, bool) {
	t.Helper()
	return TakeSlot(t, c, now, key, limit)
}

func release(t *testing.T, c meter.Counters, l meter.Lease) {
	t.Helper()
	FreeSlot(t, c, l)
}

func inFlight(t *testing.T, c meter.Counters, now time.Time, key string) int64 {
	t.Helper()
	return InFlight(t, c, now, key)
}

func runSlots(t *testing.T, newCounters newCountersFunc) {
	t.Run("LimitAndInFlight", func(t *testing.T) {
		c := empty(t, newCounters)
		require.Zero(t, inFlight(t, c, t0, "cc:k1"))
		seen := map[meter.Lease]bool{}
		for range 3 {
			l, ok := acquire(t, c, t0, "cc:k1", 3)
			require.True(t, ok)
			require.Equal(t, "cc:k1", l.Key)
			require.NotEmpty(t, l.ID)
			require.False(t, seen[l], "every lease is its own")
			seen[l] = true
		}
		l, ok := acquire(t, c, t0, "cc:k1", 3)
		require.False(t, ok)
		require.Equal(t, meter.Lease{}, l)
		require.Equal(t, int64(3), inFlight(t, c, t0, "cc:k1"))
		require.Zero(t, inFlight(t, c, t0, "cc:k2"), "keys are independent")
		_, ok = acquire(t, c, t0, "cc:k2", 1)
		require.True(t, ok)
		_, ok = acquire(t, c, t0, "cc:k3", 0)
		require.False(t, ok, "a zero limit admits nobody")
	})

	t.Run("ReleaseFrees", func(t *testing.T) {
		c := empty(t, newCounters)
		a, _ := acquire(t, c, t0, "cc:k1", 2)
		_, ok := acquire(t, c, t0, "cc:k1", 2)
		require.True(t, ok)
		_, ok = acquire(t, c, t0, "cc:k1", 2)
		require.False(t, ok)
		release(t, c, a)
		require.Equal(t, int64(1), inFlight(t, c, t0, "cc:k1"))
		_, ok = acquire(t, c, t0, "cc:k1", 2)
		require.True(t, ok)
	})

	t.Run("DoubleReleaseIsHarmless", func(t *testing.T) {
		c := empty(t, newCounters)
		a, _ := acquire(t, c, t0, "cc:k1", 2)
		_, ok := acquire(t, c, t0, "cc:k1", 2)
		require.True(t, ok)
		release(t, c, a)
		release(t, c, a)
		require.Equal(t, int64(1), inFlight(t, c, t0, "cc:k1"))
		_, ok = acquire(t, c, t0, "cc:k1", 2)
		require.True(t, ok)
		_, ok = acquire(t, c, t0, "cc:k1", 2)
		require.False(t, ok, "releasing twice freed only one slot")
		release(t, c, a)
		release(t, c, meter.Lease{})
		release(t, c, meter.Lease{Key: "cc:k1", ID: "not-a-lease"})
		release(t, c, meter.Lease{Key: "cc:k2", ID: a.ID}) // a lease under another key
		require.Equal(t, int64(2), inFlight(t, c, t0, "cc:k1"))
	})

	t.Run("HeldLeaseOutlivesLeaseTTL", func(t *testing.T) {
		c := empty(t, newCounters)
		l, ok := acquire(t, c, t0, "cc:k1", 1)
		require.True(t, ok)
		later := t0.Add(4 * meter.LeaseTTL)
		_, ok = acquire(t, c, later, "cc:k1", 1)
		require.False(t, ok, "a live store keeps its leases: a long stream keeps its slot")
		require.Equal(t, int64(1), inFlight(t, c, later, "cc:k1"))
		release(t, c, l)
		require.Zero(t, inFlight(t, c, later, "cc:k1"))
	})
}

func reserve(t *testing.T, c meter.Counters, now time.Time, r *meter.Reservation, budgets []meter.Budget, amounts ...int64) int {
	t.Helper()
	refused, err := Reserve(t.Context(), c, now, budgets, amounts, r)
	require.NoError(t, err)
	if refused >= 0 {
		require.Zero(t, r.N, "a refused reservation holds nothing")
	} else {
		require.Equal(t, len(budgets), r.N)
	}
	return refused
}

func usage(t *testing.T, c meter.Counters, now time.Time, budgets ...meter.Budget) []meter.BudgetState {
	t.Helper()
	out := make([]meter.BudgetState, len(budgets))
	require.NoError(t, c.Usage(t.Context(), now, budgets, out))
	return out
}

func used(t *testing.T, c meter.Counters, now time.Time, b meter.Budget) int64 {
	t.Helper()
	return usage(t, c, now, b)[0].Used
}

func settle(t *testing.T, c meter.Counters, r *meter.Reservation, actual ...int64) {
	t.Helper()
	require.NoError(t, Settle(t.Context(), c, r, actual))
}

func bs(b ...meter.Budget) []meter.Budget { return b }

func runBudgets(t *testing.T, newCounters newCountersFunc) {
	keySpend := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 1000}
	wsSpend := meter.Budget{Kind: meter.BudgetWorkspaceSpend, Subject: "ws_1", Cap: 500}
	credits := meter.Budget{Kind: meter.BudgetCredits, Subject: "key_2", Cap: 700}
	burst := meter.Budget{Kind: meter.BudgetPoolBurst, Subject: "org_1", Cap: 200}
	nextMonth := meter.NextMonth(t0).Unix()

	t.Run("ReserveUpToTheCap", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend), 600))
		require.Equal(t, keySpend, r.Budgets[0])
		require.Equal(t, int64(600), r.Amounts[0])
		require.Equal(t, meter.MonthStart(t0).Unix(), r.Slots[0])
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend), 400), "the cap itself may be reached")
		require.Equal(t, 0, reserve(t, c, t0, &r, bs(keySpend), 1))
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend), 0), "a free request still fits")
		require.Equal(t, []meter.BudgetState{{Used: 1000, ResetAt: nextMonth}}, usage(t, c, t0, keySpend))
	})

	t.Run("RefusalAddsNothing", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend, wsSpend, credits), 300, 300, 300))
		require.Equal(t, 1, reserve(t, c, t0, &r, bs(keySpend, wsSpend, credits), 300, 300, 300),
			"the workspace would go over")
		require.Equal(t, 0, reserve(t, c, t0, &r, bs(keySpend, wsSpend, credits), 800, 300, 0),
			"the first budget over is named")
		require.Equal(t, 2, reserve(t, c, t0, &r, bs(keySpend, wsSpend, credits), 0, 0, 401))
		require.Equal(t, []meter.BudgetState{{Used: 300, ResetAt: nextMonth}, {Used: 300, ResetAt: nextMonth}, {Used: 300}},
			usage(t, c, t0, keySpend, wsSpend, credits))
		settle(t, c, &r, 0, 0, 0) // a refused reservation settles nothing
		require.Equal(t, int64(300), used(t, c, t0, keySpend))
	})

	t.Run("SameBudgetTwice", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		require.Equal(t, 1, reserve(t, c, t0, &r, bs(keySpend, keySpend), 600, 600), "both amounts count against one counter")
		require.Zero(t, used(t, c, t0, keySpend))
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend, keySpend), 500, 500))
		settle(t, c, &r, 100, 200)
		require.Equal(t, int64(300), used(t, c, t0, keySpend))
	})

	t.Run("NegativeCapOnlyCounts", func(t *testing.T) {
		c := empty(t, newCounters)
		open := meter.Budget{Kind: meter.BudgetPoolMonthly, Subject: "org_1", Cap: -1}
		var r meter.Reservation
		for range 3 {
			require.Equal(t, -1, reserve(t, c, t0, &r, bs(open), 4_000_000_000_000_000))
		}
		require.Equal(t, int64(12_000_000_000_000_000), used(t, c, t0, open))
	})

	t.Run("ExactAtEveryScale", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		micro := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_micro", Cap: 1_000_000}
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(micro), 999_999))
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(micro), 1))
		require.Equal(t, 0, reserve(t, c, t0, &r, bs(micro), 1), "one pico-USD over a one micro-USD cap")
		// $100,000 and one pico-USD: past what a float64 holds exactly.
		big := meter.Budget{Kind: meter.BudgetWorkspaceSpend, Subject: "ws_big", Cap: 100_000_000_000_000_001}
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(big), 99_999_999_999_999_999))
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(big), 1))
		var last meter.Reservation
		require.Equal(t, -1, reserve(t, c, t0, &last, bs(big), 1))
		require.Equal(t, 0, reserve(t, c, t0, &r, bs(big), 1))
		require.Equal(t, int64(100_000_000_000_000_001), used(t, c, t0, big))
		settle(t, c, &last, 0)
		require.Equal(t, int64(100_000_000_000_000_000), used(t, c, t0, big))
	})

	t.Run("SettleReplacesTheReservation", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend, credits), 600, 400))
		settle(t, c, &r, 250, 400)
		require.Equal(t, []meter.BudgetState{{Used: 250, ResetAt: nextMonth}, {Used: 400}}, usage(t, c, t0, keySpend, credits))
		settle(t, c, &r, 0, 0) // settled already: a no-op
		require.Equal(t, int64(250), used(t, c, t0, keySpend))
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend), 100), "the reservation is reused")
		settle(t, c, &r, 180)
		require.Equal(t, int64(430), used(t, c, t0, keySpend), "an actual above the reservation adds the difference")
		settle(t, c, &meter.Reservation{}, nil...)
		require.Equal(t, int64(430), used(t, c, t0, keySpend))
	})

	t.Run("ConcurrentReservationsNeverOvershoot", func(t *testing.T) {
		c := empty(t, newCounters)
		spend := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_busy", Cap: 50_000}
		ws := meter.Budget{Kind: meter.BudgetWorkspaceSpend, Subject: "ws_busy", Cap: 80_000}
		pool := meter.Budget{Kind: meter.BudgetPoolBurst, Subject: "org_busy", Cap: 30_000}
		budgets := bs(spend, ws, pool)
		res := make([]meter.Reservation, 200)
		admitted := make([]bool, 200)
		var wg sync.WaitGroup
		errs := make(chan error, 400)
		for g := range 200 {
			wg.Go(func() {
				refused, err := Reserve(context.Background(), c, t0, budgets, []int64{1000, 1000, 500}, &res[g])
				if err != nil {
					errs <- err
					return
				}
				admitted[g] = refused < 0
			})
		}
		wg.Wait()
		var n int64
		for _, a := range admitted {
			if a {
				n++
			}
		}
		require.Equal(t, int64(50), n, "the key's cap admits exactly 50")
		require.Equal(t, []meter.BudgetState{{Used: 50_000, ResetAt: nextMonth}, {Used: 50_000, ResetAt: nextMonth}, {Used: 25_000, ResetAt: meter.BurstSlotStart(t0).Add(meter.BurstWindow).Unix()}},
			usage(t, c, t0, budgets...))

		// Settle everything at random actual costs while others keep
		// reserving what the settlements free.
		var settled [3]atomic.Int64
		settleAll := func(r *meter.Reservation) {
			a := []int64{rand.Int64N(1001), rand.Int64N(1001), rand.Int64N(501)}
			if err := Settle(context.Background(), c, r, a); err != nil {
				errs <- err
				return
			}
			for i := range a {
				settled[i].Add(a[i])
			}
		}
		for g := range 200 {
			wg.Go(func() {
				if admitted[g] {
					settleAll(&res[g])
				}
				var r meter.Reservation
				refused, err := Reserve(context.Background(), c, t0, budgets, []int64{1000, 1000, 500}, &r)
				if err != nil {
					errs <- err
					return
				}
				if refused < 0 {
					settleAll(&r)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		st := usage(t, c, t0, budgets...)
		for i, b := range budgets {
			require.Equal(t, settled[i].Load(), st[i].Used, "%s: the counter is the sum of what was settled", b.Kind)
			require.LessOrEqual(t, st[i].Used, b.Cap)
		}
	})

	t.Run("BurstSlotsLeaveTheWindow", func(t *testing.T) {
		c := empty(t, newCounters)
		var r1, r2, r3 meter.Reservation
		s1 := meter.BurstSlotStart(t0)
		t2 := t0.Add(6 * time.Hour)
		s2 := meter.BurstSlotStart(t2)
		require.Equal(t, []meter.BudgetState{{}}, usage(t, c, t0, burst), "an empty burst has no reset")
		require.Equal(t, -1, reserve(t, c, t0, &r1, bs(burst), 100))
		require.Equal(t, s1.Unix(), r1.Slots[0])
		require.Equal(t, -1, reserve(t, c, t2, &r2, bs(burst), 50))
		require.Equal(t, s2.Unix(), r2.Slots[0])
		require.Equal(t, []meter.BudgetState{{Used: 150, ResetAt: s1.Add(meter.BurstWindow).Unix()}}, usage(t, c, t2, burst))
		require.Equal(t, 0, reserve(t, c, t2, &r3, bs(burst), 60))

		edge := s1.Add(meter.BurstWindow)
		require.Equal(t, 0, reserve(t, c, edge.Add(-time.Second), &r3, bs(burst), 60), "the first slot is in the window to its last second")
		require.Equal(t, []meter.BudgetState{{Used: 50, ResetAt: s2.Add(meter.BurstWindow).Unix()}}, usage(t, c, edge, burst))
		require.Equal(t, -1, reserve(t, c, edge, &r3, bs(burst), 60))
		settle(t, c, &r1, 200) // its slot has left the window: nothing comes back
		require.Equal(t, int64(110), used(t, c, edge, burst))

		later := s2.Add(meter.BurstWindow)
		require.Equal(t, []meter.BudgetState{{Used: 60, ResetAt: edge.Add(meter.BurstWindow).Unix()}}, usage(t, c, later, burst))
		settle(t, c, &r3, 10)
		require.Equal(t, int64(10), used(t, c, later, burst))
		require.Equal(t, []meter.BudgetState{{}}, usage(t, c, later.Add(meter.BurstWindow), burst))
	})

	t.Run("MonthRollover", func(t *testing.T) {
		c := empty(t, newCounters)
		may := time.Date(2026, 5, 31, 23, 59, 30, 0, time.UTC)
		june := time.Date(2026, 6, 1, 0, 0, 30, 0, time.UTC)
		b := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 150}
		mira := meter.Budget{Kind: meter.BudgetMiraRequests, Subject: "org_1", Cap: 2}
		var rMay, rJune meter.Reservation
		require.Equal(t, -1, reserve(t, c, may, &rMay, bs(b, mira), 150, 1))
		require.Equal(t, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).Unix(), rMay.Slots[0])
		require.Equal(t, 0, reserve(t, c, may, &rJune, bs(b, mira), 1, 1))
		july := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC).Unix()
		require.Equal(t, []meter.BudgetState{{Used: 0, ResetAt: july}, {Used: 0, ResetAt: july}}, usage(t, c, june, b, mira),
			"a new month starts empty")
		require.Equal(t, -1, reserve(t, c, june, &rJune, bs(b, mira), 150, 1))
		settle(t, c, &rMay, 40, 1)
		juneStart := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).Unix()
		require.Equal(t, []meter.BudgetState{{Used: 40, ResetAt: juneStart}, {Used: 1, ResetAt: juneStart}},
			usage(t, c, may, b, mira), "a settlement after the rollover corrects May")
		require.Equal(t, []int64{150, 1}, []int64{used(t, c, june, b), used(t, c, june, mira)}, "and leaves June alone")
	})

	t.Run("UsageResetAt", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		pool := meter.Budget{Kind: meter.BudgetPoolMonthly, Subject: "org_1", Cap: 10}
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(pool, credits, burst), 1, 1, 1))
		require.Equal(t, []meter.BudgetState{
			{Used: 1, ResetAt: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).Unix()},
			{Used: 1, ResetAt: 0},
			{Used: 1, ResetAt: meter.BurstSlotStart(t0).Add(12 * time.Hour).Unix()},
		}, usage(t, c, t0, pool, credits, burst))
		settle(t, c, &r, 0, 0, 0)
		require.Equal(t, []meter.BudgetState{{ResetAt: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).Unix()}, {}, {}},
			usage(t, c, t0, pool, credits, burst), "a burst with nothing in it has no reset")
	})

	t.Run("BadArguments", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		_, err := Reserve(t.Context(), c, t0, bs(keySpend), nil, &r)
		requireCallerError(t, err)
		_, err = Reserve(t.Context(), c, t0, make([]meter.Budget, meter.MaxReservation+1), make([]int64, meter.MaxReservation+1), &r)
		requireCallerError(t, err)
		_, err = Reserve(t.Context(), c, t0, bs(keySpend), []int64{-1}, &r)
		requireCallerError(t, err)
		_, err = Reserve(t.Context(), c, t0, bs(meter.Budget{Kind: 99, Subject: "x"}), []int64{1}, &r)
		requireCallerError(t, err)
		_, err = Reserve(t.Context(), c, t0, bs(meter.Budget{Kind: meter.BudgetKeySpend}), []int64{1}, &r)
		requireCallerError(t, err)
		requireCallerError(t, c.Usage(t.Context(), t0, bs(keySpend), nil))
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend), 10))
		requireCallerError(t, Settle(t.Context(), c, &r, nil))
		requireCallerError(t, Settle(t.Context(), c, &r, []int64{-5}))
		settle(t, c, &r, 5) // a refused Finish did not use the reservation up
		require.Equal(t, int64(5), used(t, c, t0, keySpend))
	})
}

// seeder is the BudgetSeeder of the seeding cases: the "ledger" holds what
// usage maps to each (kind, subject), and every call is recorded.
type seeder struct {
	mu    sync.Mutex
	usage map[seedKey][]int64
	fail  map[meter.BudgetKind]error
	calls []seedCall
}

type seedKey struct {
	kind    meter.BudgetKind
	subject string
}

type seedCall struct {
	budget   meter.Budget
	from, to time.Time
	slot     time.Duration
}

func newSeeder() *seeder {
	return &seeder{usage: map[seedKey][]int64{}, fail: map[meter.BudgetKind]error{}}
}

func (s *seeder) set(k meter.BudgetKind, subject string, vals ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage[seedKey{k, subject}] = vals
}

func (s *seeder) failKind(k meter.BudgetKind, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.fail, k)
	} else {
		s.fail[k] = err
	}
}

func (s *seeder) callsFor(k meter.BudgetKind, subject string) []seedCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []seedCall
	for _, c := range s.calls {
		if c.budget.Kind == k && c.budget.Subject == subject {
			out = append(out, c)
		}
	}
	return out
}

// SeedBudget implements meter.BudgetSeeder.
func (s *seeder) SeedBudget(_ context.Context, b meter.Budget, from, to time.Time, slot time.Duration) ([]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, seedCall{budget: b, from: from, to: to, slot: slot})
	if err := s.fail[b.Kind]; err != nil {
		return nil, err
	}
	n := max(int((to.Sub(from)+slot-1)/slot), 1)
	out := make([]int64, n)
	copy(out, s.usage[seedKey{b.Kind, b.Subject}])
	return out, nil
}

var errLedgerDown = errors.New("ledger unreachable")

func runSeeding(t *testing.T, newCounters newCountersFunc) {
	keySpend := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 1000}
	credits := meter.Budget{Kind: meter.BudgetCredits, Subject: "key_2", Cap: 6000}
	pool := meter.Budget{Kind: meter.BudgetPoolMonthly, Subject: "org_1", Cap: -1}
	burst := meter.Budget{Kind: meter.BudgetPoolBurst, Subject: "org_1", Cap: 100}

	t.Run("CountersStartAtTheLedger", func(t *testing.T) {
		s := newSeeder()
		s.set(meter.BudgetKeySpend, "key_1", 700)
		s.set(meter.BudgetCredits, "key_2", 5000)
		s.set(meter.BudgetPoolMonthly, "org_1", 123)
		slots := make([]int64, meter.BurstSlots)
		slots[0], slots[meter.BurstSlots-1] = 30, 20
		s.set(meter.BudgetPoolBurst, "org_1", slots...)
		c := newCounters(t, s)

		oldest := meter.BurstWindowStart(t0)
		require.Equal(t, meter.BurstSlotStart(t0).Add(-meter.BurstWindow+meter.BurstSlot), oldest)
		require.Equal(t, []meter.BudgetState{
			{Used: 700, ResetAt: meter.NextMonth(t0).Unix()},
			{Used: 5000},
			{Used: 123, ResetAt: meter.NextMonth(t0).Unix()},
			{Used: 50, ResetAt: oldest.Add(meter.BurstWindow).Unix()},
		}, usage(t, c, t0, keySpend, credits, pool, burst))

		var r meter.Reservation
		require.Equal(t, 0, reserve(t, c, t0, &r, bs(keySpend, credits), 301, 1))
		require.Equal(t, 1, reserve(t, c, t0, &r, bs(keySpend, credits), 300, 1001))
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend, credits, pool, burst), 300, 1000, 1, 50))
		require.Equal(t, 0, reserve(t, c, t0, &r, bs(burst), 1))
		require.Equal(t, int64(20+50), used(t, c, t0.Add(meter.BurstSlot), burst), "seeded slots leave the window like any other")

		for _, b := range bs(keySpend, credits, pool, burst) {
			calls := s.callsFor(b.Kind, b.Subject)
			require.Len(t, calls, 1, "%s is seeded once", b.Kind)
			from, slot := meter.SeedSpan(b.Kind, t0)
			require.Equal(t, seedCall{budget: b, from: from, to: t0, slot: slot}, calls[0])
		}
		require.Equal(t, time.Unix(0, 0), s.callsFor(meter.BudgetCredits, "key_2")[0].from, "a lifetime budget is seeded from the start")
		require.Equal(t, meter.MonthStart(t0), s.callsFor(meter.BudgetKeySpend, "key_1")[0].from)
		require.Equal(t, meter.BurstSlot, s.callsFor(meter.BudgetPoolBurst, "org_1")[0].slot)
	})

	t.Run("EveryMonthIsSeeded", func(t *testing.T) {
		s := newSeeder()
		s.set(meter.BudgetKeySpend, "key_1", 10)
		c := newCounters(t, s)
		apr := time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC)
		require.Equal(t, int64(10), used(t, c, t0, keySpend))
		require.Equal(t, int64(10), used(t, c, apr, keySpend))
		calls := s.callsFor(meter.BudgetKeySpend, "key_1")
		require.Len(t, calls, 2)
		require.Equal(t, meter.MonthStart(apr), calls[1].from)
		require.Equal(t, apr, calls[1].to)
	})

	t.Run("SeedFailureAdmitsNothing", func(t *testing.T) {
		s := newSeeder()
		s.set(meter.BudgetKeySpend, "key_1", 100)
		s.failKind(meter.BudgetCredits, errLedgerDown)
		c := newCounters(t, s)
		var r meter.Reservation
		_, err := Reserve(t.Context(), c, t0, bs(keySpend, credits), []int64{10, 10}, &r)
		require.ErrorIs(t, err, meter.ErrCountersUnavailable)
		require.Zero(t, r.N)
		err = c.Usage(t.Context(), t0, bs(credits), make([]meter.BudgetState, 1))
		require.ErrorIs(t, err, meter.ErrCountersUnavailable)
		require.Equal(t, int64(100), used(t, c, t0, keySpend), "the other budget was not charged")

		s.failKind(meter.BudgetCredits, nil)
		s.set(meter.BudgetCredits, "key_2", 40)
		require.Equal(t, -1, reserve(t, c, t0, &r, bs(keySpend, credits), 10, 10))
		require.Equal(t, []meter.BudgetState{{Used: 110, ResetAt: meter.NextMonth(t0).Unix()}, {Used: 50}}, usage(t, c, t0, keySpend, credits))
	})

	t.Run("ConcurrentFirstUseCountsTheLedgerOnce", func(t *testing.T) {
		s := newSeeder()
		s.set(meter.BudgetKeySpend, "key_1", 400)
		c := newCounters(t, s)
		var wg sync.WaitGroup
		var admitted atomic.Int64
		errs := make(chan error, 100)
		for range 100 {
			wg.Go(func() {
				var r meter.Reservation
				refused, err := Reserve(context.Background(), c, t0, bs(keySpend), []int64{10}, &r)
				if err != nil {
					errs <- err
					return
				}
				if refused < 0 {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int64(60), admitted.Load(), "the seeded 400 left room for 60 of 10")
		require.Equal(t, int64(1000), used(t, c, t0, keySpend))
		require.NotEmpty(t, s.callsFor(meter.BudgetKeySpend, "key_1"))
	})
}

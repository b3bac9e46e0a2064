package metertest

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/meter"
)

// admission is one chat request's Admission, with room for its windows'
// states.
func admission(ws []meter.Window, leaseKey string, leaseLimit int64, budgets []meter.Budget, amounts ...int64) *meter.Admission {
	return &meter.Admission{
		Windows:    ws,
		WindowOut:  make([]meter.WindowState, len(ws)),
		LeaseKey:   leaseKey,
		LeaseLimit: leaseLimit,
		Budgets:    budgets,
		Amounts:    amounts,
	}
}

// admit runs Admit and checks what every outcome promises of the result
// and the reservation.
func admit(t *testing.T, c meter.Counters, now time.Time, a *meter.Admission, r *meter.Reservation) meter.AdmitResult {
	t.Helper()
	res, err := c.Admit(t.Context(), now, a, r)
	require.NoError(t, err)
	if res.Refused == meter.AdmitOK {
		require.Equal(t, len(a.Budgets), r.N, "an admitted request holds its reservation")
		if a.LeaseKey != "" {
			require.Equal(t, a.LeaseKey, res.Lease.Key)
			require.NotEmpty(t, res.Lease.ID)
		} else {
			require.Equal(t, meter.Lease{}, res.Lease)
		}
	} else {
		require.Zero(t, r.N, "a refused request reserves nothing")
		require.Equal(t, meter.Lease{}, res.Lease, "a refused request holds no slot")
	}
	if res.Refused != meter.AdmitBudget {
		require.Zero(t, res.Budget)
	}
	return res
}

func finish(t *testing.T, c meter.Counters, l meter.Lease, r *meter.Reservation, actual ...int64) {
	t.Helper()
	require.NoError(t, c.Finish(t.Context(), l, r, actual))
}

func wins(w ...meter.Window) []meter.Window { return w }

func runAdmission(t *testing.T, newCounters newCountersFunc) {
	key := meter.Window{Key: "rl:key:k1:requests", Limit: 3, Length: time.Minute}
	org := meter.Window{Key: "rl:org:o1:requests", Limit: 10, Length: time.Minute}
	keySpend := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 1000}
	wsSpend := meter.Budget{Kind: meter.BudgetWorkspaceSpend, Subject: "ws_1", Cap: 500}
	burst := meter.Budget{Kind: meter.BudgetPoolBurst, Subject: "org_1", Cap: 200}
	reset := resetSecond(t0, time.Minute)
	nextMonth := meter.NextMonth(t0).Unix()
	burstReset := meter.BurstSlotStart(t0).Add(meter.BurstWindow).Unix()

	t.Run("AdmittedThenFinished", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		a := admission(wins(key, org), "cc:k1", 2, bs(keySpend, burst), 400, 100)
		res := admit(t, c, t0, a, &r)
		require.Equal(t, meter.AdmitOK, res.Refused)
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 2, ResetAt: reset}, {Limit: 10, Remaining: 9, ResetAt: reset}}, a.WindowOut)
		require.Equal(t, int64(1), inFlight(t, c, t0, "cc:k1"))
		require.Equal(t, []meter.BudgetState{{Used: 400, ResetAt: nextMonth}, {Used: 100, ResetAt: burstReset}}, usage(t, c, t0, keySpend, burst))
		require.Equal(t, bs(keySpend, burst), r.Budgets[:r.N])
		require.Equal(t, []int64{400, 100}, r.Amounts[:r.N])
		require.Equal(t, []int64{meter.MonthStart(t0).Unix(), meter.BurstSlotStart(t0).Unix()}, r.Slots[:r.N])

		var r2 meter.Reservation
		res2 := admit(t, c, t0, a, &r2)
		require.Equal(t, meter.AdmitOK, res2.Refused)
		require.NotEqual(t, res.Lease, res2.Lease, "every lease is its own")
		require.Equal(t, int64(2), inFlight(t, c, t0, "cc:k1"))

		finish(t, c, res.Lease, &r, 250, 40)
		require.Equal(t, int64(1), inFlight(t, c, t0, "cc:k1"), "Finish gave the slot back")
		require.Equal(t, []meter.BudgetState{{Used: 250 + 400, ResetAt: nextMonth}, {Used: 40 + 100, ResetAt: burstReset}}, usage(t, c, t0, keySpend, burst),
			"and replaced the reservation with the actual cost")
		finish(t, c, res.Lease, &r, 0, 0)
		require.Equal(t, int64(1), inFlight(t, c, t0, "cc:k1"), "finishing twice frees no other slot")
		require.Equal(t, []int64{650, 140}, []int64{used(t, c, t0, keySpend), used(t, c, t0, burst)}, "and settles nothing again")

		finish(t, c, res2.Lease, &r2, 0, 0)
		require.Zero(t, inFlight(t, c, t0, "cc:k1"))
		require.Equal(t, []meter.BudgetState{{Used: 250, ResetAt: nextMonth}, {Used: 40, ResetAt: burstReset}}, usage(t, c, t0, keySpend, burst),
			"the counters hold exactly the actual costs")
		finish(t, c, res2.Lease, &r2, 0, 0)
		finish(t, c, meter.Lease{}, &meter.Reservation{})
		require.Zero(t, inFlight(t, c, t0, "cc:k1"))
		require.Equal(t, int64(250), used(t, c, t0, keySpend))
	})

	t.Run("FullWindowChangesNothing", func(t *testing.T) {
		c := empty(t, newCounters)
		for range 3 {
			ok, _ := hit(t, c, t0, key)
			require.True(t, ok)
		}
		var r meter.Reservation
		a := admission(wins(org, key), "cc:k1", 2, bs(keySpend), 100)
		res := admit(t, c, t0.Add(time.Second), a, &r)
		require.Equal(t, meter.AdmitWindow, res.Refused)
		require.Equal(t, []meter.WindowState{{Limit: 10, Remaining: 10}, {Limit: 3, Remaining: 0, ResetAt: reset}}, a.WindowOut,
			"the states are reported, and the other window did not count")
		require.Equal(t, []meter.WindowState{{Limit: 10, Remaining: 10}}, peek(t, c, t0.Add(time.Second), org))
		require.Zero(t, inFlight(t, c, t0, "cc:k1"), "no slot is taken")
		require.Zero(t, used(t, c, t0, keySpend), "nothing is reserved")

		_, ok := acquire(t, c, t0, "cc:k1", 1)
		require.True(t, ok)
		a = admission(wins(key), "cc:k1", 1, bs(keySpend), 2000)
		require.Equal(t, meter.AdmitWindow, admit(t, c, t0, a, &r).Refused, "the window is checked first")
	})

	t.Run("FullLeaseCountsTheWindows", func(t *testing.T) {
		c := empty(t, newCounters)
		held, ok := acquire(t, c, t0, "cc:k1", 1)
		require.True(t, ok)
		var r meter.Reservation
		a := admission(wins(key, org), "cc:k1", 1, bs(keySpend), 100)
		res := admit(t, c, t0, a, &r)
		require.Equal(t, meter.AdmitConcurrency, res.Refused)
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 2, ResetAt: reset}, {Limit: 10, Remaining: 9, ResetAt: reset}}, a.WindowOut,
			"the request counts in its windows")
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 2, ResetAt: reset}}, peek(t, c, t0, key))
		require.Equal(t, int64(1), inFlight(t, c, t0, "cc:k1"))
		require.Zero(t, used(t, c, t0, keySpend), "nothing is reserved")

		a = admission(wins(org), "cc:k1", 1, bs(keySpend), 2000)
		require.Equal(t, meter.AdmitConcurrency, admit(t, c, t0, a, &r).Refused, "the lease is checked before the budgets")
		a = admission(wins(org), "cc:k2", 0, nil)
		require.Equal(t, meter.AdmitConcurrency, admit(t, c, t0, a, &r).Refused, "a zero lease limit admits nobody")
		require.Equal(t, int64(7), peek(t, c, t0, org)[0].Remaining)

		release(t, c, held)
		a = admission(wins(key), "cc:k1", 1, bs(keySpend), 100)
		require.Equal(t, meter.AdmitOK, admit(t, c, t0, a, &r).Refused, "the slot freed admits the next")
	})

	t.Run("SpentBudgetTakesNoSlot", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		a := admission(wins(key, org), "cc:k1", 1, bs(keySpend, wsSpend, burst), 300, 501, 300)
		res := admit(t, c, t0, a, &r)
		require.Equal(t, meter.AdmitBudget, res.Refused)
		require.Equal(t, 1, res.Budget, "the first budget over is named")
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 2, ResetAt: reset}, {Limit: 10, Remaining: 9, ResetAt: reset}}, a.WindowOut,
			"the request counts in its windows")
		require.Equal(t, int64(9), peek(t, c, t0, org)[0].Remaining)
		require.Zero(t, inFlight(t, c, t0, "cc:k1"), "no slot is held")
		require.Equal(t, []meter.BudgetState{{Used: 0, ResetAt: nextMonth}, {Used: 0, ResetAt: nextMonth}, {}}, usage(t, c, t0, keySpend, wsSpend, burst),
			"nothing is reserved")

		a = admission(nil, "cc:k1", 1, bs(keySpend, keySpend), 600, 600)
		res = admit(t, c, t0, a, &r)
		require.Equal(t, meter.AdmitBudget, res.Refused, "both amounts count against one counter")
		require.Equal(t, 1, res.Budget)
		a = admission(nil, "cc:k1", 1, bs(keySpend, wsSpend, burst), 1000, 500, 200)
		res = admit(t, c, t0, a, &r)
		require.Equal(t, meter.AdmitOK, res.Refused, "every cap may be reached")
		require.Equal(t, int64(1), inFlight(t, c, t0, "cc:k1"), "the slot the refusals did not take")
	})

	t.Run("WindowsOnlyIsHit", func(t *testing.T) {
		c := empty(t, newCounters)
		other := meter.Window{Key: "rl:key:k2:requests", Limit: 3, Length: time.Minute}
		var r meter.Reservation
		for i := range 5 {
			now := t0.Add(time.Duration(i) * time.Second)
			ok, out := hit(t, c, now, key)
			a := admission(wins(other), "", 0, nil)
			res := admit(t, c, now, a, &r)
			require.Equal(t, ok, res.Refused == meter.AdmitOK, "call %d", i)
			if !ok {
				require.Equal(t, meter.AdmitWindow, res.Refused)
			}
			require.Equal(t, out, a.WindowOut, "call %d", i)
		}
		res := admit(t, c, t0, admission(nil, "", 0, nil), &r)
		require.Equal(t, meter.AdmitResult{}, res, "nothing to check admits")
	})

	t.Run("FinishIsSettleAndRelease", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		a := admission(nil, "cc:k1", 5, bs(keySpend), 600)
		res := admit(t, c, t0, a, &r)
		require.Equal(t, meter.AdmitOK, res.Refused)

		requireCallerError(t, c.Finish(t.Context(), res.Lease, &r, nil))
		requireCallerError(t, c.Finish(t.Context(), res.Lease, &r, []int64{-1}))
		require.Equal(t, int64(1), inFlight(t, c, t0, "cc:k1"), "a refused Finish changes nothing")
		require.Equal(t, int64(600), used(t, c, t0, keySpend))

		finish(t, c, meter.Lease{}, &r, 200) // settle only
		require.Equal(t, int64(200), used(t, c, t0, keySpend))
		require.Equal(t, int64(1), inFlight(t, c, t0, "cc:k1"))
		finish(t, c, res.Lease, &r, 0) // settled already: release only
		require.Equal(t, int64(200), used(t, c, t0, keySpend))
		require.Zero(t, inFlight(t, c, t0, "cc:k1"))

		// A settlement and a release in separate Finishes: each step happens once.
		res = admit(t, c, t0, a, &r)
		require.Equal(t, meter.AdmitOK, res.Refused)
		settle(t, c, &r, 100)
		release(t, c, res.Lease)
		finish(t, c, res.Lease, &r, 0)
		require.Equal(t, int64(300), used(t, c, t0, keySpend))
		require.Zero(t, inFlight(t, c, t0, "cc:k1"))
		require.NoError(t, c.Finish(t.Context(), meter.Lease{Key: "cc:k1", ID: "not-a-lease"}, &meter.Reservation{}, nil))
	})

	t.Run("FinishAfterTheMonthEnds", func(t *testing.T) {
		c := empty(t, newCounters)
		may := time.Date(2026, 5, 31, 23, 59, 30, 0, time.UTC)
		june := time.Date(2026, 6, 1, 0, 0, 30, 0, time.UTC)
		b := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 150}
		var rMay, rJune meter.Reservation
		resMay := admit(t, c, may, admission(nil, "cc:k1", 5, bs(b), 150), &rMay)
		require.Equal(t, meter.AdmitOK, resMay.Refused)
		resJune := admit(t, c, june, admission(nil, "cc:k1", 5, bs(b), 150), &rJune)
		require.Equal(t, meter.AdmitOK, resJune.Refused, "a new month starts empty")
		finish(t, c, resMay.Lease, &rMay, 40)
		require.Equal(t, int64(40), used(t, c, may, b), "the May request is settled in May")
		require.Equal(t, int64(150), used(t, c, june, b), "and leaves June alone")
		require.Equal(t, int64(1), inFlight(t, c, june, "cc:k1"))
	})

	t.Run("BadArguments", func(t *testing.T) {
		c := empty(t, newCounters)
		var r meter.Reservation
		a := admission(wins(key, org), "cc:k1", 1, bs(keySpend), 10)
		a.WindowOut = a.WindowOut[:1]
		_, err := c.Admit(t.Context(), t0, a, &r)
		requireCallerError(t, err)
		_, err = c.Admit(t.Context(), t0, admission(wins(key), "cc:k1", 1, bs(keySpend)), &r)
		requireCallerError(t, err)
		_, err = c.Admit(t.Context(), t0, admission(wins(key), "cc:k1", 1, bs(meter.Budget{Kind: meter.BudgetKeySpend}), 1), &r)
		requireCallerError(t, err)
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 3}}, peek(t, c, t0, key), "nothing counted")
		require.Zero(t, inFlight(t, c, t0, "cc:k1"))
	})

	t.Run("Seeding", func(t *testing.T) {
		credits := meter.Budget{Kind: meter.BudgetCredits, Subject: "key_2", Cap: 6000}
		s := newSeeder()
		s.set(meter.BudgetKeySpend, "key_1", 700)
		s.set(meter.BudgetCredits, "key_2", 5000)
		s.failKind(meter.BudgetCredits, errLedgerDown)
		c := newCounters(t, s)

		var r meter.Reservation
		a := admission(wins(key, org), "cc:k1", 2, bs(keySpend, credits), 100, 100)
		_, err := c.Admit(t.Context(), t0, a, &r)
		require.ErrorIs(t, err, meter.ErrCountersUnavailable, "a budget that cannot be seeded fails the admission")
		require.Zero(t, r.N)
		require.Equal(t, []meter.WindowState{{Limit: 3, Remaining: 3}, {Limit: 10, Remaining: 10}}, peek(t, c, t0, key, org),
			"and nothing changed: no window counted")
		require.Zero(t, inFlight(t, c, t0, "cc:k1"), "no slot taken")
		require.Equal(t, int64(700), used(t, c, t0, keySpend), "no budget charged")

		s.failKind(meter.BudgetCredits, nil)
		a = admission(wins(key, org), "cc:k1", 2, bs(keySpend, credits), 301, 100)
		res := admit(t, c, t0, a, &r)
		require.Equal(t, meter.AdmitBudget, res.Refused, "the ledger's usage is where the counter starts")
		require.Equal(t, 0, res.Budget)
		require.Equal(t, int64(2), a.WindowOut[0].Remaining)
		a = admission(wins(key, org), "cc:k1", 2, bs(keySpend, credits), 300, 1000)
		res = admit(t, c, t0, a, &r)
		require.Equal(t, meter.AdmitOK, res.Refused)
		require.Equal(t, []meter.BudgetState{{Used: 1000, ResetAt: nextMonth}, {Used: 6000}}, usage(t, c, t0, keySpend, credits))
		require.Len(t, s.callsFor(meter.BudgetKeySpend, "key_1"), 1, "seeded once")
		require.Len(t, s.callsFor(meter.BudgetCredits, "key_2"), 2, "tried again after the failure, then seeded once")
	})

	t.Run("ConcurrentAdmissionsHoldBothLimits", func(t *testing.T) {
		c := empty(t, newCounters)
		spend := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_busy", Cap: 50_000}
		window := meter.Window{Key: "rl:org:busy:requests", Limit: 1 << 40, Length: time.Minute}
		round := func(leaseLimit int64) (res []meter.AdmitResult, rs []meter.Reservation) {
			res, rs = make([]meter.AdmitResult, 200), make([]meter.Reservation, 200)
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			for g := range 200 {
				wg.Go(func() {
					a := admission(wins(window), "cc:busy", leaseLimit, bs(spend), 1000)
					var err error
					if res[g], err = c.Admit(context.Background(), t0, a, &rs[g]); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			return res, rs
		}
		count := func(res []meter.AdmitResult) map[meter.AdmitRefusal]int {
			n := map[meter.AdmitRefusal]int{}
			for _, r := range res {
				n[r.Refused]++
			}
			return n
		}

		res, rs := round(40)
		require.Equal(t, map[meter.AdmitRefusal]int{meter.AdmitOK: 40, meter.AdmitConcurrency: 160}, count(res),
			"the lease limit admits exactly 40")
		require.Equal(t, int64(40), inFlight(t, c, t0, "cc:busy"))
		require.Equal(t, int64(40_000), used(t, c, t0, spend))
		for g := range res {
			if res[g].Refused == meter.AdmitOK {
				finish(t, c, res[g].Lease, &rs[g], 0)
			}
		}
		require.Zero(t, inFlight(t, c, t0, "cc:busy"))
		require.Zero(t, used(t, c, t0, spend))

		res, _ = round(100)
		require.Equal(t, map[meter.AdmitRefusal]int{meter.AdmitOK: 50, meter.AdmitBudget: 150}, count(res),
			"the cap admits exactly 50")
		require.Equal(t, int64(50), inFlight(t, c, t0, "cc:busy"))
		require.Equal(t, int64(50_000), used(t, c, t0, spend))
		require.Equal(t, int64(1<<40-400), peek(t, c, t0, window)[0].Remaining, "every request counted in the window")
	})

	t.Run("ConcurrentAdmitAndFinish", func(t *testing.T) {
		c := empty(t, newCounters)
		const limit = 10
		spend := meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key_churn", Cap: 30_000}
		var held, most, granted, settled atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for range 200 {
			wg.Go(func() {
				for range 5 {
					a := &meter.Admission{LeaseKey: "cc:churn", LeaseLimit: limit, Budgets: []meter.Budget{spend}, Amounts: []int64{1000}}
					var r meter.Reservation
					res, err := c.Admit(context.Background(), t0, a, &r)
					if err != nil {
						errs <- err
						return
					}
					if res.Refused != meter.AdmitOK {
						continue
					}
					granted.Add(1)
					n := held.Add(1)
					for {
						m := most.Load()
						if n <= m || most.CompareAndSwap(m, n) {
							break
						}
					}
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
					held.Add(-1)
					actual := rand.Int64N(1001)
					if err := c.Finish(context.Background(), res.Lease, &r, []int64{actual}); err != nil {
						errs <- err
						return
					}
					settled.Add(actual)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Positive(t, granted.Load())
		require.LessOrEqual(t, most.Load(), int64(limit), "never more slots held than the limit")
		require.Zero(t, inFlight(t, c, t0, "cc:churn"), "every slot came back")
		require.Equal(t, settled.Load(), used(t, c, t0, spend), "the counter is the sum of what was settled")
		require.LessOrEqual(t, used(t, c, t0, spend), spend.Cap)
	})
}

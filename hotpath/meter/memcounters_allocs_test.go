//go:build !race

package meter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/meter"
)

// The in-process window check, lease acquire and release, reservation
// arithmetic, and admission and finish combining them allocate nothing once
// their counters exist. Lease ids are made
// 256 to an allocation, which rounds to zero per call.
func TestMemoryCountersAllocateNothing(t *testing.T) {
	m := meter.NewMemoryCounters(nil)
	ctx := context.Background()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	ws := []meter.Window{
		{Key: "rl:key:k1:requests", Limit: 1 << 62, Length: time.Minute},
		{Key: "rl:org:o1:requests", Limit: 1 << 62, Length: time.Minute},
	}
	out := make([]meter.WindowState, 2)
	budgets := []meter.Budget{
		{Kind: meter.BudgetKeySpend, Subject: "key_1", Cap: 1 << 62},
		{Kind: meter.BudgetCredits, Subject: "key_1", Cap: 1 << 62},
		{Kind: meter.BudgetPoolMonthly, Subject: "org_1", Cap: 1 << 62},
		{Kind: meter.BudgetPoolBurst, Subject: "org_1", Cap: 1 << 62},
	}
	amounts := []int64{1000, 1000, 100, 100}
	actual := []int64{600, 600, 60, 60}
	states := make([]meter.BudgetState, len(budgets))
	var r meter.Reservation
	admission := &meter.Admission{Windows: ws, WindowOut: out, LeaseKey: "cc:k1", LeaseLimit: 4, Budgets: budgets, Amounts: amounts}

	calls := map[string]func(){
		"Hit": func() {
			if ok, err := m.Hit(ctx, now, ws, out); err != nil || !ok {
				t.Fatal(err, ok)
			}
		},
		"PeekWindows": func() {
			if err := m.PeekWindows(ctx, now, ws, out); err != nil {
				t.Fatal(err)
			}
		},
		"AdmitFinish": func() {
			res, err := m.Admit(ctx, now, admission, &r)
			if err != nil || res.Refused != meter.AdmitOK {
				t.Fatal(err, res.Refused)
			}
			if err := m.Finish(ctx, res.Lease, &r, actual); err != nil {
				t.Fatal(err)
			}
		},
		"Usage": func() {
			if err := m.Usage(ctx, now, budgets, states); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, call := range calls {
		call() // create the counters
		require.Zero(t, testing.AllocsPerRun(1000, call), name)
	}
}

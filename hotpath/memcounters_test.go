package hotpath_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/countertest"
)

func TestMemoryCountersContract(t *testing.T) {
	countertest.Run(t, func(t *testing.T, seeder hotpath.BudgetSeeder) hotpath.Counters {
		return hotpath.NewMemoryCounters(seeder)
	})
}

func BenchmarkMemoryCounters(b *testing.B) {
	m := hotpath.NewMemoryCounters(nil)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	var seq atomic.Int64
	b.Run("Hit", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			g := seq.Add(1)
			ws := []hotpath.Window{
				{Key: fmt.Sprintf("rl:key:k%d:requests", g), Limit: 1 << 62, Length: time.Minute},
				{Key: fmt.Sprintf("rl:org:o%d:requests", g%4), Limit: 1 << 62, Length: time.Minute},
			}
			out := make([]hotpath.WindowState, 2)
			for pb.Next() {
				if _, err := m.Hit(context.Background(), now, ws, out); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("AcquireRelease", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("cc:k%d", seq.Add(1))
			for pb.Next() {
				l, ok, err := m.Acquire(context.Background(), now, key, 4)
				if err != nil || !ok {
					b.Error(err, ok)
					return
				}
				if err := m.Release(context.Background(), l); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("AdmitFinish", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			g := seq.Add(1)
			a := &hotpath.Admission{
				Windows: []hotpath.Window{
					{Key: fmt.Sprintf("rl:key:k%d:requests", g), Limit: 1 << 62, Length: time.Minute},
					{Key: fmt.Sprintf("rl:org:o%d:requests", g%4), Limit: 1 << 62, Length: time.Minute},
				},
				WindowOut:  make([]hotpath.WindowState, 2),
				LeaseKey:   fmt.Sprintf("cc:k%d", g),
				LeaseLimit: 4,
				Budgets: []hotpath.Budget{
					{Kind: hotpath.BudgetKeySpend, Subject: fmt.Sprintf("key_%d", g), Cap: 1 << 62},
					{Kind: hotpath.BudgetWorkspaceSpend, Subject: fmt.Sprintf("ws_%d", g%4), Cap: 1 << 62},
					{Kind: hotpath.BudgetPoolMonthly, Subject: fmt.Sprintf("org_%d", g%4), Cap: 1 << 62},
					{Kind: hotpath.BudgetPoolBurst, Subject: fmt.Sprintf("org_%d", g%4), Cap: 1 << 62},
				},
				Amounts: []int64{1000, 1000, 100, 100},
			}
			actual := []int64{600, 600, 60, 60}
			var r hotpath.Reservation
			for pb.Next() {
				res, err := m.Admit(context.Background(), now, a, &r)
				if err != nil || res.Refused != hotpath.AdmitOK {
					b.Error(err, res.Refused)
					return
				}
				if err := m.Finish(context.Background(), res.Lease, &r, actual); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("ReserveSettle", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			g := seq.Add(1)
			budgets := []hotpath.Budget{
				{Kind: hotpath.BudgetKeySpend, Subject: fmt.Sprintf("key_%d", g), Cap: 1 << 62},
				{Kind: hotpath.BudgetWorkspaceSpend, Subject: fmt.Sprintf("ws_%d", g%4), Cap: 1 << 62},
				{Kind: hotpath.BudgetPoolMonthly, Subject: fmt.Sprintf("org_%d", g%4), Cap: 1 << 62},
				{Kind: hotpath.BudgetPoolBurst, Subject: fmt.Sprintf("org_%d", g%4), Cap: 1 << 62},
			}
			amounts := []int64{1000, 1000, 100, 100}
			actual := []int64{600, 600, 60, 60}
			var r hotpath.Reservation
			for pb.Next() {
				if refused, err := m.Reserve(context.Background(), now, budgets, amounts, &r); err != nil || refused >= 0 {
					b.Error(err, refused)
					return
				}
				if err := m.Settle(context.Background(), &r, actual); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

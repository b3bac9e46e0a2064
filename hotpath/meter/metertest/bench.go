package metertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegw/gateway/hotpath/meter"
)

// Bench runs the same benchmarks against any store: Hit and AdmitFinish,
// the calls a request makes, each from parallel goroutines whose keys
// are partly their own and partly shared. parallelism sets
// b.SetParallelism (a remote store wants many calls in flight, as a
// gateway has); setup runs at the start of every sub-benchmark (to report
// round trips, for instance).
func Bench(b *testing.B, c meter.Counters, now time.Time, parallelism int, setup func(*testing.B)) {
	var seq atomic.Int64
	run := func(name string, body func(b *testing.B, g int64, next func() bool)) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			if parallelism > 0 {
				b.SetParallelism(parallelism)
			}
			if setup != nil {
				setup(b)
			}
			b.RunParallel(func(pb *testing.PB) { body(b, seq.Add(1), pb.Next) })
		})
	}
	ctx := context.Background()
	run("Hit", func(b *testing.B, g int64, next func() bool) {
		a := BenchAdmission(g)
		for next() {
			if _, err := c.Hit(ctx, now, a.Windows, a.WindowOut); err != nil {
				b.Error(err)
				return
			}
		}
	})
	actual := []int64{600, 600, 60, 60}
	run("AdmitFinish", func(b *testing.B, g int64, next func() bool) {
		a := BenchAdmission(g)
		var r meter.Reservation
		for next() {
			res, err := c.Admit(ctx, now, a, &r)
			if err != nil || res.Refused != meter.AdmitOK {
				b.Error(err, res.Refused)
				return
			}
			if err := c.Finish(ctx, res.Lease, &r, actual); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchAdmission is a chat request of goroutine g: its key's and its
// organization's windows, its key's lease, and four budgets, some shared
// with other goroutines.
func BenchAdmission(g int64) *meter.Admission {
	return &meter.Admission{
		Windows: []meter.Window{
			{Key: fmt.Sprintf("rl:key:k%d:requests", g), Limit: 1 << 62, Length: time.Minute},
			{Key: fmt.Sprintf("rl:org:o%d:requests", g%4), Limit: 1 << 62, Length: time.Minute},
		},
		WindowOut:  make([]meter.WindowState, 2),
		LeaseKey:   fmt.Sprintf("cc:k%d", g),
		LeaseLimit: 4,
		Budgets: []meter.Budget{
			{Kind: meter.BudgetKeySpend, Subject: fmt.Sprintf("key_%d", g), Cap: 1 << 62},
			{Kind: meter.BudgetWorkspaceSpend, Subject: fmt.Sprintf("ws_%d", g%4), Cap: 1 << 62},
			{Kind: meter.BudgetPoolMonthly, Subject: fmt.Sprintf("org_%d", g%4), Cap: 1 << 62},
			{Kind: meter.BudgetPoolBurst, Subject: fmt.Sprintf("org_%d", g%4), Cap: 1 << 62},
		},
		Amounts: []int64{1000, 1000, 100, 100},
	}
}

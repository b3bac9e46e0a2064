package hotpath_test

import (
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
	countertest.Bench(b, hotpath.NewMemoryCounters(nil), time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC), 0, nil)
}

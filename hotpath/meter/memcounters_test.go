package meter_test

import (
	"testing"
	"time"

	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/hotpath/meter/metertest"
)

func TestMemoryCountersContract(t *testing.T) {
	metertest.Run(t, func(t *testing.T, seeder meter.BudgetSeeder) meter.Counters {
		return meter.NewMemoryCounters(seeder)
	})
}

func BenchmarkMemoryCounters(b *testing.B) {
	metertest.Bench(b, meter.NewMemoryCounters(nil), time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC), 0, nil)
}

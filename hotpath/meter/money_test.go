package meter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
)

func TestCostIsExact(t *testing.T) {
	mira := &hotpath.Prices{InputPerM: 200_000, OutputPerM: 400_000, CacheReadPerM: 50_000}
	// 600 billable × 0.20/M + 400 cached × 0.05/M + 250 × 0.40/M = 0.00012 + 0.00002 + 0.0001
	require.Equal(t, int64(240_000_000), meter.Cost(mira, 1000, 400, 250))
	require.Equal(t, int64(1), meter.Cost(&hotpath.Prices{OutputPerM: 1}, 0, 0, 1), "a millionth of a micro-dollar survives")
	require.Equal(t, int64(5_000_000), meter.PicoUSD(5), "five micro-USD")
}

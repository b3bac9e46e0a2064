//go:build !race

package storage

import (
	"context"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
)

func TestRecordAllocatesNothing(t *testing.T) {
	l, err := newLedger(nil, discardWriter{}, LedgerConfig{SpoolDir: t.TempDir()}, metrics.NewSet(), discardLog())
	require.NoError(t, err)
	defer l.Close(context.Background())
	r := sampleRecord()
	require.Zero(t, testing.AllocsPerRun(1000, func() { l.Record(&r) }))
}

func TestSpoolLineAllocatesNothing(t *testing.T) {
	r := sampleRecord()
	var w ledgerRow
	w.fill(&r)
	buf := make([]byte, 0, 4096)
	require.Zero(t, testing.AllocsPerRun(1000, func() { buf = appendSpoolLine(buf[:0], &w) }))
}

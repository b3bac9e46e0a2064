package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// BenchmarkEvalClaimFinish claims and finishes items of a full-size run
// (MaxEvalCases cases) one after another: the queue's cost per item.
func BenchmarkEvalClaimFinish(b *testing.B) {
	ctx := context.Background()
	db := storetest.DB(b)
	o, run := benchRun(b, db, storage.MaxEvalCases, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		it, err := db.ClaimEvalItem(ctx, time.Minute, 32)
		require.NoError(b, err)
		if it == nil {
			b.Fatalf("the queue ran dry after %d items", i)
		}
		held, err := db.FinishEvalItem(ctx, it, storage.EvalOutcome{Status: "passed"}, "")
		require.NoError(b, err)
		require.True(b, held)
	}
	b.StopTimer()
	r, err := db.EvalRun(ctx, o, run.ID)
	require.NoError(b, err)
	require.Equal(b, b.N, r.Counts.Passed)
}

package storage_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// hammer runs 400 distinct parameterised queries from 8 goroutines and
// returns how many failed.
func hammer(t *testing.T, db *storage.DB) int64 {
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 50 {
				var n int
				q := fmt.Sprintf("select $1::int + %d", i%10)
				if err := db.Pool.QueryRow(t.Context(), q, i).Scan(&n); err != nil || n != i+i%10 {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

// Behind PgBouncer in transaction mode, pgx's default named prepared
// statements break (the test's PgBouncer is a real transaction pooler);
// with a direct URL set, the pool runs without them and nothing fails.
func TestPgBouncerPoolRunsWithoutNamedStatements(t *testing.T) {
	direct := storetest.DatabaseURL(t)
	pooled := storetest.PgBouncerURL(t, direct)
	open := func(url string) *storage.DB {
		db, err := storage.Open(context.Background(), storage.Config{URL: url, DirectURL: direct, MaxConns: 8})
		require.NoError(t, err)
		t.Cleanup(db.Close)
		return db
	}
	require.Positive(t, hammer(t, open(pooled+"&default_query_exec_mode=cache_statement")), "named statements fail through the pooler")
	require.Zero(t, hammer(t, open(pooled)))
}

// The status prober's session lock is held on a direct connection: behind
// PgBouncer one process leads, the others do not, and a release hands the
// lead over.
func TestStatusLeaderBehindPgBouncer(t *testing.T) {
	direct := storetest.DatabaseURL(t)
	pooled := storetest.PgBouncerURL(t, direct)
	ctx := t.Context()
	leaders := make([]*storage.StatusLeader, 3)
	for i := range leaders {
		db, err := storage.Open(ctx, storage.Config{URL: pooled, DirectURL: direct, MaxConns: 2})
		require.NoError(t, err)
		t.Cleanup(db.Close)
		leaders[i] = db.NewStatusLeader()
		t.Cleanup(func() { leaders[i].Release(context.Background()) })
	}
	lead := func(i int) bool {
		ok, err := leaders[i].Lead(ctx)
		require.NoError(t, err)
		return ok
	}
	require.True(t, lead(0))
	for range 3 {
		require.True(t, lead(0), "the leader keeps the lock")
		require.False(t, lead(1))
		require.False(t, lead(2))
	}
	leaders[0].Release(ctx)
	require.True(t, lead(1), "a released lock is taken at the next try")
	require.False(t, lead(2))
	require.False(t, lead(0))
}

func TestDirectURLIsNotThePooledOne(t *testing.T) {
	c := storage.Config{URL: "postgres://u@pooler:6432/db", DirectURL: "postgres://u@pooler:6432/db"}
	require.ErrorContains(t, c.Validate(), "database-direct-url")
	c.DirectURL = "postgres://u@primary:5432/db"
	require.NoError(t, c.Validate())
}

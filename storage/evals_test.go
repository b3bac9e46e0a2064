package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// evalRun makes a suite of n cases and a run of it.
func evalRun(t *testing.T, db *storage.DB, n, concurrency int) (storage.EvalOwner, storage.EvalRun) {
	t.Helper()
	return benchRun(t, db, n, concurrency)
}

func benchRun(t testing.TB, db *storage.DB, n, concurrency int) (storage.EvalOwner, storage.EvalRun) {
	t.Helper()
	ctx := context.Background()
	org, err := db.CreateOrg(ctx, "Evals")
	require.NoError(t, err)
	u, err := db.CreateUser(ctx, "evals-"+org.ID+"@example.com", org.ID, hotpath.RoleOwner)
	require.NoError(t, err)
	key, err := db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: org.ID, Kind: hotpath.KindDeveloper})
	require.NoError(t, err)
	o := storage.EvalOwner{OrgID: org.ID}
	s, err := db.CreateEvalSuite(ctx, o, "Queue", "queue", "", "mira")
	require.NoError(t, err)
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = []byte(`{"messages":[{"role":"user","content":"x"}],"assertions":[]}`)
	}
	_, err = db.CreateEvalCases(ctx, o, s.ID, bodies)
	require.NoError(t, err)
	run, err := db.CreateEvalRun(ctx, o, s.ID, key.KeyID, storage.EvalRunOptions{Tier: "mira", Concurrency: concurrency,
		Repeats: 1, OnBudget: "continue"})
	require.NoError(t, err)
	return o, run
}

// Claims respect the run's concurrency and the fleet's cap, and never hand
// one item to two workers.
func TestEvalClaimCaps(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	_, run := evalRun(t, db, 10, 3)
	seen := map[string]bool{}
	for range 3 {
		it, err := db.ClaimEvalItem(ctx, time.Minute, 100)
		require.NoError(t, err)
		require.NotNil(t, it)
		require.False(t, seen[it.ID])
		seen[it.ID] = true
		require.Equal(t, run.ID, it.RunID)
		require.Equal(t, 1, it.Attempt)
		var left time.Duration
		require.NoError(t, db.Pool.QueryRow(ctx, `select lease_until - now() from eval_results where id = $1`, it.ID).Scan(&left))
		require.InDelta(t, time.Minute.Seconds(), left.Seconds(), 5, "the lease is the one asked for")
	}
	it, err := db.ClaimEvalItem(ctx, time.Minute, 100)
	require.NoError(t, err)
	require.Nil(t, it, "the run's concurrency is 3")

	_, other := evalRun(t, db, 2, 16)
	it, err = db.ClaimEvalItem(ctx, time.Minute, 4)
	require.NoError(t, err)
	require.NotNil(t, it)
	require.Equal(t, other.ID, it.RunID)
	it, err = db.ClaimEvalItem(ctx, time.Minute, 4)
	require.NoError(t, err)
	require.Nil(t, it, "the fleet cap is 4 and 4 are running")
}

// A claim whose lease lapsed is taken over by a new attempt; the old
// holder's result is refused, and after the last attempt a lapsed lease
// ends the item errored so the run completes.
func TestEvalLeaseFencing(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	o, run := evalRun(t, db, 1, 1)
	first, err := db.ClaimEvalItem(ctx, 50*time.Millisecond, 10)
	require.NoError(t, err)
	require.NotNil(t, first)
	time.Sleep(100 * time.Millisecond)
	held, err := db.ExtendEvalLease(ctx, first, time.Minute)
	require.NoError(t, err)
	require.True(t, held, "nobody took it yet: a late heartbeat still holds")

	_, err = db.Pool.Exec(ctx, `update eval_results set lease_until = now() - interval '1 second' where id = $1`, first.ID)
	require.NoError(t, err)
	second, err := db.ClaimEvalItem(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.NotNil(t, second)
	require.Equal(t, first.ID, second.ID)
	require.Equal(t, 2, second.Attempt)

	held, err = db.FinishEvalItem(ctx, first, storage.EvalOutcome{Status: "failed"}, "")
	require.NoError(t, err)
	require.False(t, held, "the first holder lost its claim")
	ok, err := db.NoteEvalRequest(ctx, first, "eval-x-1")
	require.NoError(t, err)
	require.False(t, ok)

	// The second attempt's holder dies too, and so does a third.
	for attempt := 3; attempt <= storage.EvalMaxAttempts+1; attempt++ {
		_, err = db.Pool.Exec(ctx, `update eval_results set lease_until = now() - interval '1 second' where id = $1`, first.ID)
		require.NoError(t, err)
		it, err := db.ClaimEvalItem(ctx, time.Minute, 10)
		require.NoError(t, err)
		if attempt <= storage.EvalMaxAttempts {
			require.NotNil(t, it)
			require.Equal(t, attempt, it.Attempt)
		} else {
			require.Nil(t, it)
		}
	}
	r, err := db.EvalRun(ctx, o, run.ID)
	require.NoError(t, err)
	require.Equal(t, storage.EvalRunCompleted, r.Status, "a run never hangs on an item nobody can finish")
	res, err := db.EvalResults(ctx, o, run.ID, "", 10, nil)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, "errored", res[0].Status)
	require.Equal(t, "lease_expired", *res[0].ErrorCode)
}

// A model may answer with a NUL or with bytes that are not UTF-8, which no
// text column holds: the reply is stored with U+FFFD in their place, and
// the item finishes instead of failing every attempt.
func TestEvalReplyWithNULIsStored(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	o, run := evalRun(t, db, 1, 1)
	it, err := db.ClaimEvalItem(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.NotNil(t, it)
	reply := "a\x00b\xffc"
	held, err := db.FinishEvalItem(ctx, it, storage.EvalOutcome{Status: "passed", Reply: &reply,
		ToolCalls: []byte(`[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":\"\\u0000\"}"}}]`),
		Verdicts:  []byte(`[{"type":"judge","passed":true,"reason":"fine\u0000"}]`)}, "")
	require.NoError(t, err)
	require.True(t, held)
	res, err := db.EvalResults(ctx, o, run.ID, "", 10, nil)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, "a\uFFFDb\uFFFDc", *res[0].Reply)
	require.Contains(t, string(res[0].Verdicts), "fine\uFFFD")
}

package storage_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// Ids of the rows these tests record: none of them needs to exist, the
// ledger has no foreign keys.
const (
	keyA  = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a71"
	keyB  = "0190b3c4-5d6e-7f80-9a1b-2c3d4e5f6a72"
	userA = "7a0c3a7e-8d7b-4f8e-9e51-0c0e2b1a9f11"
	userB = "7a0c3a7e-8d7b-4f8e-9e51-0c0e2b1a9f12"
	org1  = "3f2504e0-4f89-41d3-9a0c-0305e82c3301"
	org2  = "3f2504e0-4f89-41d3-9a0c-0305e82c3302"
	ws1   = "5b1f0c8e-1d2a-4c3b-8e4f-6a7b8c9d0e11"
)

type ledgerHarness struct {
	*storage.Ledger
	set *metrics.Set
	dir string
}

func openLedger(t testing.TB, db *storage.DB, dir string, mutate ...func(*storage.LedgerConfig)) *ledgerHarness {
	t.Helper()
	cfg := storage.LedgerConfig{SpoolDir: dir, FlushInterval: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		BatchSize: 200, WriteTimeout: 2 * time.Second}
	for _, m := range mutate {
		m(&cfg)
	}
	set := metrics.NewSet()
	l, err := storage.NewLedger(db, cfg, set, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return &ledgerHarness{Ledger: l, set: set, dir: dir}
}

func (h *ledgerHarness) counter(name string) uint64 { return h.set.GetOrCreateCounter(name).Get() }

func usage(id string, mutate ...func(*hotpath.UsageRecord)) *hotpath.UsageRecord {
	r := &hotpath.UsageRecord{RequestID: id, At: time.Now(), KeyID: keyA, UserID: userA, OrgID: org1,
		Bucket: "apikey", Route: "chat_v1", Tier: "vaani", Status: 200, InputTokens: 10, OutputTokens: 20,
		WeightedTokens: 30, CostPico: 1_000_000, Billed: true, DurationUS: 1500}
	for _, m := range mutate {
		m(r)
	}
	return r
}

func flush(t testing.TB, l *storage.Ledger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, l.Flush(ctx))
}

func countRows(t testing.TB, db *storage.DB, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "select count(*) from request_log where "+where, args...).Scan(&n))
	return n
}

func TestLedgerRowsReachPostgres(t *testing.T) { storetest.EachDB(t, testLedgerRowsReachPostgres) }

func testLedgerRowsReachPostgres(t *testing.T, db *storage.DB) {
	l := openLedger(t, db, t.TempDir())
	at := time.Date(2026, 5, 17, 8, 30, 15, 123_456_789, time.UTC)
	l.Record(usage("req-full", func(r *hotpath.UsageRecord) {
		r.At, r.WorkspaceID, r.Tier, r.Stream, r.Estimated, r.TTFTUS = at, ws1, "kavi", true, true, 250_000
		r.InputTokens, r.OutputTokens, r.WeightedTokens, r.CostPico = 1200, 345, 6789, 987_654_321_012
	}))
	l.Record(usage("req-refused", func(r *hotpath.UsageRecord) {
		r.Tier, r.Status, r.ErrorCode, r.Billed = "", 429, "rate_limited", false
		r.InputTokens, r.OutputTokens, r.WeightedTokens, r.CostPico = 0, 0, 0, 0
	}))
	l.Record(usage("req-anonymous", func(r *hotpath.UsageRecord) {
		r.KeyID, r.UserID, r.OrgID, r.Bucket, r.Tier, r.Status, r.ErrorCode, r.Billed = "", "", "", "", "", 401, "unauthorized", false
	}))
	// A text PostgreSQL would refuse is made valid, not the batch failed.
	l.Record(usage("req-\x00bad\xff"))
	flush(t, l.Ledger)
	ctx := context.Background()

	got, err := db.RequestLog(ctx, "req-full", userA, org1)
	require.NoError(t, err)
	require.Equal(t, storage.RequestLog{RequestID: "req-full", CreatedAt: at.Truncate(time.Microsecond), KeyID: keyA,
		WorkspaceID: ws1, Bucket: "apikey", Route: "chat_v1", Tier: "kavi", Status: 200, InputTokens: 1200,
		OutputTokens: 345, WeightedTokens: 6789, CostPico: 987_654_321_012, Estimated: true, Billed: true, Stream: true,
		DurationUS: 1500, TTFTUS: 250_000}, got)

	got, err = db.RequestLog(ctx, "req-refused", userA, org1)
	require.NoError(t, err)
	require.Equal(t, "rate_limited", got.ErrorCode)
	require.Equal(t, 429, got.Status)
	require.Empty(t, got.Tier)
	require.False(t, got.Billed)
	require.Zero(t, got.TTFTUS)

	require.Equal(t, 1, countRows(t, db, "request_id = 'req-anonymous' and key_id is null and user_id is null and org_id is null and bucket is null and tier is null"))
	require.Equal(t, 1, countRows(t, db, "request_id = 'req-full' and error_code is null and ttft_us = 250000"))
	require.Equal(t, 1, countRows(t, db, "request_id = $1", "req-\uFFFDbad\uFFFD"))
	require.EqualValues(t, 4, l.counter("gateway_ledger_rows_written_total"))
	require.Zero(t, l.counter("gateway_ledger_copy_conflicts_total"), "fresh rows are copied, not inserted")
}

func TestLedgerKeepsEveryRowOfARequestIDUsedTwice(t *testing.T) {
	db := storetest.DB(t)
	l := openLedger(t, db, t.TempDir())
	first := time.Now().Add(-time.Minute)
	// Two callers choose the same X-Request-Id; one of them reuses it.
	l.Record(usage("same-id", func(r *hotpath.UsageRecord) { r.At = first }))
	l.Record(usage("same-id", func(r *hotpath.UsageRecord) { r.KeyID, r.OutputTokens = keyB, 99 }))
	l.Record(usage("same-id", func(r *hotpath.UsageRecord) { r.UserID, r.OrgID = userB, org2 }))
	flush(t, l.Ledger)
	require.Equal(t, 3, countRows(t, db, "request_id = 'same-id' and billed"), "every billed request keeps its row")

	ctx := context.Background()
	got, err := db.RequestLog(ctx, "same-id", userA, org1)
	require.NoError(t, err)
	require.Equal(t, keyB, got.KeyID, "a caller who reused an id reads its latest request")
	require.EqualValues(t, 99, got.OutputTokens)
	got, err = db.RequestLog(ctx, "same-id", userB, org2)
	require.NoError(t, err)
	require.EqualValues(t, 20, got.OutputTokens)

	for name, c := range map[string][2]string{
		"another user in the organization":      {userB, org1},
		"the same user in another organization": {userA, org2},
		"a malformed user id":                   {"nope", org1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := db.RequestLog(ctx, "same-id", c[0], c[1])
			require.ErrorIs(t, err, storage.ErrNotFound)
		})
	}
	_, err = db.RequestLog(ctx, "no-such-id", userA, org1)
	require.ErrorIs(t, err, storage.ErrNotFound)
}

// databaseBehind returns a migrated database, its URL, and a second
// handle on it that reaches PostgreSQL through a relay.
func databaseBehind(t testing.TB) (direct, relayed *storage.DB, f *storetest.Relay, dbURL string) {
	t.Helper()
	ctx := context.Background()
	dbURL = storetest.DatabaseURL(t)
	direct, err := storage.Open(ctx, storage.Config{URL: dbURL})
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	_, _, err = direct.Migrate(ctx)
	require.NoError(t, err)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	f = storetest.StartRelay(t, u.Host)
	u.Host = f.Addr()
	relayed, err = storage.Open(ctx, storage.Config{URL: u.String(), MaxConns: 4, ConnectTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(relayed.Close)
	return direct, relayed, f, dbURL
}

// TestLedgerLosesNothingWhenPostgresIsCut records from many goroutines
// while the connection to PostgreSQL is cut and restored, then counts:
// every row is in PostgreSQL exactly once.
func TestLedgerLosesNothingWhenPostgresIsCut(t *testing.T) {
	direct, relayed, fwd, _ := databaseBehind(t)
	l := openLedger(t, relayed, t.TempDir(), func(c *storage.LedgerConfig) { c.QueueSize = 2048 })

	var recorded atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l.Record(usage(fmt.Sprintf("g%d-%d", g, i)))
				recorded.Add(1)
				time.Sleep(300 * time.Microsecond) // a steady stream of requests, not a burst
			}
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		require.Eventually(t, cond, 30*time.Second, time.Millisecond, what)
	}
	waitFor("rows written", func() bool { return l.counter("gateway_ledger_rows_written_total") >= 2000 })
	fwd.Cut()
	cutAt := recorded.Load()
	waitFor("rows spooled during the outage", func() bool { return l.counter("gateway_ledger_rows_spooled_total") >= 3000 })
	// Rows queued before the cut can fill the spool on their own: wait for
	// recording itself to go on, which it must without blocking.
	waitFor("recording went on during the outage", func() bool { return recorded.Load() > cutAt+2000 })
	fwd.Restore()
	waitFor("the spool replayed", func() bool { return l.counter("gateway_ledger_rows_replayed_total") >= 1000 })
	written := l.counter("gateway_ledger_rows_written_total")
	waitFor("fresh rows written again", func() bool { return l.counter("gateway_ledger_rows_written_total") >= written+1000 })
	close(stop)
	wg.Wait()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return l.Flush(ctx) == nil
	}, 30*time.Second, 10*time.Millisecond)

	n := int(recorded.Load())
	require.Equal(t, n, countRows(t, direct, "true"), "every recorded row is in PostgreSQL")
	var distinct int
	require.NoError(t, direct.Pool.QueryRow(context.Background(), "select count(distinct request_id) from request_log").Scan(&distinct))
	require.Equal(t, n, distinct, "and exactly once")
	require.Positive(t, l.counter("gateway_ledger_write_errors_total"))
	require.Zero(t, l.counter("gateway_ledger_rows_dropped_total"))
	segs, _ := filepath.Glob(filepath.Join(l.dir, "ledger-*.spool"))
	require.Empty(t, segs, "the spool is gone once replayed")
	t.Logf("recorded %d rows; spooled %d, replayed %d, duplicates skipped %d, write errors %d", n,
		l.counter("gateway_ledger_rows_spooled_total"), l.counter("gateway_ledger_rows_replayed_total"),
		l.counter("gateway_ledger_rows_duplicate_total"), l.counter("gateway_ledger_write_errors_total"))
}

// TestLedgerReplaysTheSpoolOfACrashedProcess leaves a spool behind as a
// process does that dies while PostgreSQL is away, tears its last line as a
// crash mid-write would, and starts the next process: directly, and behind
// PgBouncer, where the insert that skips rows already present cannot be a
// prepared statement.
func TestLedgerReplaysTheSpoolOfACrashedProcess(t *testing.T) {
	t.Run("Direct", func(t *testing.T) { testLedgerReplaysTheSpoolOfACrashedProcess(t, false) })
	t.Run("PgBouncer", func(t *testing.T) { testLedgerReplaysTheSpoolOfACrashedProcess(t, true) })
}

func testLedgerReplaysTheSpoolOfACrashedProcess(t *testing.T, pooled bool) {
	direct, relayed, fwd, dbURL := databaseBehind(t)
	writer := direct // what the processes after the crash write through
	if pooled {
		db, err := storage.Open(context.Background(), storage.Config{URL: storetest.PgBouncerURL(t, dbURL), DirectURL: dbURL})
		require.NoError(t, err)
		t.Cleanup(db.Close)
		writer = db
	}
	dir := t.TempDir()
	fwd.Cut()
	gone := openLedger(t, relayed, dir)
	for i := range 1500 {
		gone.Record(usage(fmt.Sprintf("r-%d", i)))
	}
	require.NoError(t, gone.Close(context.Background()))
	segs, err := filepath.Glob(filepath.Join(dir, "ledger-*.spool"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	seg := segs[0]
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`1234abcd {"v":1,"row_id":"0190b3c4-5d6e-7f80-9a1b-2c3d4e5f`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	saved, err := os.ReadFile(seg)
	require.NoError(t, err)

	next := openLedger(t, writer, dir)
	require.Eventually(t, func() bool { return countRows(t, direct, "true") == 1500 }, 30*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		segs, _ := filepath.Glob(filepath.Join(dir, "ledger-*.spool"))
		return len(segs) == 0
	}, 30*time.Second, 5*time.Millisecond, "a replayed segment is deleted")
	require.EqualValues(t, 1, next.counter("gateway_ledger_spool_torn_lines_total"))
	require.EqualValues(t, 1500, next.counter("gateway_ledger_rows_replayed_total"))

	// A process that dies after its replay committed but before it deleted
	// the segment leaves it behind: replaying it again writes nothing.
	require.NoError(t, next.Close(context.Background()))
	require.NoError(t, os.WriteFile(seg, saved, 0o600))
	again := openLedger(t, writer, dir)
	flush(t, again.Ledger)
	require.Equal(t, 1500, countRows(t, direct, "true"))
	requireTotalsOfTheRows(t, direct)
	require.EqualValues(t, 1500, again.counter("gateway_ledger_rows_duplicate_total"))
	require.Zero(t, again.counter("gateway_ledger_rows_replayed_total"))
	require.Positive(t, again.counter("gateway_ledger_copy_conflicts_total"), "COPY refuses a batch of rows present")
	require.Zero(t, next.counter("gateway_ledger_copy_conflicts_total"), "and copies a batch of new ones")

	// Half of the rows present: a batch that mixes both writes the others,
	// each once.
	require.NoError(t, again.Close(context.Background()))
	require.NoError(t, os.WriteFile(seg, saved, 0o600))
	_, err = direct.Pool.Exec(context.Background(), "delete from request_log where split_part(request_id, '-', 2)::int % 2 = 0")
	require.NoError(t, err)
	half := openLedger(t, writer, dir)
	flush(t, half.Ledger)
	var rows, distinct int
	require.NoError(t, direct.Pool.QueryRow(context.Background(),
		"select count(*), count(distinct request_id) from request_log").Scan(&rows, &distinct))
	require.Equal(t, [2]int{1500, 1500}, [2]int{rows, distinct})
	require.EqualValues(t, 750, half.counter("gateway_ledger_rows_replayed_total"))
	require.EqualValues(t, 750, half.counter("gateway_ledger_rows_duplicate_total"))
	require.Positive(t, half.counter("gateway_ledger_copy_conflicts_total"))
}

func TestLedgerShutdownDrainsToPostgres(t *testing.T) {
	db := storetest.DB(t)
	l := openLedger(t, db, t.TempDir(), func(c *storage.LedgerConfig) { c.FlushInterval = time.Hour; c.RetryMax = time.Hour })
	for i := range 150 { // less than a batch: only Close writes them
		l.Record(usage(fmt.Sprintf("r-%d", i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, l.Close(ctx))
	require.Equal(t, 150, countRows(t, db, "true"))
	segs, _ := filepath.Glob(filepath.Join(l.dir, "ledger-*.spool"))
	require.Empty(t, segs)
}

func TestSeedBudget(t *testing.T) { storetest.EachDB(t, testSeedBudget) }

func testSeedBudget(t *testing.T, db *storage.DB) {
	l := openLedger(t, db, t.TempDir())
	month := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	next := meter.NextMonth(month)
	rec := func(at time.Time, mutate ...func(*hotpath.UsageRecord)) {
		l.Record(usage(fmt.Sprintf("at-%d", at.UnixNano()), append([]func(*hotpath.UsageRecord){func(r *hotpath.UsageRecord) { r.At = at }}, mutate...)...))
	}
	// Key A in org 1: at both edges of March and just outside them.
	rec(month.Add(-time.Microsecond))                                                                                            // February
	rec(month)                                                                                                                   // first instant of March
	rec(month.Add(10*24*time.Hour), func(r *hotpath.UsageRecord) { r.CostPico = 5; r.Tier = "mira"; r.Bucket = "subscription" }) // mira
	rec(next.Add(-time.Microsecond), func(r *hotpath.UsageRecord) { r.Tier = "mira"; r.WorkspaceID = ws1; r.Bucket = "subscription" })
	rec(next) // April
	rec(month.Add(time.Hour), func(r *hotpath.UsageRecord) { r.Billed = false; r.Tier = "mira"; r.WorkspaceID = ws1 })
	// Key B of another user in org 1, in workspace 1.
	rec(month.Add(2*time.Hour), func(r *hotpath.UsageRecord) {
		r.KeyID, r.UserID, r.WorkspaceID, r.CostPico, r.WeightedTokens = keyB, userB, ws1, 7, 100
	})
	// Org 2.
	rec(month.Add(3*time.Hour), func(r *hotpath.UsageRecord) { r.KeyID, r.OrgID, r.Tier, r.Bucket = keyB, org2, "mira", "subscription" })
	// A developer key's mira request draws on no subscription cap.
	rec(month.Add(4*time.Hour), func(r *hotpath.UsageRecord) {
		r.KeyID, r.OrgID, r.Tier, r.CostPico, r.WeightedTokens = keyB, org2, "mira", 0, 0
	})
	flush(t, l.Ledger)
	requireTotalsOfTheRows(t, db)

	ctx := context.Background()
	seed := func(kind meter.BudgetKind, subject string, from, to time.Time, slot time.Duration) []int64 {
		t.Helper()
		got, err := l.SeedBudget(ctx, meter.Budget{Kind: kind, Subject: subject}, from, to, slot)
		require.NoError(t, err)
		return got
	}
	whole := next.Sub(month)
	t.Run("key spend counts billed rows of the month", func(t *testing.T) {
		require.Equal(t, []int64{1_000_000 + 5 + 1_000_000}, seed(meter.BudgetKeySpend, keyA, month, next, whole))
		require.Equal(t, []int64{7 + 1_000_000}, seed(meter.BudgetKeySpend, keyB, month, next, whole), "in both organizations")
	})
	t.Run("workspace spend", func(t *testing.T) {
		require.Equal(t, []int64{1_000_000 + 7}, seed(meter.BudgetWorkspaceSpend, ws1, month, next, whole))
	})
	t.Run("credits are a key's lifetime", func(t *testing.T) {
		far := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
		// February, March (three rows) and April; the unbilled row is not counted.
		require.Equal(t, []int64{4_000_005}, seed(meter.BudgetCredits, keyA, time.Time{}, far, far.Sub(time.Time{})))
	})
	t.Run("pools count weighted tokens of the organization", func(t *testing.T) {
		require.Equal(t, []int64{30 + 30 + 30 + 100}, seed(meter.BudgetPoolMonthly, org1, month, next, whole))
		require.Equal(t, []int64{30}, seed(meter.BudgetPoolMonthly, org2, month, next, whole))
	})
	t.Run("mira requests", func(t *testing.T) {
		require.Equal(t, []int64{2}, seed(meter.BudgetMiraRequests, org1, month, next, whole))
		require.Equal(t, []int64{1}, seed(meter.BudgetMiraRequests, org2, month, next, whole))
	})
	t.Run("nothing recorded", func(t *testing.T) {
		require.Equal(t, []int64{0}, seed(meter.BudgetKeySpend, "0190b3c4-5d6e-7f80-9a1b-000000000000", month, next, whole))
		require.Equal(t, []int64{0}, seed(meter.BudgetKeySpend, keyA, next, month, whole), "an empty span")
	})
	t.Run("a subject that is not a UUID", func(t *testing.T) {
		_, err := l.SeedBudget(ctx, meter.Budget{Kind: meter.BudgetKeySpend, Subject: "key"}, month, next, whole)
		require.Error(t, err)
	})
	t.Run("a span that does not start on a bin boundary", func(t *testing.T) {
		_, err := l.SeedBudget(ctx, meter.Budget{Kind: meter.BudgetKeySpend, Subject: keyA}, month.Add(time.Minute), next, whole)
		require.ErrorContains(t, err, "boundary")
	})
}

// requireTotalsOfTheRows checks that the running totals counters are
// seeded from hold exactly the sums of the rows written, each row once.
func requireTotalsOfTheRows(t *testing.T, db *storage.DB) {
	t.Helper()
	var diff int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		with rows as (
			select 1::smallint as kind, key_id as subject, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00') as bin,
				cost_pico as amount from request_log where billed and key_id is not null
			union all select 2::smallint, workspace_id, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00'),
				cost_pico from request_log where billed and workspace_id is not null
			union all select 3::smallint, org_id, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00'),
				weighted_tokens from request_log where billed and org_id is not null
			union all select 4::smallint, org_id, date_bin('15 minutes', created_at, timestamptz '2000-01-01 00:00:00+00'),
				1 from request_log where billed and org_id is not null and tier = 'mira' and bucket = 'subscription'),
		want as (select kind, subject, bin, sum(amount)::bigint as amount from rows group by 1, 2, 3)
		select count(*) from want full join ledger_totals t using (kind, subject, bin)
		where want.amount is distinct from t.amount`).Scan(&diff))
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*) from ledger_totals`).Scan(&n))
	require.Positive(t, n, "the rows left totals")
	require.Zero(t, diff, "totals that differ from the rows' sums")
}

func TestSeedBudgetSlotsOfTheBurstWindow(t *testing.T) {
	db := storetest.DB(t)
	l := openLedger(t, db, t.TempDir())
	to := time.Date(2026, 7, 14, 12, 0, 0, 0, time.UTC)
	from := to.Add(-meter.BurstWindow)
	slotAt := func(i int) time.Time { return from.Add(time.Duration(i) * meter.BurstSlot) }
	tokens := map[time.Time]int64{
		from.Add(-time.Microsecond):            1, // before the window
		slotAt(0):                              2, // its first instant
		slotAt(5).Add(-time.Microsecond):       4, // the last instant of slot 4
		slotAt(5):                              8, // the first of slot 5
		slotAt(5).Add(7 * time.Minute):         16,
		to.Add(-time.Microsecond):              32, // the last instant of the last slot
		to:                                     64, // after the window
		slotAt(20).Add(time.Nanosecond * 999):  128,
		slotAt(20).Add(-time.Nanosecond * 999): 256, // kept to the microsecond: slot 19
		slotAt(30).Add(90*time.Second - time.Nanosecond): 512,
	}
	for at, n := range tokens {
		l.Record(usage(fmt.Sprintf("at-%d", at.UnixNano()), func(r *hotpath.UsageRecord) { r.At, r.WeightedTokens = at, n }))
	}
	l.Record(usage("unbilled", func(r *hotpath.UsageRecord) { r.At, r.WeightedTokens, r.Billed = slotAt(1), 1024, false }))
	flush(t, l.Ledger)

	got, err := l.SeedBudget(context.Background(), meter.Budget{Kind: meter.BudgetPoolBurst, Subject: org1}, from, to, meter.BurstSlot)
	require.NoError(t, err)
	want := make([]int64, meter.BurstSlots)
	want[0] = 2
	want[4] = 4
	want[5] = 8 + 16
	want[19] = 256
	want[20] = 128
	want[30] = 512
	want[meter.BurstSlots-1] = 32
	require.Equal(t, want, got)

	got, err = l.SeedBudget(context.Background(), meter.Budget{Kind: meter.BudgetPoolBurst, Subject: org1},
		from, from.Add(100*time.Minute), 15*time.Minute)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 0, 0, 0, 4, 24, 0}, got, "a span that is not a whole number of slots ends in a short one")
}

func TestSeedBudgetCountsRowsStillQueued(t *testing.T) {
	db := storetest.DB(t)
	l := openLedger(t, db, t.TempDir(), func(c *storage.LedgerConfig) { c.FlushInterval = time.Hour; c.RetryMax = time.Hour })
	for range 3 {
		l.Record(usage(fmt.Sprintf("q-%d", time.Now().UnixNano())))
	}
	month := meter.MonthStart(time.Now())
	got, err := l.SeedBudget(context.Background(), meter.Budget{Kind: meter.BudgetKeySpend, Subject: keyA},
		month, meter.NextMonth(month), meter.NextMonth(month).Sub(month))
	require.NoError(t, err)
	require.Equal(t, []int64{3_000_000}, got, "this process's own recent rows count")
}

// BenchmarkLedgerThroughput measures rows per second from Record to
// PostgreSQL, with the default batch size.
func BenchmarkLedgerThroughput(b *testing.B) {
	db := storetest.DB(b)
	l := openLedger(b, db, b.TempDir(), func(c *storage.LedgerConfig) {
		c.BatchSize, c.QueueSize, c.FlushInterval = 500, 1<<16, 200*time.Millisecond
	})
	recs := make([]*hotpath.UsageRecord, 1000)
	for i := range recs {
		recs[i] = usage(fmt.Sprintf("bench-%d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if i%(1<<15) == 0 {
			for l.counter("gateway_ledger_rows_recorded_total")-l.counter("gateway_ledger_rows_written_total")-
				l.counter("gateway_ledger_rows_spooled_total") > 1<<15 {
				time.Sleep(time.Millisecond) // keep the queue from overflowing
			}
		}
		l.Record(recs[i%len(recs)])
	}
	flush(b, l.Ledger)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
}

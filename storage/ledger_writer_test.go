package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
)

// memWriter stands in for PostgreSQL: it keeps rows by row id, as the
// table's primary key does, and can be made unreachable, slow, or to lose
// the acknowledgement of a write it committed.
type memWriter struct {
	mu      sync.Mutex
	rows    map[[16]byte]ledgerRow
	writes  int
	down    atomic.Bool
	lostAck atomic.Bool   // commit, then report a failure
	gate    chan struct{} // when set, each write waits for it to be closed
	gated   atomic.Int32  // writes waiting at the gate
}

func newMemWriter() *memWriter { return &memWriter{rows: make(map[[16]byte]ledgerRow)} }

func (m *memWriter) writeRows(ctx context.Context, rows []ledgerRow) (int64, error) {
	m.mu.Lock()
	gate := m.gate
	m.mu.Unlock()
	if gate != nil {
		m.gated.Add(1)
		defer m.gated.Add(-1)
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if m.down.Load() {
		return 0, errors.New("connection refused")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	var n int64
	for _, r := range rows {
		if _, ok := m.rows[r.rowID]; !ok {
			m.rows[r.rowID] = r
			n++
		}
	}
	if m.lostAck.Load() {
		return 0, errors.New("connection reset after commit")
	}
	return n, nil
}

// requestIDs counts the rows held per request id.
func (m *memWriter) requestIDs() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.rows))
	for _, r := range m.rows {
		out[string(r.textBytes(textRequestID))]++
	}
	return out
}

func (m *memWriter) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows)
}

type ledgerFixture struct {
	l   *Ledger
	w   *memWriter
	set *metrics.Set
	dir string
}

func newTestLedger(t *testing.T, w *memWriter, dir string, mutate ...func(*LedgerConfig)) *ledgerFixture {
	t.Helper()
	cfg := LedgerConfig{SpoolDir: dir, FlushInterval: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		BatchSize: 50, QueueSize: 1000}
	for _, m := range mutate {
		m(&cfg)
	}
	set := metrics.NewSet()
	l, err := newLedger(nil, w, cfg, set, discardLog())
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return &ledgerFixture{l: l, w: w, set: set, dir: dir}
}

func (f *ledgerFixture) counter(name string) uint64 {
	return f.set.GetOrCreateCounter(name).Get()
}

func record(l *Ledger, id string) {
	r := sampleRecord()
	r.RequestID = id
	l.Record(&r)
}

// recordMany records n rows from g goroutines, with ids prefix-<n>.
func recordMany(l *Ledger, prefix string, g, n int) {
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < n; j += g {
				record(l, fmt.Sprintf("%s-%d", prefix, j))
			}
		}()
	}
	wg.Wait()
}

// requireExactlyOnce checks that the writer holds each of the n rows once.
func requireExactlyOnce(t *testing.T, w *memWriter, prefix string, n int) {
	t.Helper()
	ids := w.requestIDs()
	require.Len(t, ids, n)
	for i := range n {
		require.Equal(t, 1, ids[fmt.Sprintf("%s-%d", prefix, i)], "row %d", i)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLedgerWritesEveryRowInBatches(t *testing.T) {
	f := newTestLedger(t, newMemWriter(), t.TempDir(), func(c *LedgerConfig) { c.QueueSize = 5000 })
	recordMany(f.l, "r", 16, 5000)
	require.NoError(t, f.l.Flush(ctxT(t)))
	requireExactlyOnce(t, f.w, "r", 5000)
	require.EqualValues(t, 5000, f.counter("gateway_ledger_rows_written_total"))
	require.EqualValues(t, 5000, f.counter("gateway_ledger_rows_recorded_total"))
	require.LessOrEqual(t, f.w.writes, 5000/10, "rows are written in batches")
	require.Empty(t, segments(t, f.dir), "nothing was spooled")
}

func TestLedgerWritesAPartialBatchWithinTheInterval(t *testing.T) {
	f := newTestLedger(t, newMemWriter(), t.TempDir())
	record(f.l, "lonely")
	require.Eventually(t, func() bool { return f.w.count() == 1 }, 5*time.Second, time.Millisecond)
}

func TestLedgerSpoolsWhileDownAndReplaysOnce(t *testing.T) {
	w := newMemWriter()
	w.down.Store(true)
	f := newTestLedger(t, w, t.TempDir())
	recordMany(f.l, "r", 8, 2000)
	require.Error(t, f.l.Flush(ctxT(t)), "the rows are only in the spool")
	require.EqualValues(t, 2000, f.counter("gateway_ledger_rows_spooled_total"))
	require.NotEmpty(t, segments(t, f.dir))
	require.Zero(t, w.count())

	w.down.Store(false)
	require.NoError(t, f.l.Flush(ctxT(t)))
	requireExactlyOnce(t, w, "r", 2000)
	require.EqualValues(t, 2000, f.counter("gateway_ledger_rows_replayed_total"))
	require.Empty(t, segments(t, f.dir), "the spool is deleted once replayed")
	require.False(t, f.l.spool.hasData())
}

func TestLedgerReplaysOnItsOwnWhenTheDatabaseReturns(t *testing.T) {
	w := newMemWriter()
	w.down.Store(true)
	f := newTestLedger(t, w, t.TempDir())
	recordMany(f.l, "r", 4, 300)
	require.Eventually(t, func() bool { return f.counter("gateway_ledger_rows_spooled_total") == 300 }, 5*time.Second, time.Millisecond)
	w.down.Store(false)
	require.Eventually(t, func() bool { return w.count() == 300 }, 5*time.Second, time.Millisecond)
	requireExactlyOnce(t, w, "r", 300)
	require.Eventually(t, func() bool { return len(segments(t, f.dir)) == 0 }, 5*time.Second, time.Millisecond)
}

func TestLedgerReplayIsIdempotent(t *testing.T) {
	// The database commits each batch but the acknowledgement is lost: the
	// writer spools rows that are already written, and replays them.
	w := newMemWriter()
	w.lostAck.Store(true)
	f := newTestLedger(t, w, t.TempDir())
	recordMany(f.l, "r", 4, 1000)
	require.Error(t, f.l.Flush(ctxT(t)))
	committed := w.count()
	require.Positive(t, committed)
	w.lostAck.Store(false)
	require.NoError(t, f.l.Flush(ctxT(t)))
	requireExactlyOnce(t, w, "r", 1000)
	require.EqualValues(t, committed, f.counter("gateway_ledger_rows_duplicate_total"))
	require.EqualValues(t, 1000-committed, f.counter("gateway_ledger_rows_replayed_total"))
}

func TestLedgerCloseDrainsTheQueue(t *testing.T) {
	w := newMemWriter()
	f := newTestLedger(t, w, t.TempDir(), func(c *LedgerConfig) { c.FlushInterval = time.Hour; c.RetryMax = time.Hour })
	recordMany(f.l, "r", 8, 777) // less than a batch's worth stays queued
	require.NoError(t, f.l.Close(ctxT(t)))
	requireExactlyOnce(t, w, "r", 777)
	require.Empty(t, segments(t, f.dir))
	require.ErrorIs(t, f.l.Flush(ctxT(t)), ErrLedgerClosed)
}

func TestLedgerCloseSpoolsWhatTheDatabaseCannotTakeAndTheNextProcessReplaysIt(t *testing.T) {
	dir := t.TempDir()
	w := newMemWriter()
	w.down.Store(true)
	f := newTestLedger(t, w, dir, func(c *LedgerConfig) { c.FlushInterval = time.Hour; c.RetryMax = time.Hour })
	recordMany(f.l, "r", 8, 1234)
	require.NoError(t, f.l.Close(ctxT(t)))
	require.Zero(t, w.count())
	require.Len(t, segments(t, dir), 1)

	// A row that arrives after Close still reaches the spool.
	record(f.l, "late")
	require.Len(t, segments(t, dir), 2)

	w.down.Store(false)
	next := newTestLedger(t, w, dir)
	require.Eventually(t, func() bool { return w.count() == 1235 }, 5*time.Second, time.Millisecond)
	ids := w.requestIDs()
	require.Equal(t, 1, ids["late"])
	delete(ids, "late")
	require.Len(t, ids, 1234)
	require.NoError(t, next.l.Flush(ctxT(t)))
}

func TestLedgerCloseRespectsItsDeadline(t *testing.T) {
	w := newMemWriter()
	w.gate = make(chan struct{}) // a database that never answers
	f := newTestLedger(t, w, t.TempDir(), func(c *LedgerConfig) { c.WriteTimeout = time.Hour })
	recordMany(f.l, "r", 4, 400)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	require.NoError(t, f.l.Close(ctx))
	require.Less(t, time.Since(start), 5*time.Second)
	require.Zero(t, w.count())

	// Everything is in the spool, for the next process.
	close(w.gate)
	w2 := newMemWriter()
	next := newTestLedger(t, w2, f.dir)
	require.NoError(t, next.l.Flush(ctxT(t)))
	requireExactlyOnce(t, w2, "r", 400)
}

func TestLedgerFullQueueGoesStraightToTheSpool(t *testing.T) {
	w := newMemWriter()
	w.gate = make(chan struct{}) // the writer is stuck in a slow write
	f := newTestLedger(t, w, t.TempDir(), func(c *LedgerConfig) { c.QueueSize = 10; c.BatchSize = 5; c.WriteTimeout = time.Hour })
	done := make(chan struct{})
	go func() {
		defer close(done)
		recordMany(f.l, "r", 4, 500)
	}()
	select {
	case <-done: // Record never waits on the writer
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked behind a stuck writer")
	}
	require.Greater(t, f.counter("gateway_ledger_queue_overflow_total"), uint64(400))
	close(w.gate)
	require.NoError(t, f.l.Flush(ctxT(t)))
	requireExactlyOnce(t, w, "r", 500)
}

// recordUnbilled records a row that bills nothing (a refusal's).
func recordUnbilled(l *Ledger, id string) {
	r := sampleRecord()
	r.RequestID, r.Billed = id, false
	l.Record(&r)
}

func TestLedgerFullSpoolLosesRowsCountedAndSaturates(t *testing.T) {
	w := newMemWriter()
	w.down.Store(true)
	f := newTestLedger(t, w, t.TempDir(), func(c *LedgerConfig) {
		c.QueueSize = 16
		c.BatchSize = 8
		c.SpoolMaxBytes = 1 << 20
	})
	rows := testRows(1)
	lineLen := len(appendSpoolLine(nil, &rows[0]))
	n := (1<<20)/lineLen + 500
	for i := range n {
		recordUnbilled(f.l, fmt.Sprintf("r-%d", i))
	}
	// The writer, behind on its fsyncs, may take rows out of the queue
	// after the last one arrived, into the batch it then holds: the queue
	// has room again, and the ledger is rightly not saturated. Fed on, it
	// is.
	require.Eventually(t, func() bool {
		if f.l.Saturated() {
			return true
		}
		recordUnbilled(f.l, fmt.Sprintf("r-%d", n))
		n++
		return false
	}, 5*time.Second, time.Millisecond)
	dropped := f.counter("gateway_ledger_rows_dropped_total")
	require.Positive(t, dropped, "a full spool loses unbilled rows, and says so")
	require.LessOrEqual(t, f.l.spool.bytes(), int64(1<<20), "the spool keeps its bound")

	// Billed rows of requests admitted before the ledger saturated (a
	// stream that runs on) are kept past the bound, one each: not lost.
	for i := range 10 {
		record(f.l, fmt.Sprintf("billed-%d", i))
		n++
	}
	require.Equal(t, dropped, f.counter("gateway_ledger_rows_dropped_total"), "no billed row is lost")
	require.Greater(t, f.l.spool.bytes(), int64(1<<20)-int64(lineLen))

	w.down.Store(false)
	require.NoError(t, f.l.Flush(ctxT(t)))
	require.False(t, f.l.Saturated())
	require.Equal(t, n, w.count()+int(dropped), "every row is either written or counted as lost")
	require.Zero(t, f.l.spool.bytes())
}

func TestLedgerAdoptsSegmentsOfGoneProcessesOnly(t *testing.T) {
	dir := t.TempDir()
	w := newMemWriter()
	w.down.Store(true)
	alive := newTestLedger(t, w, dir)
	recordMany(alive.l, "alive", 2, 100)
	require.Error(t, alive.l.Flush(ctxT(t)))
	require.Len(t, segments(t, dir), 1)

	other := newMemWriter()
	next := newTestLedger(t, other, dir)
	require.NoError(t, next.l.Flush(ctxT(t)))
	require.Zero(t, other.count(), "a live process's segment is its own")
	require.Len(t, segments(t, dir), 1)
}

func TestLedgerConfigValidate(t *testing.T) {
	var c LedgerConfig
	require.NoError(t, c.Validate())
	require.Equal(t, LedgerConfig{SpoolDir: ".data/spool", SpoolMaxBytes: 1 << 30, QueueSize: 16384, BatchSize: 500,
		FlushInterval: 200 * time.Millisecond, WriteTimeout: 5 * time.Second, RetryMax: 5 * time.Second}, c)
	for name, m := range map[string]func(*LedgerConfig){
		"ledger-spool-max-bytes": func(c *LedgerConfig) { c.SpoolMaxBytes = 1000 },
		"ledger-queue-size":      func(c *LedgerConfig) { c.QueueSize = -1 },
		"ledger-batch-size":      func(c *LedgerConfig) { c.BatchSize = 20000 },
		"ledger-flush-interval":  func(c *LedgerConfig) { c.FlushInterval = time.Microsecond },
		"ledger-write-timeout":   func(c *LedgerConfig) { c.WriteTimeout = time.Millisecond },
	} {
		t.Run(name, func(t *testing.T) {
			var c LedgerConfig
			m(&c)
			err := c.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), name)
		})
	}
}

func TestNewLedgerRefusesAnUnwritableSpoolDirectory(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/file"
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := newLedger(nil, newMemWriter(), LedgerConfig{SpoolDir: file + "/spool"}, metrics.NewSet(), discardLog())
	require.ErrorContains(t, err, "cannot create ledger spool directory")
}

// BenchmarkLedgerRecord measures Record's hot path: the copy into the
// queue. The timer stops while the writer catches up, so that no row takes
// the overflow path.
func BenchmarkLedgerRecord(b *testing.B) {
	l, err := newLedger(nil, discardWriter{}, LedgerConfig{SpoolDir: b.TempDir(), QueueSize: 1 << 14}, metrics.NewSet(), discardLog())
	require.NoError(b, err)
	defer l.Close(context.Background())
	r := sampleRecord()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i&(1<<13-1) == 0 {
			b.StopTimer()
			for len(l.queue) > 0 {
				runtime.Gosched()
			}
			b.StartTimer()
		}
		l.Record(&r)
	}
	b.StopTimer()
	require.Zero(b, l.m.overflow.Get())
}

// BenchmarkLedgerRecordOverflow measures the degraded path: the queue is
// full and every row goes straight to the spool file (no fsync).
func BenchmarkLedgerRecordOverflow(b *testing.B) {
	w := newMemWriter()
	w.gate = make(chan struct{})
	l, err := newLedger(nil, w, LedgerConfig{SpoolDir: b.TempDir(), QueueSize: 1, SpoolMaxBytes: 1 << 40, WriteTimeout: time.Hour},
		metrics.NewSet(), discardLog())
	require.NoError(b, err)
	defer func() {
		close(w.gate)
		_ = l.Close(context.Background())
	}()
	r := sampleRecord()
	for range 4 {
		l.Record(&r) // fill the queue and the writer's hands
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		l.Record(&r)
	}
}

// discardWriter takes every batch at once.
type discardWriter struct{}

func (discardWriter) writeRows(_ context.Context, rows []ledgerRow) (int64, error) {
	return int64(len(rows)), nil
}

// BenchmarkLedgerEncode measures the writer's encoding of a full batch:
// as COPY's rows, the form every batch is first sent in, and as the 21
// binary array parameters of the insert that skips rows already present.
// Per row, the gateway's whole share of a ledger write but the socket.
func BenchmarkLedgerEncode(b *testing.B) {
	rows := sampleBatch(500)
	for _, enc := range []struct {
		name   string
		encode func(w *pgRowWriter)
	}{
		{"copy", func(w *pgRowWriter) { w.encodeCopy(rows) }},
		{"arrays", func(w *pgRowWriter) { w.encode(rows) }},
	} {
		b.Run(enc.name, func(b *testing.B) {
			w := &pgRowWriter{}
			enc.encode(w)
			b.ReportAllocs()
			for b.Loop() {
				enc.encode(w)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
		})
	}
}

// The encoding reuses its buffer: once it has grown, a batch allocates
// nothing.
func TestLedgerEncodeAllocationBudget(t *testing.T) {
	rows := sampleBatch(500)
	w := &pgRowWriter{}
	w.encode(rows)
	require.Zero(t, testing.AllocsPerRun(20, func() { w.encode(rows) }))
	w.encodeCopy(rows)
	require.Zero(t, testing.AllocsPerRun(20, func() { w.encodeCopy(rows) }))
}

func sampleBatch(n int) []ledgerRow {
	rows := make([]ledgerRow, n)
	r := sampleRecord()
	for i := range rows {
		rows[i].fill(&r)
	}
	return rows
}

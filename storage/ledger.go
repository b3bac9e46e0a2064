package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
)

var (
	_ hotpath.UsageSink  = (*Ledger)(nil)
	_ meter.BudgetSeeder = (*Ledger)(nil)
)

// ErrLedgerClosed is returned by Flush once Close has begun.
var ErrLedgerClosed = errors.New("ledger is closed")

// LedgerConfig configures the request log's writer and spool.
type LedgerConfig struct {
	// SpoolDir holds the spool segments and each process's crash journal
	// of its queued rows (journal.go). Every process of a host that
	// writes to the same database may share it: each writes segments of
	// its own and replays those of processes that are gone. Processes of
	// different databases must not share one. Default ".data/spool"
	// (relative to the working directory); production puts it on a
	// persistent local disk.
	SpoolDir string
	// SpoolMaxBytes bounds this process's spool. Default 1 GiB.
	SpoolMaxBytes int64
	// QueueSize is how many rows wait in memory for the writer. Default 16384.
	QueueSize int
	// BatchSize is the most rows one statement writes. Default 500.
	BatchSize int
	// FlushInterval is the longest a row waits for its batch to fill.
	// Default 200ms.
	FlushInterval time.Duration
	// WriteTimeout bounds one batch statement. Default 5s.
	WriteTimeout time.Duration
	// RetryMax is the longest pause between attempts to reach PostgreSQL
	// while it is unreachable (the pause doubles from FlushInterval, and
	// is never shorter). Default 5s.
	RetryMax time.Duration
	// Tracer exports a span per batch statement, linked to the spans of
	// the requests whose rows it writes (up to MaxSpanLinks of them); nil,
	// the default, exports none.
	Tracer trace.Tracer
}

// TracerName is the instrumentation scope of the spans storage exports.
const TracerName = "github.com/edgegw/gateway/storage"

// SpanLedgerWrite is the span of one batch statement of the ledger.
const SpanLedgerWrite = "gateway.ledger.write"

// MaxSpanLinks is the most requests one ledger write's span links to: the
// SDK's default limit of links per span.
const MaxSpanLinks = 128

// Validate checks the configuration and fills in defaults.
func (c *LedgerConfig) Validate() error {
	if c.SpoolDir == "" {
		c.SpoolDir = ".data/spool"
	}
	if c.SpoolMaxBytes == 0 {
		c.SpoolMaxBytes = 1 << 30
	}
	if c.QueueSize == 0 {
		c.QueueSize = 16384
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = 200 * time.Millisecond
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 5 * time.Second
	}
	if c.RetryMax == 0 {
		c.RetryMax = 5 * time.Second
	}
	switch {
	case c.SpoolMaxBytes < 1<<20:
		return errors.New("ledger-spool-max-bytes: must be at least 1048576")
	case c.QueueSize < 1:
		return errors.New("ledger-queue-size: must be at least 1")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return errors.New("ledger-batch-size: must be between 1 and 10000")
	case c.FlushInterval < time.Millisecond:
		return errors.New("ledger-flush-interval: must be at least 1ms")
	case c.WriteTimeout < 10*time.Millisecond:
		return errors.New("ledger-write-timeout: must be at least 10ms")
	}
	c.RetryMax = max(c.RetryMax, c.FlushInterval)
	return nil
}

// adoptInterval is how often the writer looks for spool segments that
// processes which are gone left behind.
const adoptInterval = 30 * time.Second

// Ledger is the request log and usage ledger: it takes one row per request
// off the hot path and writes them to PostgreSQL in batches, from a bounded
// in-memory queue, on one writer goroutine. It never drops a row it can
// keep: when the queue is full a row goes straight to the local spool; when
// PostgreSQL is unreachable whole batches go there, fsync'd; spooled rows
// are replayed once PostgreSQL answers again, and a replay writes nothing
// twice (rows carry their own id). Only when the spool too is full (or
// cannot be written) is a row lost, counted and logged (docs/ledger.md).
//
// A Ledger is also the BudgetSeeder the counter stores rebuild lost
// counters from.
type Ledger struct {
	cfg   LedgerConfig
	db    *DB
	log   *slog.Logger
	spool *spool
	w     rowWriter
	// journal keeps every queued row in a file that outlives a killed
	// process (journal.go); nil where files cannot be mapped.
	journal *journal

	queue   chan ledgerRow
	wake    chan struct{}
	closing chan struct{}
	done    chan struct{}

	closed   atomic.Bool
	inflight atomic.Int64 // Record calls between their closed check and their send
	queued   atomic.Int64 // rows in the queue or the writer's batch
	dbUp     atomic.Bool

	// ctx is what writes run under; Close cancels it when its own context
	// ends, so a write in progress cannot outlast the shutdown bound.
	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error

	dropLog, errLog, idLog hotpath.LogLimiter

	m  ledgerMetrics
	jm journalMetrics

	// Writer goroutine only.
	batch       []ledgerRow
	stuck       bool // the batch fits neither PostgreSQL nor the spool
	replayBuf   []ledgerRow
	up          bool
	backoff     time.Duration
	nextProbe   time.Time
	replayPause time.Time
	nextAdopt   time.Time
}

type ledgerMetrics struct {
	recorded, written, replayed, duplicates *metrics.Counter
	batches, writeErrors                    *metrics.Counter
	spooled, overflow, dropped, badIDs      *metrics.Counter
	batchDuration                           *metrics.Histogram
	copyConflicts                           *metrics.Counter
}

// rowWriter writes a batch of rows, skipping rows already present, and
// returns how many it inserted.
type rowWriter interface {
	writeRows(ctx context.Context, rows []ledgerRow) (inserted int64, err error)
}

// barrier is a Flush request travelling the queue behind the rows recorded
// before it.
type barrier struct{ done chan error }

// NewLedger validates cfg, registers the ledger's metrics on set and starts
// its writer, which first replays any spool segment a previous process
// left in cfg.SpoolDir. Close stops it.
func NewLedger(db *DB, cfg LedgerConfig, set *metrics.Set, log *slog.Logger) (*Ledger, error) {
	return newLedger(db, &pgRowWriter{db: db}, cfg, set, log)
}

func newLedger(db *DB, w rowWriter, cfg LedgerConfig, set *metrics.Set, log *slog.Logger) (*Ledger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sp, err := newSpool(cfg.SpoolDir, cfg.SpoolMaxBytes, log, set)
	if err != nil {
		return nil, err
	}
	l := &Ledger{
		cfg: cfg, db: db, log: log, spool: sp, w: w,
		queue:     make(chan ledgerRow, cfg.QueueSize),
		wake:      make(chan struct{}, 1),
		closing:   make(chan struct{}),
		done:      make(chan struct{}),
		batch:     make([]ledgerRow, 0, cfg.BatchSize),
		replayBuf: make([]ledgerRow, 0, cfg.BatchSize),
		up:        true,
		m: ledgerMetrics{
			recorded:      set.NewCounter("gateway_ledger_rows_recorded_total"),
			written:       set.NewCounter("gateway_ledger_rows_written_total"),
			replayed:      set.NewCounter("gateway_ledger_rows_replayed_total"),
			duplicates:    set.NewCounter("gateway_ledger_rows_duplicate_total"),
			batches:       set.NewCounter("gateway_ledger_batches_total"),
			writeErrors:   set.NewCounter("gateway_ledger_write_errors_total"),
			spooled:       set.NewCounter("gateway_ledger_rows_spooled_total"),
			overflow:      set.NewCounter("gateway_ledger_queue_overflow_total"),
			dropped:       set.NewCounter("gateway_ledger_rows_dropped_total"),
			badIDs:        set.NewCounter("gateway_ledger_invalid_ids_total"),
			batchDuration: set.NewHistogram("gateway_ledger_batch_duration_seconds"),
			copyConflicts: set.NewCounter("gateway_ledger_copy_conflicts_total"),
		},
	}
	if pw, ok := w.(*pgRowWriter); ok {
		pw.conflicts = l.m.copyConflicts
	}
	if journalSupported {
		// A slot per row the queue holds and per row of the writer's
		// batch: the ring fills only when the queue does.
		j, err := openJournal(cfg.SpoolDir, sp.prefix, cfg.QueueSize+cfg.BatchSize)
		if err != nil {
			return nil, err
		}
		l.journal = j
	}
	l.jm = journalMetrics{
		recovered: set.NewCounter("gateway_ledger_journal_rows_recovered_total"),
		torn:      set.NewCounter("gateway_ledger_journal_torn_slots_total"),
		full:      set.NewCounter("gateway_ledger_journal_full_total"),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.dbUp.Store(true)
	set.NewGauge("gateway_ledger_queue_length", func() float64 { return float64(len(l.queue)) })
	set.NewGauge("gateway_ledger_spool_bytes", func() float64 { return float64(l.spool.bytes()) })
	set.NewGauge("gateway_ledger_database_up", func() float64 {
		if l.dbUp.Load() {
			return 1
		}
		return 0
	})
	go l.run()
	return l, nil
}

// Record takes one row. It copies r (the caller may reuse it at once),
// never waits on storage and allocates nothing: the row goes into the
// journal and the queue, or, when either is full or the ledger closed,
// straight to the spool. Once Record returns, the row survives the
// process being killed (docs/ledger.md).
func (l *Ledger) Record(r *hotpath.UsageRecord) {
	var row ledgerRow
	if row.fill(r) {
		l.badID(&row)
	}
	l.m.recorded.Inc()
	l.inflight.Add(1)
	if !l.closed.Load() {
		// Close unmaps the journal only once no Record is in flight.
		if l.journal != nil && !l.journal.put(&row) {
			l.jm.full.Inc()
			l.inflight.Add(-1)
			l.overflowRow(&row)
			return
		}
		select {
		case l.queue <- row:
			l.queued.Add(1)
			l.inflight.Add(-1)
			if len(l.queue) >= l.cfg.BatchSize {
				l.wakeWriter()
			}
			return
		default:
		}
		// The row is now in the spool, or counted lost: either way its
		// slot is free again (a slot kept by a lost row would shrink the
		// ring for the process's whole life).
		l.overflowRow(&row)
		l.journal.done(&row)
		l.inflight.Add(-1)
		return
	}
	l.inflight.Add(-1)
	l.overflowRow(&row)
}

// overflowRow writes a row the queue could not take to the spool. Lines
// written here are fsync'd by the writer within one flush interval (or at
// once after Close).
func (l *Ledger) overflowRow(row *ledgerRow) {
	closed := l.closed.Load()
	err := l.spool.appendRow(row, closed)
	if err == nil {
		l.m.overflow.Inc()
		l.m.spooled.Inc()
		return
	}
	l.m.dropped.Inc()
	if ok, n := l.dropLog.Allow(); ok {
		l.log.Error("ledger row lost: the queue and the spool are full or the spool cannot be written",
			"err", err, "request_id", string(row.textBytes(textRequestID)), "cost_pico", row.cost, "suppressed", n)
	}
}

// The chat routes read Saturated through this interface at admission.
var _ hotpath.UsageSaturation = (*Ledger)(nil)

// Saturated reports whether the ledger can take no more rows without losing
// them: the queue is full and the spool has reached its bound. Admission
// refuses billable work while it holds; on the way there it costs a look at
// the queue's length and, only once the queue is full, an atomic load.
func (l *Ledger) Saturated() bool {
	return len(l.queue) == cap(l.queue) && l.spool.ownBytes.Load() >= l.cfg.SpoolMaxBytes-int64(maxSpoolLine)
}

// Flush returns once every row recorded before the call is in PostgreSQL,
// replaying the spool as well. It tries PostgreSQL at once even while the
// writer is pausing between attempts. An error means some rows are still
// only in the spool (or the context ended first).
func (l *Ledger) Flush(ctx context.Context) error {
	if l.closed.Load() {
		return ErrLedgerClosed
	}
	b := &barrier{done: make(chan error, 1)}
	select {
	case l.queue <- ledgerRow{barrier: b}:
		l.wakeWriter()
	case <-l.closing:
		return ErrLedgerClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-b.done:
		return err
	case <-l.done:
		return ErrLedgerClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops taking rows into the queue and drains it: to PostgreSQL
// while it answers and ctx allows, the rest to the spool. It then fsyncs
// and lets go of the spool, which the next process replays. Rows recorded
// after Close go straight to the spool. Close returns an error when rows
// were lost; calling it again returns the same result.
func (l *Ledger) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		stop := context.AfterFunc(ctx, l.cancel)
		defer stop()
		defer l.cancel()
		l.closed.Store(true)
		// A Record that saw the ledger open is about to send; let it.
		for l.inflight.Load() != 0 {
			runtime.Gosched()
		}
		close(l.closing)
		<-l.done
	})
	<-l.done
	return l.closeErr
}

// run is the writer goroutine. It does not wait on the queue row by row
// (each hand-over would wake it, at a cost to every Record): it sleeps until
// a batch's worth is queued, a Flush asks, or the interval passes, then
// takes what is there.
func (l *Ledger) run() {
	defer close(l.done)
	tick := time.NewTicker(l.cfg.FlushInterval)
	defer tick.Stop()
	l.maintain(time.Now())
	for {
		if l.replayWork() {
			select {
			case <-l.wake:
				l.pump()
			case now := <-tick.C:
				l.onTick(now)
			case <-l.closing:
				l.drain()
				return
			default:
				if !l.replayChunk(false) {
					l.replayPause = time.Now().Add(l.cfg.FlushInterval)
				}
			}
			continue
		}
		select {
		case <-l.wake:
			l.pump()
		case now := <-tick.C:
			l.onTick(now)
		case <-l.closing:
			l.drain()
			return
		}
	}
}

// pump takes the rows queued now, writing each batch as it fills.
func (l *Ledger) pump() {
	for n := len(l.queue); n > 0 && !l.stuck; n-- {
		l.take(<-l.queue)
	}
}

// wakeWriter tells the writer there is work, without waiting.
func (l *Ledger) wakeWriter() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Ledger) take(row ledgerRow) {
	if row.barrier != nil {
		row.barrier.done <- l.flushAll()
		return
	}
	l.checkIDs(&row)
	l.batch = append(l.batch, row)
	if len(l.batch) >= l.cfg.BatchSize {
		l.persistBatch(false)
	}
}

func (l *Ledger) onTick(now time.Time) {
	l.pump()
	if len(l.batch) > 0 {
		l.persistBatch(false)
	}
	l.journal.warm(journalWarmMost)
	if err := l.spool.syncActive(); err != nil {
		l.logWriteError("cannot sync the ledger spool", err)
	}
	l.maintain(now)
	// While PostgreSQL is away and no fresh batch probes it, a replay of
	// a segment already sealed does, or else an empty write (sealing the
	// active segment just to probe would leave a file per attempt).
	if !l.up && !now.Before(l.nextProbe) && l.spool.hasData() {
		if l.spool.sealedOrAdopted() {
			l.replayChunk(false)
		} else {
			_ = l.insert(nil, false)
		}
	}
}

// maintain adopts the spool segments of processes that are gone, when due.
func (l *Ledger) maintain(now time.Time) {
	if now.Before(l.nextAdopt) {
		return
	}
	l.nextAdopt = now.Add(adoptInterval)
	l.spool.adopt()
	l.adoptJournals()
}

// replayWork reports whether spooled rows wait and PostgreSQL is up.
func (l *Ledger) replayWork() bool {
	return l.up && l.spool.hasData() && !time.Now().Before(l.replayPause)
}

// tryDB reports whether the writer should try PostgreSQL now.
func (l *Ledger) tryDB(force bool) bool {
	return l.up || force || !time.Now().Before(l.nextProbe)
}

// persistBatch writes the batch to PostgreSQL, or else to the spool. When
// neither takes it, the writer holds it and stops taking rows from the
// queue until one does.
func (l *Ledger) persistBatch(force bool) (inDB bool) {
	rows := l.batch
	if len(rows) == 0 {
		return true
	}
	if l.tryDB(force) {
		if err := l.insert(rows, false); err == nil {
			l.release(len(rows))
			if l.replayWork() {
				l.replayChunk(false)
			}
			return true
		}
	}
	if err := l.spool.append(rows, true); err != nil {
		if !l.stuck {
			l.logWriteError("ledger rows held in memory: PostgreSQL and the spool cannot take them", err)
		}
		l.stuck = true
		return false
	}
	l.m.spooled.Add(len(rows))
	l.release(len(rows))
	return false
}

// release lets go of a batch that is in PostgreSQL or the spool: its
// journal slots may be reused.
func (l *Ledger) release(n int) {
	for i := range l.batch {
		l.journal.done(&l.batch[i])
	}
	l.batch = l.batch[:0]
	l.stuck = false
	l.queued.Add(-int64(n))
}

// insert writes rows, counting what happened.
func (l *Ledger) insert(rows []ledgerRow, replay bool) error {
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.WriteTimeout)
	defer cancel()
	start := time.Now()
	n, err := l.w.writeRows(ctx, rows)
	if l.cfg.Tracer != nil {
		l.traceWrite(rows, replay, start, n, err)
	}
	if err != nil {
		l.m.writeErrors.Inc()
		l.markDown(err)
		return err
	}
	if len(rows) > 0 {
		l.m.batchDuration.UpdateDuration(start)
		l.m.batches.Inc()
	}
	if replay {
		l.m.replayed.Add(int(n))
	} else {
		l.m.written.Add(int(n))
	}
	l.m.duplicates.Add(len(rows) - int(n))
	l.markUp()
	return nil
}

func (l *Ledger) markDown(err error) {
	if l.up {
		l.log.Warn("ledger cannot write to PostgreSQL; rows go to the spool until it answers", "err", err)
		l.backoff = l.cfg.FlushInterval
	} else {
		l.logWriteError("ledger still cannot write to PostgreSQL", err)
		l.backoff = min(2*l.backoff, l.cfg.RetryMax)
	}
	l.up = false
	l.dbUp.Store(false)
	l.nextProbe = time.Now().Add(l.backoff)
}

func (l *Ledger) markUp() {
	if !l.up {
		l.log.Info("ledger writes to PostgreSQL again", "spool_bytes", l.spool.bytes())
	}
	l.up = true
	l.dbUp.Store(true)
	l.replayPause = time.Time{}
}

// replayChunk replays up to four batches of the oldest spool segment and
// reports whether it made progress.
func (l *Ledger) replayChunk(force bool) bool {
	if !l.tryDB(force) {
		return false
	}
	seg := l.spool.next()
	if seg == nil {
		return false
	}
	_, ok := l.replaySegment(seg, 4)
	return ok
}

// replaySegment replays up to max batches of seg; done reports that the
// segment is finished and deleted, which happens only once every line of
// it is in PostgreSQL. ok is false when a batch could not be read or
// written; the next attempt starts again after the last written batch.
func (l *Ledger) replaySegment(seg *segment, max int) (done, ok bool) {
	for range max {
		rows, eof, err := l.spool.read(seg, l.cfg.BatchSize, l.replayBuf[:0])
		l.replayBuf = rows[:0]
		if err != nil {
			l.logWriteError("cannot read a ledger spool segment", err)
			l.spool.rewind(seg)
			return false, false
		}
		for i := range rows {
			l.checkIDs(&rows[i])
		}
		if len(rows) > 0 {
			if err := l.insert(rows, true); err != nil {
				l.spool.rewind(seg)
				return false, false
			}
		}
		l.spool.advance(seg)
		if eof {
			l.spool.finish(seg)
			return true, true
		}
	}
	return false, true
}

// flushAll answers a barrier: the batch to PostgreSQL, trying at once,
// then the spool as it stands (rows that overflow into it meanwhile were
// recorded after the barrier, and are left to the ordinary replay).
func (l *Ledger) flushAll() error {
	if !l.persistBatch(true) {
		return errors.New("cannot flush the ledger: PostgreSQL did not take the rows; they are in the spool")
	}
	l.spool.seal()
	for _, seg := range l.spool.pending() {
		for {
			done, ok := l.replaySegment(seg, 4)
			if !ok && !l.up {
				return errors.New("cannot flush the ledger: PostgreSQL did not take the spooled rows")
			}
			if !ok {
				return errors.New("cannot flush the ledger: a spool segment cannot be read")
			}
			if done {
				break
			}
		}
	}
	return nil
}

// drain empties the queue at Close: batches to PostgreSQL while it answers
// and the context allows, everything else to the spool.
func (l *Ledger) drain() {
	var barriers []*barrier
	for {
	fill:
		for len(l.batch) < l.cfg.BatchSize {
			select {
			case row := <-l.queue:
				if row.barrier != nil {
					barriers = append(barriers, row.barrier)
					continue
				}
				l.batch = append(l.batch, row)
			default:
				break fill
			}
		}
		if len(l.batch) == 0 {
			break
		}
		n := len(l.batch)
		if l.ctx.Err() == nil && l.tryDB(false) && l.insert(l.batch, false) == nil {
			l.release(n)
			continue
		}
		if err := l.spool.append(l.batch, true); err != nil {
			l.m.dropped.Add(n)
			l.log.Error("ledger rows lost at shutdown: PostgreSQL and the spool cannot take them", "rows", n, "err", err)
			l.closeErr = fmt.Errorf("cannot drain the ledger: %d rows lost: %w", n, err)
			// They stay in the journal, which the next process replays.
			l.batch = l.batch[:0]
			l.queued.Add(-int64(n))
			continue
		}
		l.m.spooled.Add(n)
		l.release(n)
	}
	if l.journal != nil {
		if left := l.journal.close(); left > 0 {
			l.log.Error("ledger journal left with rows neither PostgreSQL nor the spool took; the next process replays it",
				"rows", left)
		}
	}
	if err := l.spool.close(); err != nil && l.closeErr == nil {
		l.closeErr = err
	}
	for _, b := range barriers {
		b.done <- ErrLedgerClosed
	}
}

// checkIDs drops (to null) every id of row that is not a UUID, so that one
// bad row cannot fail its batch. Ids come from the database, so this is
// a caller's bug, counted and logged.
func (l *Ledger) checkIDs(row *ledgerRow) {
	for i := range nID {
		if _, present, ok := row.id(i); present && !ok {
			row.ids &^= 1 << i
			l.badID(row)
		}
	}
}

func (l *Ledger) badID(row *ledgerRow) {
	l.m.badIDs.Inc()
	if ok, n := l.idLog.Allow(); ok {
		l.log.Error("ledger row carries an id that is not a UUID; stored as null",
			"request_id", string(row.textBytes(textRequestID)), "suppressed", n)
	}
}

func (l *Ledger) logWriteError(msg string, err error) {
	if ok, n := l.errLog.Allow(); ok {
		l.log.Error(msg, "err", err, "suppressed", n)
	}
}

// traceWrite exports the span of one batch statement that began at start:
// how many rows it carried and wrote, whether they were replayed from the
// spool, and links to the requests whose spans were sampled (a replayed
// row no longer names its request's span).
func (l *Ledger) traceWrite(rows []ledgerRow, replay bool, start time.Time, inserted int64, err error) {
	var links []trace.Link
	for i := range rows {
		if len(links) == MaxSpanLinks {
			break
		}
		r := &rows[i]
		if r.traceID == ([16]byte{}) {
			continue
		}
		links = append(links, trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: r.traceID, SpanID: r.spanID, TraceFlags: trace.FlagsSampled, Remote: true})})
	}
	_, sp := l.cfg.Tracer.Start(context.Background(), SpanLedgerWrite, trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithSpanKind(trace.SpanKindClient))
	sp.SetAttributes(attribute.Int("gateway.ledger.rows", len(rows)), attribute.Int64("gateway.ledger.inserted", inserted),
		attribute.Bool("gateway.ledger.replay", replay), attribute.String("db.system.name", "postgresql"))
	if err != nil {
		sp.SetStatus(codes.Error, "write failed")
	}
	sp.End()
}

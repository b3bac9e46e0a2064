package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/edgegw/gateway/hotpath/meter"
)

// copyRowsSQL writes one batch as COPY's binary rows. It costs PostgreSQL
// about two thirds of the CPU per row of insertRowsSQL, whose function
// scan unnests 21 arrays (10–11 against 15–18.5 µs a row in one backend,
// batches of 500; docs/ledger.md). COPY cannot skip a row already present:
// a batch with one fails whole, and is written again with insertRowsSQL.
// Both statements name the columns of ledgerFields, in its order.
var copyRowsSQL = "copy request_log (" + ledgerColumns() + ") from stdin (format binary)"

// insertRowsSQL writes one batch in one statement: each column travels as
// one array parameter, unnest turns them back into rows, and rows whose
// row_id is already present (a batch written twice) are skipped. It
// writes the batches COPY refused for such a row.
var insertRowsSQL = "insert into request_log (" + ledgerColumns() + ")\nselect * from unnest(" +
	ledgerArrayParams() + ")\non conflict (row_id) do nothing"

// ledgerColumns lists the names of ledgerFields.
func ledgerColumns() string {
	names := make([]string, len(ledgerFields))
	for i, f := range ledgerFields {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// ledgerArrayParams lists insertRowsSQL's parameters, one array of each
// field's type: $1::uuid[], $2::text[], ...
func ledgerArrayParams() string {
	params := make([]string, len(ledgerFields))
	for i, f := range ledgerFields {
		params[i] = "$" + strconv.Itoa(i+1) + "::" + f.sqlType + "[]"
	}
	return strings.Join(params, ", ")
}

// pgRowWriter is the ledger's PostgreSQL writer. It encodes each batch
// itself, in PostgreSQL's binary formats, into one buffer reused from
// batch to batch: pgx's general encoding of 21 slices (a plan looked up
// per parameter, reflection over the UUID, text and nullable slices) took
// 2% of the gateway's CPU under load in one profile, up to 10% in
// another; this encoding costs 0.4 µs a row and allocates nothing. It is
// used by the writer goroutine only.
type pgRowWriter struct {
	db     *DB
	buf    []byte
	copyIn bytes.Reader
	params [len(ledgerFields)][]byte
	ends   [len(ledgerFields)]int
	// conflicts counts the batches COPY refused for a row already
	// present; nil counts nothing.
	conflicts *metrics.Counter
}

// insertRowsStatement names insertRowsSQL where connections keep named
// prepared statements.
const insertRowsStatement = "gateway_ledger_insert_rows"

// PostgreSQL's type OIDs of the columns, and of their arrays.
const (
	oidBool, oidInt8, oidInt4, oidText = 16, 20, 23, 25
	oidTimestamptz, oidUUID            = 1184, 2950
	oidBoolArr, oidInt4Arr, oidTextArr = 1000, 1007, 1009
	oidInt8Arr, oidTstzArr, oidUUIDArr = 1016, 1185, 2951
)

// ledgerField is one column of a batch: its name, its type (by name and
// by OID), its array's type, and its value in a row as a binary field —
// the length, -1 for null, then the bytes — which is the same in COPY's
// rows and in an array.
type ledgerField struct {
	name, sqlType string
	oid, arrayOID uint32
	put           func(b []byte, r *ledgerRow) []byte
}

// ledgerFields are the columns the writer sends, in order: copyRowsSQL and
// insertRowsSQL are made from it.
var ledgerFields = [...]ledgerField{
	{"row_id", "uuid", oidUUID, oidUUIDArr, func(b []byte, r *ledgerRow) []byte {
		return append(binary.BigEndian.AppendUint32(b, 16), r.rowID[:]...)
	}},
	{"request_id", "text", oidText, oidTextArr, textField(textRequestID, true)},
	{"created_at", "timestamptz", oidTimestamptz, oidTstzArr, int8Field(func(r *ledgerRow) int64 { return r.at - pgEpochMicros })},
	{"key_id", "uuid", oidUUID, oidUUIDArr, uuidField(idKey)},
	{"user_id", "uuid", oidUUID, oidUUIDArr, uuidField(idUser)},
	{"org_id", "uuid", oidUUID, oidUUIDArr, uuidField(idOrg)},
	{"workspace_id", "uuid", oidUUID, oidUUIDArr, uuidField(idWorkspace)},
	{"bucket", "text", oidText, oidTextArr, textField(textBucket, false)},
	{"route", "text", oidText, oidTextArr, textField(textRoute, true)},
	{"tier", "text", oidText, oidTextArr, textField(textTier, false)},
	{"status", "int4", oidInt4, oidInt4Arr, func(b []byte, r *ledgerRow) []byte {
		return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(b, 4), uint32(r.status))
	}},
	{"error_code", "text", oidText, oidTextArr, textField(textErrorCode, false)},
	{"input_tokens", "int8", oidInt8, oidInt8Arr, int8Field(func(r *ledgerRow) int64 { return r.inTok })},
	{"output_tokens", "int8", oidInt8, oidInt8Arr, int8Field(func(r *ledgerRow) int64 { return r.outTok })},
	{"weighted_tokens", "int8", oidInt8, oidInt8Arr, int8Field(func(r *ledgerRow) int64 { return r.wTok })},
	{"cost_pico", "int8", oidInt8, oidInt8Arr, int8Field(func(r *ledgerRow) int64 { return r.cost })},
	{"estimated", "bool", oidBool, oidBoolArr, boolField(flagEstimated)},
	{"billed", "bool", oidBool, oidBoolArr, boolField(flagBilled)},
	{"stream", "bool", oidBool, oidBoolArr, boolField(flagStream)},
	{"duration_us", "int8", oidInt8, oidInt8Arr, int8Field(func(r *ledgerRow) int64 { return r.durUS })},
	{"ttft_us", "int8", oidInt8, oidInt8Arr, func(b []byte, r *ledgerRow) []byte {
		if r.ttftUS == 0 {
			return appendNull(b)
		}
		return appendInt8(b, r.ttftUS)
	}},
}

func uuidField(i int) func([]byte, *ledgerRow) []byte {
	return func(b []byte, r *ledgerRow) []byte {
		id, _, ok := r.id(i)
		if !ok {
			return appendNull(b)
		}
		return append(binary.BigEndian.AppendUint32(b, 16), id[:]...)
	}
}

// textField stores an empty text as null, or as the empty string when
// keepEmpty.
func textField(i int, keepEmpty bool) func([]byte, *ledgerRow) []byte {
	return func(b []byte, r *ledgerRow) []byte {
		t := r.textBytes(i)
		if len(t) == 0 && !keepEmpty {
			return appendNull(b)
		}
		return appendText(b, t)
	}
}

func int8Field(v func(r *ledgerRow) int64) func([]byte, *ledgerRow) []byte {
	return func(b []byte, r *ledgerRow) []byte { return appendInt8(b, v(r)) }
}

func boolField(flag uint8) func([]byte, *ledgerRow) []byte {
	return func(b []byte, r *ledgerRow) []byte {
		v := byte(0)
		if r.flags&flag != 0 {
			v = 1
		}
		return append(binary.BigEndian.AppendUint32(b, 1), v)
	}
}

// ledgerParamOIDs are the types of insertRowsSQL's parameters, in order.
var ledgerParamOIDs = func() (oids [len(ledgerFields)]uint32) {
	for i, f := range ledgerFields {
		oids[i] = f.arrayOID
	}
	return oids
}()

// binaryFormat sends every parameter in binary.
var binaryFormat = []int16{1}

func (w *pgRowWriter) writeRows(ctx context.Context, rows []ledgerRow) (int64, error) {
	conn, err := w.db.Pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("cannot write ledger rows: %w", err)
	}
	defer conn.Release()
	w.copyIn.Reset(w.encodeCopy(rows))
	tag, err := conn.Conn().PgConn().CopyFrom(ctx, &w.copyIn, copyRowsSQL)
	if err == nil {
		return tag.RowsAffected(), nil
	}
	if pgErrCode(err) != "23505" { // unique_violation: a row_id already present
		return 0, fmt.Errorf("cannot write ledger rows: %w", err)
	}
	// The batch, or part of it, was written before (its commit's
	// acknowledgement was lost, or it is a replay): write what is not.
	if w.conflicts != nil {
		w.conflicts.Inc()
	}
	params := w.encode(rows)
	var rr *pgconn.ResultReader
	if conn.Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		// Prepared once per connection; pgx keeps the description.
		sd, err := conn.Conn().Prepare(ctx, insertRowsStatement, insertRowsSQL)
		if err != nil {
			return 0, fmt.Errorf("cannot write ledger rows: %w", err)
		}
		rr = conn.Conn().PgConn().ExecPrepared(ctx, sd.Name, params, binaryFormat, nil)
	} else {
		// Behind a pooler in transaction mode: no named statements.
		rr = conn.Conn().PgConn().ExecParams(ctx, insertRowsSQL, params, ledgerParamOIDs[:], binaryFormat, nil)
	}
	tag, err = rr.Close()
	if err != nil {
		return 0, fmt.Errorf("cannot write ledger rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// pgEpochMicros is PostgreSQL's timestamp epoch, 2000-01-01 UTC, in Unix
// microseconds.
const pgEpochMicros = 946_684_800_000_000

// copySignature opens COPY's binary format: the signature, then the flags
// and the length of the header extension, both zero.
const copySignature = "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// encodeCopy writes the batch as COPY's binary format: the header, each
// row as its field count and fields, then the trailer. The result aliases
// the writer's buffer.
func (w *pgRowWriter) encodeCopy(rows []ledgerRow) []byte {
	b := append(w.buf[:0], copySignature...)
	for i := range rows {
		b = binary.BigEndian.AppendUint16(b, uint16(len(ledgerFields)))
		for _, f := range ledgerFields {
			b = f.put(b, &rows[i])
		}
	}
	b = binary.BigEndian.AppendUint16(b, math.MaxUint16) // -1: no more rows
	w.buf = b
	return b
}

// encode writes the batch's 21 column arrays and returns them as
// insertRowsSQL's parameters; they alias the writer's buffer.
func (w *pgRowWriter) encode(rows []ledgerRow) [][]byte {
	b := w.buf[:0]
	for i, f := range ledgerFields {
		b = appendArray(b, f.oid, rows, f.put)
		w.ends[i] = len(b)
	}
	w.buf = b
	start := 0
	for i, end := range w.ends {
		w.params[i] = b[start:end:end]
		start = end
	}
	return w.params[:]
}

// appendArray appends a one-dimensional array of rows' elements in
// PostgreSQL's binary format: dimensions, a has-nulls flag, the element
// type, the length and lower bound, then each element as its length and
// bytes (length -1 for null). An empty batch is the empty array.
func appendArray(b []byte, elemOID uint32, rows []ledgerRow, elem func(b []byte, r *ledgerRow) []byte) []byte {
	if len(rows) == 0 {
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint32(b, 0)
		return binary.BigEndian.AppendUint32(b, elemOID)
	}
	b = binary.BigEndian.AppendUint32(b, 1)
	flags := len(b)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, elemOID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(rows)))
	b = binary.BigEndian.AppendUint32(b, 1)
	nulls := false
	for i := range rows {
		at := len(b)
		b = elem(b, &rows[i])
		// An element starts with its length, -1 for null.
		nulls = nulls || int32(binary.BigEndian.Uint32(b[at:])) == -1
	}
	if nulls {
		binary.BigEndian.PutUint32(b[flags:], 1)
	}
	return b
}

func appendNull(b []byte) []byte { return binary.BigEndian.AppendUint32(b, math.MaxUint32) }

// appendInt8 appends v as an int8 element: its length, then its bytes.
func appendInt8(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(b, 8), uint64(v))
}

// appendText appends t as a text element, made valid UTF-8 without NUL
// bytes (as cleanText does) when it is not already.
func appendText(b []byte, t []byte) []byte {
	if !cleanAlready(t) {
		t = []byte(cleanText(t))
	}
	return append(binary.BigEndian.AppendUint32(b, uint32(len(t))), t...)
}

// maxSeedSlots bounds the slots one SeedBudget call returns.
const maxSeedSlots = 1 << 16

// seedFlushWait bounds how long SeedBudget waits for this process's own
// rows to be written before it reads the ledger anyway.
const seedFlushWait = time.Second

// SeedBudget returns what the ledger records for b from `from` up to `to`
// (see meter.BudgetSeeder). While PostgreSQL is up it first writes out
// the rows this process still holds (waiting at most seedFlushWait), so
// that its own recent requests count too. Rows other processes hold
// (queued, or spooled while PostgreSQL was away) count once they are
// written.
func (l *Ledger) SeedBudget(ctx context.Context, b meter.Budget, from, to time.Time, slot time.Duration) ([]int64, error) {
	if l.dbUp.Load() && !l.closed.Load() && (l.queued.Load() > 0 || l.spool.hasData()) {
		fctx, cancel := context.WithTimeout(ctx, seedFlushWait)
		_ = l.Flush(fctx)
		cancel()
	}
	return l.db.SeedBudget(ctx, b, from, to, slot)
}

// SeedBudget sums the billed rows of b's subject with created_at in
// [from, to): their cost for key spend, workspace spend and credits, their
// weighted tokens for the pools, their number on the mira tier for the
// mira cap. Slot i covers [from+i*slot, from+(i+1)*slot); there is one slot
// when slot covers the whole span.
//
// It reads the ledger's running totals (ledger_totals, kept by a trigger
// as rows are written), which hold each subject's sums per 15-minute bin:
// from and every slot boundary must fall on a bin boundary, as every span
// a counter is seeded over does, and a bin counts whole when it starts
// before to. So a row another process stamped a moment after to, by its
// own clock, counts: a seed may hold a little more than the instant's
// spend, never less.
func (db *DB) SeedBudget(ctx context.Context, b meter.Budget, from, to time.Time, slot time.Duration) ([]int64, error) {
	span := to.Sub(from)
	n := 1
	if slot > 0 && span > slot {
		if slot%totalsBin != 0 {
			return nil, fmt.Errorf("cannot seed budget: a slot of %s is not a whole number of %s bins", slot, totalsBin)
		}
		q := span / slot
		if span%slot != 0 {
			q++
		}
		if q > maxSeedSlots {
			return nil, fmt.Errorf("cannot seed budget: %d slots of %s is too many", q, slot)
		}
		n = int(q)
	}
	out := make([]int64, n)
	if !to.After(from) {
		return out, nil
	}
	if from.UnixMicro()%totalsBin.Microseconds() != 0 {
		return nil, fmt.Errorf("cannot seed budget: %s is not on a %s boundary", from.UTC().Format(time.RFC3339Nano), totalsBin)
	}
	var subject [16]byte
	if !parseUUID(&subject, b.Subject) {
		return nil, fmt.Errorf("cannot seed budget %s: subject %q is not a UUID", b.Kind, b.Subject)
	}
	var kind int16
	switch b.Kind {
	case meter.BudgetKeySpend, meter.BudgetCredits:
		kind = 1
	case meter.BudgetWorkspaceSpend:
		kind = 2
	case meter.BudgetPoolMonthly, meter.BudgetPoolBurst:
		kind = 3
	case meter.BudgetMiraRequests:
		kind = 4
	default:
		return nil, fmt.Errorf("cannot seed budget: unknown kind %d", b.Kind)
	}
	id := pgtype.UUID{Bytes: subject, Valid: true}
	const filter = " from ledger_totals where kind = $1 and subject = $2 and bin >= $3 and bin < $4"
	if n == 1 {
		err := db.Pool.QueryRow(ctx, "select coalesce(sum(amount), 0)::bigint"+filter, kind, id, from, to).Scan(&out[0])
		if err != nil {
			return nil, fmt.Errorf("cannot seed budget %s: %w", b.Kind, err)
		}
		return out, nil
	}
	rows, err := db.Pool.Query(ctx, "select bin, amount"+filter, kind, id, from, to)
	if err != nil {
		return nil, fmt.Errorf("cannot seed budget %s: %w", b.Kind, err)
	}
	defer rows.Close()
	for rows.Next() {
		var bin time.Time
		var v int64
		if err := rows.Scan(&bin, &v); err != nil {
			return nil, fmt.Errorf("cannot seed budget %s: %w", b.Kind, err)
		}
		if i := int(bin.Sub(from) / slot); i >= 0 && i < n {
			out[i] += v
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot seed budget %s: %w", b.Kind, err)
	}
	return out, nil
}

// totalsBin is the width of a ledger_totals bin (migration 013).
const totalsBin = 15 * time.Minute

// RequestLog is one row of the request log as its owner reads it.
type RequestLog struct {
	RequestID      string
	CreatedAt      time.Time
	KeyID          string // empty when no key was verified
	WorkspaceID    string // empty when none
	Bucket         string
	Route          string
	Tier           string // empty when no tier was chosen
	Status         int
	ErrorCode      string // empty on success
	InputTokens    int64
	OutputTokens   int64
	WeightedTokens int64
	CostPico       int64
	Estimated      bool
	Billed         bool
	Stream         bool
	DurationUS     int64
	TTFTUS         int64 // 0 when no content token was sent
}

// RequestLog reads the request requestID among the rows of userID in
// orgID, or ErrNotFound. When that caller reused the id for several
// requests, the latest one is returned.
func (db *DB) RequestLog(ctx context.Context, requestID, userID, orgID string) (RequestLog, error) {
	var user, org [16]byte
	if !parseUUID(&user, userID) || !parseUUID(&org, orgID) {
		return RequestLog{}, ErrNotFound
	}
	var r RequestLog
	var key, workspace, bucket, tier, errorCode *string
	var ttft *int64
	var status int32
	err := db.read(func(q querier) error {
		return q.QueryRow(ctx, `select request_id, created_at, key_id::text, workspace_id::text, bucket, route,
    tier, status, error_code, input_tokens, output_tokens, weighted_tokens, cost_pico, estimated, billed, stream,
    duration_us, ttft_us
from request_log where request_id = $1 and user_id = $2 and org_id = $3
order by created_at desc, row_id desc limit 1`,
			requestID, pgtype.UUID{Bytes: user, Valid: true}, pgtype.UUID{Bytes: org, Valid: true}).Scan(
			&r.RequestID, &r.CreatedAt, &key, &workspace, &bucket, &r.Route, &tier, &status, &errorCode,
			&r.InputTokens, &r.OutputTokens, &r.WeightedTokens, &r.CostPico, &r.Estimated, &r.Billed, &r.Stream,
			&r.DurationUS, &ttft)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return RequestLog{}, ErrNotFound
	}
	if err != nil {
		return RequestLog{}, fmt.Errorf("cannot read request log: %w", err)
	}
	r.Status = int(status)
	r.KeyID, r.WorkspaceID, r.Bucket, r.Tier, r.ErrorCode = deref(key), deref(workspace), deref(bucket), deref(tier), deref(errorCode)
	if ttft != nil {
		r.TTFTUS = *ttft
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return r, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

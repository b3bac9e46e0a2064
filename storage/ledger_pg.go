package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/edgegw/gateway/hotpath/meter"
)

// insertRowsSQL writes one batch in one statement: each column travels as
// one array parameter, unnest turns them back into rows, and rows whose
// row_id is already present (a batch written twice) are skipped.
const insertRowsSQL = `insert into request_log (row_id, request_id, created_at, key_id, user_id, org_id,
    workspace_id, bucket, route, tier, status, error_code, input_tokens, output_tokens, weighted_tokens,
    cost_pico, estimated, billed, stream, duration_us, ttft_us)
select * from unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::uuid[], $5::uuid[], $6::uuid[],
    $7::uuid[], $8::text[], $9::text[], $10::text[], $11::int4[], $12::text[], $13::int8[], $14::int8[],
    $15::int8[], $16::int8[], $17::bool[], $18::bool[], $19::bool[], $20::int8[], $21::int8[])
on conflict (row_id) do nothing`

// pgRowWriter is the ledger's PostgreSQL writer. Its column buffers are
// reused from batch to batch; it is used by the writer goroutine only.
type pgRowWriter struct {
	db   *DB
	cols rowColumns
	// names interns the short texts (bucket, route, tier, error code), so a
	// batch allocates a string per row only for its request id.
	names map[string]string
}

type rowColumns struct {
	rowID, key, user, org, workspace []pgtype.UUID
	requestID, route                 []string
	bucket, tier, errorCode          []pgtype.Text
	createdAt                        []time.Time
	status                           []int32
	inTok, outTok, wTok, cost, dur   []int64
	ttft                             []pgtype.Int8
	estimated, billed, stream        []bool
}

func (c *rowColumns) reset() {
	c.rowID, c.key, c.user, c.org, c.workspace = c.rowID[:0], c.key[:0], c.user[:0], c.org[:0], c.workspace[:0]
	c.requestID, c.route = c.requestID[:0], c.route[:0]
	c.bucket, c.tier, c.errorCode = c.bucket[:0], c.tier[:0], c.errorCode[:0]
	c.createdAt, c.status = c.createdAt[:0], c.status[:0]
	c.inTok, c.outTok, c.wTok, c.cost, c.dur = c.inTok[:0], c.outTok[:0], c.wTok[:0], c.cost[:0], c.dur[:0]
	c.ttft = c.ttft[:0]
	c.estimated, c.billed, c.stream = c.estimated[:0], c.billed[:0], c.stream[:0]
}

func (w *pgRowWriter) name(b []byte) pgtype.Text {
	if len(b) == 0 {
		return pgtype.Text{}
	}
	if s, ok := w.names[string(b)]; ok {
		return pgtype.Text{String: s, Valid: true}
	}
	s := cleanText(b)
	if w.names == nil {
		w.names = make(map[string]string)
	}
	if len(w.names) < 4096 {
		w.names[s] = s
	}
	return pgtype.Text{String: s, Valid: true}
}

func (w *pgRowWriter) writeRows(ctx context.Context, rows []ledgerRow) (int64, error) {
	c := &w.cols
	c.reset()
	for i := range rows {
		r := &rows[i]
		uid := func(i int) pgtype.UUID {
			id, _, ok := r.id(i)
			return pgtype.UUID{Bytes: id, Valid: ok}
		}
		c.rowID = append(c.rowID, pgtype.UUID{Bytes: r.rowID, Valid: true})
		c.key = append(c.key, uid(idKey))
		c.user = append(c.user, uid(idUser))
		c.org = append(c.org, uid(idOrg))
		c.workspace = append(c.workspace, uid(idWorkspace))
		c.requestID = append(c.requestID, cleanText(r.textBytes(textRequestID)))
		c.route = append(c.route, w.name(r.textBytes(textRoute)).String)
		c.bucket = append(c.bucket, w.name(r.textBytes(textBucket)))
		c.tier = append(c.tier, w.name(r.textBytes(textTier)))
		c.errorCode = append(c.errorCode, w.name(r.textBytes(textErrorCode)))
		c.createdAt = append(c.createdAt, time.UnixMicro(r.at).UTC())
		c.status = append(c.status, r.status)
		c.inTok = append(c.inTok, r.inTok)
		c.outTok = append(c.outTok, r.outTok)
		c.wTok = append(c.wTok, r.wTok)
		c.cost = append(c.cost, r.cost)
		c.dur = append(c.dur, r.durUS)
		c.ttft = append(c.ttft, pgtype.Int8{Int64: r.ttftUS, Valid: r.ttftUS != 0})
		c.estimated = append(c.estimated, r.flags&flagEstimated != 0)
		c.billed = append(c.billed, r.flags&flagBilled != 0)
		c.stream = append(c.stream, r.flags&flagStream != 0)
	}
	tag, err := w.db.Pool.Exec(ctx, insertRowsSQL, c.rowID, c.requestID, c.createdAt, c.key, c.user, c.org,
		c.workspace, c.bucket, c.route, c.tier, c.status, c.errorCode, c.inTok, c.outTok, c.wTok,
		c.cost, c.estimated, c.billed, c.stream, c.dur, c.ttft)
	if err != nil {
		return 0, fmt.Errorf("cannot write ledger rows: %w", err)
	}
	return tag.RowsAffected(), nil
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
// when slot covers the whole span. Times are taken to the microsecond, as
// PostgreSQL keeps them.
func (db *DB) SeedBudget(ctx context.Context, b meter.Budget, from, to time.Time, slot time.Duration) ([]int64, error) {
	from, to = from.Truncate(time.Microsecond), to.Truncate(time.Microsecond)
	span := to.Sub(from)
	n := 1
	if slot > 0 && span > slot {
		if slot = slot.Truncate(time.Microsecond); slot <= 0 {
			return nil, errors.New("cannot seed budget: a slot is shorter than a microsecond")
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
	var subject [16]byte
	if !parseUUID(&subject, b.Subject) {
		return nil, fmt.Errorf("cannot seed budget %s: subject %q is not a UUID", b.Kind, b.Subject)
	}
	var measure, where string
	switch b.Kind {
	case meter.BudgetKeySpend, meter.BudgetCredits:
		measure, where = "sum(cost_pico)", "key_id = $1"
	case meter.BudgetWorkspaceSpend:
		measure, where = "sum(cost_pico)", "workspace_id = $1 and workspace_id is not null"
	case meter.BudgetPoolMonthly, meter.BudgetPoolBurst:
		measure, where = "sum(weighted_tokens)", "org_id = $1"
	case meter.BudgetMiraRequests:
		measure, where = "count(*)", "org_id = $1 and tier = 'mira' and bucket = 'subscription'"
	default:
		return nil, fmt.Errorf("cannot seed budget: unknown kind %d", b.Kind)
	}
	id := pgtype.UUID{Bytes: subject, Valid: true}
	filter := " from request_log where " + where + " and billed and created_at >= $2 and created_at < $3"
	if n == 1 {
		err := db.Pool.QueryRow(ctx, "select coalesce("+measure+", 0)::bigint"+filter, id, from, to).Scan(&out[0])
		if err != nil {
			return nil, fmt.Errorf("cannot seed budget %s: %w", b.Kind, err)
		}
		return out, nil
	}
	rows, err := db.Pool.Query(ctx, "select date_bin($4::bigint * interval '1 microsecond', created_at, $2), "+
		measure+"::bigint"+filter+" group by 1", id, from, to, slot.Microseconds())
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

package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgegw/gateway/codec"
)

// EvalRunOptions are a run's settings, checked by the caller.
type EvalRunOptions struct {
	Tier        string
	Concurrency int
	Repeats     int
	OnBudget    string // continue or stop
}

// EvalRun is a run with its counts and scores.
type EvalRun struct {
	ID, SuiteID, KeyID string
	EvalRunOptions
	Status     string
	Reason     *string
	CreatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time

	Counts                    EvalCounts
	InputTokens, OutputTokens int64
	// CostPico is the sum of the run's ledger rows.
	CostPico   int64
	Assertions map[string]EvalAssertionScore
}

// EvalCounts counts a run's results by status.
type EvalCounts struct {
	Total, Queued, Running, Passed, Failed, Errored, Cancelled int
}

// EvalAssertionScore is how often one assertion type passed in a run.
type EvalAssertionScore struct{ Passed, Total int }

// The run statuses that have ended.
const (
	EvalRunCompleted = "completed"
	EvalRunFailed    = "failed"
	EvalRunCancelled = "cancelled"
)

const runColumns = `id, suite_id, key_id, tier, concurrency, repeats, on_budget, status, reason,
	created_at, started_at, finished_at`

func scanRun(row pgx.Row) (EvalRun, error) {
	var r EvalRun
	err := row.Scan(&r.ID, &r.SuiteID, &r.KeyID, &r.Tier, &r.Concurrency, &r.Repeats, &r.OnBudget, &r.Status,
		&r.Reason, &r.CreatedAt, &r.StartedAt, &r.FinishedAt)
	return r, err
}

// runOwned is the clause that run $1 is the caller's ($2, $3).
const runOwned = `id = $1 and org_id = $2 and workspace_id is not distinct from $3`

// CreateEvalRun snapshots the suite's cases into one queued item per case
// and repeat.
func (db *DB) CreateEvalRun(ctx context.Context, o EvalOwner, suiteID, keyID string, opt EvalRunOptions) (EvalRun, error) {
	var run EvalRun
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		n, err := lockSuite(ctx, tx, o, suiteID)
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrEvalSuiteEmpty
		}
		run, err = scanRun(tx.QueryRow(ctx, `insert into eval_runs
			(suite_id, org_id, workspace_id, key_id, tier, concurrency, repeats, on_budget)
			values ($1, $2, $3, $4, $5, $6, $7, $8) returning `+runColumns,
			suiteID, o.OrgID, o.workspace(), keyID, opt.Tier, opt.Concurrency, opt.Repeats, opt.OnBudget))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `insert into eval_results (run_id, case_id, case_seq, repeat, body)
			select $1, c.id, c.seq, g.r, c.body
			from (select id, body, row_number() over (order by created_at, id) as seq
			      from eval_cases where suite_id = $2) c
			cross join generate_series(1, $3::int) as g(r)`, run.ID, suiteID, opt.Repeats)
		return err
	})
	if err != nil {
		return EvalRun{}, fmt.Errorf("cannot create eval run: %w", err)
	}
	return db.EvalRun(ctx, o, run.ID)
}

// EvalRun reads a run with its counts, scores and cost.
func (db *DB) EvalRun(ctx context.Context, o EvalOwner, id string) (EvalRun, error) {
	r, err := scanRun(db.Pool.QueryRow(ctx, `select `+runColumns+` from eval_runs where `+runOwned,
		id, o.OrgID, o.workspace()))
	if err != nil {
		return r, fmt.Errorf("cannot read eval run: %w", notFoundOn(err, ErrEvalRunNotFound))
	}
	return r, db.fillRun(ctx, o, &r)
}

func (db *DB) fillRun(ctx context.Context, o EvalOwner, r *EvalRun) error {
	c := &r.Counts
	err := db.Pool.QueryRow(ctx, `select count(*),
			count(*) filter (where status = 'queued'), count(*) filter (where status = 'running'),
			count(*) filter (where status = 'passed'), count(*) filter (where status = 'failed'),
			count(*) filter (where status = 'errored'), count(*) filter (where status = 'cancelled'),
			coalesce(sum(input_tokens), 0)::bigint, coalesce(sum(output_tokens), 0)::bigint
		from eval_results where run_id = $1`, r.ID).Scan(&c.Total, &c.Queued, &c.Running, &c.Passed, &c.Failed,
		&c.Errored, &c.Cancelled, &r.InputTokens, &r.OutputTokens)
	if err != nil {
		return fmt.Errorf("cannot count eval run: %w", err)
	}
	// The ledger rows of every attempt, judges included, of this run.
	err = db.Pool.QueryRow(ctx, `select coalesce(sum(l.cost_pico), 0)::bigint from request_log l
		where l.request_id in (select unnest(request_ids) from eval_results where run_id = $1)
		and l.org_id = $2`, r.ID, o.OrgID).Scan(&r.CostPico)
	if err != nil {
		return fmt.Errorf("cannot sum eval run cost: %w", err)
	}
	rows, err := db.Pool.Query(ctx, `select v->>'type', count(*) filter (where (v->>'passed')::boolean), count(*)
		from eval_results, jsonb_array_elements(coalesce(verdicts, '[]'::jsonb)) v
		where run_id = $1 group by 1`, r.ID)
	if err != nil {
		return fmt.Errorf("cannot score eval run: %w", err)
	}
	defer rows.Close()
	r.Assertions = map[string]EvalAssertionScore{}
	for rows.Next() {
		var t string
		var s EvalAssertionScore
		if err := rows.Scan(&t, &s.Passed, &s.Total); err != nil {
			return fmt.Errorf("cannot score eval run: %w", err)
		}
		r.Assertions[t] = s
	}
	return rows.Err()
}

// ListEvalRuns lists a suite's runs newest first, without scores.
func (db *DB) ListEvalRuns(ctx context.Context, o EvalOwner, suiteID string, limit int, after *EvalPage) ([]EvalRun, error) {
	if _, err := db.EvalSuite(ctx, o, suiteID); err != nil {
		return nil, err
	}
	q := `select ` + runColumns + ` from eval_runs where suite_id = $1 and org_id = $2
		and workspace_id is not distinct from $3`
	args := []any{suiteID, o.OrgID, o.workspace(), limit}
	if after != nil {
		q += ` and (created_at, id) < ($5, $6)`
		args = append(args, after.At, after.ID)
	}
	rows, err := db.Pool.Query(ctx, q+` order by created_at desc, id desc limit $4`, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot list eval runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EvalRun, error) { return scanRun(r) })
	if err != nil {
		return nil, fmt.Errorf("cannot list eval runs: %w", notFoundOn(err, ErrEvalRunNotFound))
	}
	for i := range out {
		if err := db.fillRun(ctx, o, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CancelEvalRun cancels a run that has not ended and its queued items.
// Items already running finish and keep their results.
func (db *DB) CancelEvalRun(ctx context.Context, o EvalOwner, id string) (EvalRun, error) {
	if _, err := db.EvalRun(ctx, o, id); err != nil {
		return EvalRun{}, err
	}
	if err := db.StopEvalRun(ctx, id, EvalRunCancelled, ""); err != nil {
		return EvalRun{}, err
	}
	return db.EvalRun(ctx, o, id)
}

// StopEvalRun ends a run that has not ended with status (cancelled, or
// failed with reason) and cancels its queued items.
func (db *DB) StopEvalRun(ctx context.Context, id, status, reason string) error {
	var why *string
	if reason != "" {
		why = &reason
	}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return stopRun(ctx, tx, id, status, why) })
	if err != nil {
		return fmt.Errorf("cannot stop eval run: %w", err)
	}
	return nil
}

func stopRun(ctx context.Context, tx pgx.Tx, id, status string, why *string) error {
	tag, err := tx.Exec(ctx, `update eval_runs set status = $2, reason = $3, finished_at = now()
		where id = $1 and status in ('queued', 'running')`, id, status, why)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	_, err = tx.Exec(ctx, `update eval_results set status = 'cancelled', finished_at = now()
		where run_id = $1 and status = 'queued'`, id)
	return err
}

// EvalResult is one case and repeat of a run.
type EvalResult struct {
	ID, CaseID                string
	Seq, Repeat               int
	Status                    string
	ErrorCode                 *string
	Reply                     *string
	ToolCalls                 json.RawMessage
	Verdicts                  json.RawMessage
	InputTokens, OutputTokens int64
	CostPico, LatencyMS       int64
	Attempts                  int
	FinishedAt                *time.Time
}

// EvalResultPage is a keyset position in a run's results.
type EvalResultPage struct{ Seq, Repeat int }

// EvalResults lists a run's results by case, then repeat; status filters
// when not empty.
func (db *DB) EvalResults(ctx context.Context, o EvalOwner, runID, status string, limit int, after *EvalResultPage) ([]EvalResult, error) {
	if _, err := scanRun(db.Pool.QueryRow(ctx, `select `+runColumns+` from eval_runs where `+runOwned,
		runID, o.OrgID, o.workspace())); err != nil {
		return nil, fmt.Errorf("cannot list eval results: %w", notFoundOn(err, ErrEvalRunNotFound))
	}
	q := `select id, case_id, case_seq, repeat, status, error_code, reply, tool_calls, verdicts,
		input_tokens, output_tokens, cost_pico, latency_ms, attempts, finished_at
		from eval_results where run_id = $1 and ($2 = '' or status = $2)`
	args := []any{runID, status, limit}
	if after != nil {
		q += ` and (case_seq, repeat) > ($4, $5)`
		args = append(args, after.Seq, after.Repeat)
	}
	rows, err := db.Pool.Query(ctx, q+` order by case_seq, repeat limit $3`, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot list eval results: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EvalResult, error) {
		var x EvalResult
		var tc, v []byte
		err := r.Scan(&x.ID, &x.CaseID, &x.Seq, &x.Repeat, &x.Status, &x.ErrorCode, &x.Reply, &tc, &v,
			&x.InputTokens, &x.OutputTokens, &x.CostPico, &x.LatencyMS, &x.Attempts, &x.FinishedAt)
		x.ToolCalls, x.Verdicts = tc, v
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list eval results: %w", err)
	}
	return out, nil
}

// EvalCaseDiff is one case whose verdict differs between two runs.
type EvalCaseDiff struct {
	CaseID                        string
	Passed, Total                 int
	BaselinePassed, BaselineTotal int
}

// CompareEvalRuns reads both runs and the cases, present in both, whose
// verdict (every repeat passed) differs.
func (db *DB) CompareEvalRuns(ctx context.Context, o EvalOwner, runID, baselineID string) (run, base EvalRun, diffs []EvalCaseDiff, err error) {
	if run, err = db.EvalRun(ctx, o, runID); err != nil {
		return
	}
	if base, err = db.EvalRun(ctx, o, baselineID); err != nil {
		return
	}
	if run.SuiteID != base.SuiteID {
		err = ErrEvalRunMismatch
		return
	}
	rows, err := db.Pool.Query(ctx, `with v as (
			select run_id, case_id, min(case_seq) as seq, count(*) filter (where status = 'passed') as passed,
				count(*) as total
			from eval_results where run_id in ($1, $2) and status <> 'cancelled' group by run_id, case_id)
		select a.case_id, a.passed, a.total, b.passed, b.total
		from v a join v b on b.case_id = a.case_id and b.run_id = $2
		where a.run_id = $1 and (a.passed = a.total) <> (b.passed = b.total)
		order by a.seq`, runID, baselineID)
	if err != nil {
		err = fmt.Errorf("cannot compare eval runs: %w", err)
		return
	}
	diffs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (EvalCaseDiff, error) {
		var d EvalCaseDiff
		err := r.Scan(&d.CaseID, &d.Passed, &d.Total, &d.BaselinePassed, &d.BaselineTotal)
		return d, err
	})
	if err != nil {
		err = fmt.Errorf("cannot compare eval runs: %w", err)
	}
	return
}

// The queue (docs/evals.md, Execution).

// EvalItem is a claimed work item with what its worker needs.
type EvalItem struct {
	ID, RunID, CaseID string
	Repeat, Attempt   int
	Body              json.RawMessage
	Token             string
	Run               EvalRun // id, key, options; no counts
	OrgID             string
}

// EvalMaxAttempts is how many claims an item gets before a lease that
// expires again ends it errored.
const EvalMaxAttempts = 3

// evalClaimLock keys the transaction-scoped advisory lock claims take.
const evalClaimLock = 0x65766131 // "eva1"

// ClaimEvalItem claims the oldest claimable item under the run's and the
// fleet's concurrency caps, with a lease of the given length; nil when
// there is none. It also ends items whose lease expired once too often and
// closes runs with nothing left to do.
func (db *DB) ClaimEvalItem(ctx context.Context, lease time.Duration, fleetCap int) (*EvalItem, error) {
	var it *EvalItem
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock($1)`, evalClaimLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update eval_results set status = 'errored', error_code = 'lease_expired',
				lease_token = null, lease_until = null, finished_at = now()
			where status = 'running' and lease_until < now() and attempts >= $1`, EvalMaxAttempts); err != nil {
			return err
		}
		if err := closeDoneRuns(ctx, tx, ""); err != nil {
			return err
		}
		var active int
		if err := tx.QueryRow(ctx, `select count(*) from eval_results
			where status = 'running' and lease_until >= now()`).Scan(&active); err != nil {
			return err
		}
		if active >= fleetCap {
			return nil
		}
		var x EvalItem
		var body []byte
		// Each active run's running count is taken once, not once per
		// candidate item.
		err := tx.QueryRow(ctx, `with open as (
				select u.id, u.created_at from eval_runs u
				where u.status in ('queued', 'running')
				  and (select count(*) from eval_results x where x.run_id = u.id
				       and x.status = 'running' and x.lease_until >= now()) < u.concurrency),
			pick as (
				select r.id from eval_results r join open u on u.id = r.run_id
				where r.status = 'queued' or (r.status = 'running' and r.lease_until < now())
				order by u.created_at, u.id, r.case_seq, r.repeat
				limit 1 for update of r skip locked)
			update eval_results r set status = 'running', lease_token = gen_random_uuid(),
				lease_until = now() + $1 * interval '1 millisecond', attempts = r.attempts + 1
			from pick where r.id = pick.id
			returning r.id, r.run_id, r.case_id, r.repeat, r.attempts, r.body, r.lease_token`,
			lease.Milliseconds()).Scan(&x.ID, &x.RunID, &x.CaseID, &x.Repeat, &x.Attempt, &body, &x.Token)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		x.Body = body
		if x.Run, err = scanRun(tx.QueryRow(ctx, `update eval_runs set status = 'running',
				started_at = coalesce(started_at, now())
			where id = $1 returning `+runColumns, x.RunID)); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `select org_id from eval_runs where id = $1`, x.RunID).Scan(&x.OrgID); err != nil {
			return err
		}
		it = &x
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot claim eval item: %w", err)
	}
	return it, nil
}

// closeDoneRuns completes runs (one, or every active one when runID is
// empty) that have no queued or running item left.
func closeDoneRuns(ctx context.Context, tx pgx.Tx, runID string) error {
	_, err := tx.Exec(ctx, `update eval_runs u set status = 'completed', finished_at = now()
		where status in ('queued', 'running') and ($1 = '' or id::text = $1)
		and not exists (select 1 from eval_results r where r.run_id = u.id and r.status in ('queued', 'running'))`, runID)
	return err
}

// ExtendEvalLease renews a claim; false when the worker no longer holds it.
func (db *DB) ExtendEvalLease(ctx context.Context, it *EvalItem, lease time.Duration) (bool, error) {
	tag, err := db.Pool.Exec(ctx, `update eval_results set lease_until = now() + $3 * interval '1 millisecond'
		where id = $1 and lease_token = $2 and status = 'running'`, it.ID, it.Token, lease.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("cannot extend eval lease: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// NoteEvalRequest records a request id an attempt is about to use, so the
// run's cost finds its ledger row whatever happens to the attempt.
func (db *DB) NoteEvalRequest(ctx context.Context, it *EvalItem, requestID string) (bool, error) {
	tag, err := db.Pool.Exec(ctx, `update eval_results set request_ids = array_append(request_ids, $3)
		where id = $1 and lease_token = $2 and status = 'running'`, it.ID, it.Token, requestID)
	if err != nil {
		return false, fmt.Errorf("cannot note eval request: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// EvalOutcome is what one item's attempt came to.
type EvalOutcome struct {
	Status                    string // passed, failed or errored
	ErrorCode                 string
	Reply                     *string
	ToolCalls                 json.RawMessage
	Verdicts                  json.RawMessage
	InputTokens, OutputTokens int64
	CostPico, LatencyMS       int64
}

// FinishEvalItem writes the item's result if the worker still holds its
// claim, and completes the run when nothing is left; false when the claim
// was lost and nothing was written. A non-empty failRun ends the run failed
// with that reason in the same transaction, so no other item is claimed
// after the one that stopped it.
func (db *DB) FinishEvalItem(ctx context.Context, it *EvalItem, out EvalOutcome, failRun string) (bool, error) {
	var code *string
	if out.ErrorCode != "" {
		code = &out.ErrorCode
	}
	// The model's words as they came, except what PostgreSQL holds in no
	// column: a NUL, bytes that are not UTF-8, an unpaired surrogate,
	// stored as U+FFFD (and in jsonb a number beyond its bounds as null).
	// Refused, they would fail the item on every attempt.
	var tc, v *string
	if len(out.ToolCalls) > 0 {
		s := string(codec.StorableJSON(out.ToolCalls))
		tc = &s
	}
	if len(out.Verdicts) > 0 {
		s := string(codec.StorableJSON(out.Verdicts))
		v = &s
	}
	reply := out.Reply
	if reply != nil && !cleanAlready([]byte(*reply)) {
		s := cleanText([]byte(*reply))
		reply = &s
	}
	held := false
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update eval_results set status = $3, error_code = $4, reply = $5,
				tool_calls = $6::jsonb, verdicts = $7::jsonb, input_tokens = $8, output_tokens = $9,
				cost_pico = $10, latency_ms = $11, finished_at = now(), lease_token = null, lease_until = null
			where id = $1 and lease_token = $2 and status = 'running'`,
			it.ID, it.Token, out.Status, code, reply, tc, v, out.InputTokens, out.OutputTokens,
			out.CostPico, out.LatencyMS)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		held = true
		if failRun != "" {
			if err := stopRun(ctx, tx, it.RunID, EvalRunFailed, &failRun); err != nil {
				return err
			}
		}
		return closeDoneRuns(ctx, tx, it.RunID)
	})
	if err != nil {
		return false, fmt.Errorf("cannot finish eval item: %w", err)
	}
	return held, nil
}

// EvalRunActive reports whether the run has not ended (and still exists).
func (db *DB) EvalRunActive(ctx context.Context, runID string) (bool, error) {
	var ok bool
	err := db.Pool.QueryRow(ctx, `select exists (select 1 from eval_runs
		where id = $1 and status in ('queued', 'running'))`, runID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("cannot read eval run: %w", err)
	}
	return ok, nil
}

package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Errors of the eval queries. A suite the caller cannot see is ErrNotFound.
var (
	ErrEvalCaseNotFound = errors.New("eval case not found in the suite")
	ErrEvalRunNotFound  = errors.New("eval run not found")
	// ErrEvalSuiteFull refuses cases past MaxEvalCases.
	ErrEvalSuiteFull = errors.New("eval suite is full")
	// ErrEvalSuiteEmpty refuses a run of a suite without cases.
	ErrEvalSuiteEmpty = errors.New("eval suite has no cases")
	// ErrEvalRunMismatch refuses comparing runs of two suites.
	ErrEvalRunMismatch = errors.New("eval runs belong to different suites")
)

// MaxEvalCases bounds a suite's cases (and so a run's items per repeat).
const MaxEvalCases = 5000

// EvalOwner is who owns an eval resource: an organization and a workspace
// in it; an empty WorkspaceID is the organization's unassigned space.
type EvalOwner struct {
	OrgID       string
	WorkspaceID string
}

func (o EvalOwner) workspace() *string {
	if o.WorkspaceID == "" {
		return nil
	}
	return &o.WorkspaceID
}

// notFoundOn maps the errors of a query keyed by a client's id: no row and
// a malformed uuid are both the resource's not-found.
func notFoundOn(err, notFound error) error {
	if errors.Is(err, pgx.ErrNoRows) || pgErrCode(err) == "22P02" {
		return notFound
	}
	return err
}

// EvalSuite is a suite as the routes show it.
type EvalSuite struct {
	ID          string
	Name        string
	Slug        string
	Description string
	Tier        string
	CaseCount   int
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// EvalSuitePatch holds a suite's fields to set; nil leaves one unchanged.
type EvalSuitePatch struct {
	Name, Slug, Description, Tier *string
}

const suiteColumns = `id, name, slug, description, tier, case_count, created_at, updated_at`

func scanSuite(row pgx.Row) (EvalSuite, error) {
	var s EvalSuite
	err := row.Scan(&s.ID, &s.Name, &s.Slug, &s.Description, &s.Tier, &s.CaseCount, &s.CreatedAt, &s.UpdatedAt)
	return s, err
}

func suiteWriteError(op string, err error) error {
	switch pgErrCode(err) {
	case "23505":
		return fmt.Errorf("cannot %s eval suite: slug %w", op, ErrConflict)
	case "23514":
		return fmt.Errorf("cannot %s eval suite: %w", op, ErrInvalid)
	}
	if err != nil {
		return fmt.Errorf("cannot %s eval suite: %w", op, notFoundOn(err, ErrNotFound))
	}
	return nil
}

// CreateEvalSuite creates a suite. The caller derives and checks the slug.
func (db *DB) CreateEvalSuite(ctx context.Context, o EvalOwner, name, slug, description, tier string) (EvalSuite, error) {
	s, err := scanSuite(db.Pool.QueryRow(ctx, `insert into eval_suites (org_id, workspace_id, name, slug, description, tier)
		values ($1, $2, $3, $4, $5, $6) returning `+suiteColumns, o.OrgID, o.workspace(), name, slug, description, tier))
	return s, suiteWriteError("create", err)
}

// EvalSuite reads one suite.
func (db *DB) EvalSuite(ctx context.Context, o EvalOwner, id string) (EvalSuite, error) {
	s, err := scanSuite(db.Pool.QueryRow(ctx, `select `+suiteColumns+` from eval_suites
		where id = $1 and org_id = $2 and workspace_id is not distinct from $3`, id, o.OrgID, o.workspace()))
	if err != nil {
		return s, fmt.Errorf("cannot read eval suite: %w", notFoundOn(err, ErrNotFound))
	}
	return s, nil
}

// EvalPage is a keyset position: the last row's time and id.
type EvalPage struct {
	At time.Time
	ID string
}

// ListEvalSuites lists suites newest first, limit of them after page (nil
// for the first page).
func (db *DB) ListEvalSuites(ctx context.Context, o EvalOwner, limit int, after *EvalPage) ([]EvalSuite, error) {
	q := `select ` + suiteColumns + ` from eval_suites where org_id = $1 and workspace_id is not distinct from $2`
	args := []any{o.OrgID, o.workspace(), limit}
	if after != nil {
		q += ` and (created_at, id) < ($4, $5)`
		args = append(args, after.At, after.ID)
	}
	rows, err := db.Pool.Query(ctx, q+` order by created_at desc, id desc limit $3`, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot list eval suites: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EvalSuite, error) { return scanSuite(r) })
	if err != nil {
		return nil, fmt.Errorf("cannot list eval suites: %w", notFoundOn(err, ErrNotFound))
	}
	return out, nil
}

// UpdateEvalSuite sets the patch's fields.
func (db *DB) UpdateEvalSuite(ctx context.Context, o EvalOwner, id string, p EvalSuitePatch) (EvalSuite, error) {
	s, err := scanSuite(db.Pool.QueryRow(ctx, `update eval_suites set
			name = coalesce($4, name), slug = coalesce($5, slug),
			description = coalesce($6, description), tier = coalesce($7, tier), updated_at = now()
		where id = $1 and org_id = $2 and workspace_id is not distinct from $3
		returning `+suiteColumns, id, o.OrgID, o.workspace(), p.Name, p.Slug, p.Description, p.Tier))
	return s, suiteWriteError("update", err)
}

// DeleteEvalSuite deletes a suite with its cases, runs and results.
func (db *DB) DeleteEvalSuite(ctx context.Context, o EvalOwner, id string) error {
	tag, err := db.Pool.Exec(ctx, `delete from eval_suites
		where id = $1 and org_id = $2 and workspace_id is not distinct from $3`, id, o.OrgID, o.workspace())
	if err == nil && tag.RowsAffected() == 0 {
		err = ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("cannot delete eval suite: %w", notFoundOn(err, ErrNotFound))
	}
	return nil
}

// EvalCase is a stored case: its validated body, compacted JSON.
type EvalCase struct {
	ID        string
	SuiteID   string
	Body      json.RawMessage
	CreatedAt time.Time
	UpdatedAt time.Time
}

const caseColumns = `id, suite_id, body, created_at, updated_at`

func scanCase(row pgx.Row) (EvalCase, error) {
	var c EvalCase
	var body []byte
	err := row.Scan(&c.ID, &c.SuiteID, &body, &c.CreatedAt, &c.UpdatedAt)
	c.Body = body
	return c, err
}

// lockSuite locks the caller's suite row for the transaction.
func lockSuite(ctx context.Context, tx pgx.Tx, o EvalOwner, id string) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `select case_count from eval_suites
		where id = $1 and org_id = $2 and workspace_id is not distinct from $3 for update`,
		id, o.OrgID, o.workspace()).Scan(&n)
	return n, notFoundOn(err, ErrNotFound)
}

// CreateEvalCases adds cases to a suite in one transaction: all or none.
func (db *DB) CreateEvalCases(ctx context.Context, o EvalOwner, suiteID string, bodies [][]byte) ([]EvalCase, error) {
	var out []EvalCase
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		n, err := lockSuite(ctx, tx, o, suiteID)
		if err != nil {
			return err
		}
		if n+len(bodies) > MaxEvalCases {
			return ErrEvalSuiteFull
		}
		for _, b := range bodies {
			c, err := scanCase(tx.QueryRow(ctx, `insert into eval_cases (suite_id, body) values ($1, $2)
				returning `+caseColumns, suiteID, string(b)))
			if err != nil {
				return err
			}
			out = append(out, c)
		}
		_, err = tx.Exec(ctx, `update eval_suites set case_count = case_count + $2, updated_at = now() where id = $1`,
			suiteID, len(bodies))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot create eval cases: %w", err)
	}
	return out, nil
}

// suiteOwned is the clause that the case's suite is the caller's.
const suiteOwned = `exists (select 1 from eval_suites s where s.id = $1 and s.org_id = $2
	and s.workspace_id is not distinct from $3)`

// EvalCase reads one case of a suite.
func (db *DB) EvalCase(ctx context.Context, o EvalOwner, suiteID, caseID string) (EvalCase, error) {
	if _, err := db.EvalSuite(ctx, o, suiteID); err != nil {
		return EvalCase{}, err
	}
	c, err := scanCase(db.Pool.QueryRow(ctx, `select `+caseColumns+` from eval_cases
		where suite_id = $1 and id = $4 and `+suiteOwned, suiteID, o.OrgID, o.workspace(), caseID))
	if err != nil {
		return c, fmt.Errorf("cannot read eval case: %w", notFoundOn(err, ErrEvalCaseNotFound))
	}
	return c, nil
}

// ListEvalCases lists a suite's cases oldest first.
func (db *DB) ListEvalCases(ctx context.Context, o EvalOwner, suiteID string, limit int, after *EvalPage) ([]EvalCase, error) {
	if _, err := db.EvalSuite(ctx, o, suiteID); err != nil {
		return nil, err
	}
	q := `select ` + caseColumns + ` from eval_cases where suite_id = $1 and ` + suiteOwned
	args := []any{suiteID, o.OrgID, o.workspace(), limit}
	if after != nil {
		q += ` and (created_at, id) > ($5, $6)`
		args = append(args, after.At, after.ID)
	}
	rows, err := db.Pool.Query(ctx, q+` order by created_at, id limit $4`, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot list eval cases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EvalCase, error) { return scanCase(r) })
	if err != nil {
		return nil, fmt.Errorf("cannot list eval cases: %w", notFoundOn(err, ErrEvalCaseNotFound))
	}
	return out, nil
}

// UpdateEvalCase replaces a case's body.
func (db *DB) UpdateEvalCase(ctx context.Context, o EvalOwner, suiteID, caseID string, body []byte) (EvalCase, error) {
	if _, err := db.EvalSuite(ctx, o, suiteID); err != nil {
		return EvalCase{}, err
	}
	c, err := scanCase(db.Pool.QueryRow(ctx, `update eval_cases set body = $5, updated_at = now()
		where suite_id = $1 and id = $4 and `+suiteOwned+` returning `+caseColumns,
		suiteID, o.OrgID, o.workspace(), caseID, string(body)))
	if err != nil {
		return c, fmt.Errorf("cannot update eval case: %w", notFoundOn(err, ErrEvalCaseNotFound))
	}
	return c, nil
}

// DeleteEvalCase deletes a case. Runs keep their snapshot of it.
func (db *DB) DeleteEvalCase(ctx context.Context, o EvalOwner, suiteID, caseID string) error {
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := lockSuite(ctx, tx, o, suiteID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `delete from eval_cases where suite_id = $1 and id = $2`, suiteID, caseID)
		if err != nil {
			return notFoundOn(err, ErrEvalCaseNotFound)
		}
		if tag.RowsAffected() == 0 {
			return ErrEvalCaseNotFound
		}
		_, err = tx.Exec(ctx, `update eval_suites set case_count = case_count - 1, updated_at = now() where id = $1`, suiteID)
		return err
	})
	if err != nil {
		return fmt.Errorf("cannot delete eval case: %w", err)
	}
	return nil
}

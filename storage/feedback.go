package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Feedback is one stored report on a prior request.
type Feedback struct {
	RequestID string
	Type      string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Replaced says an earlier report of the same type was overwritten.
	Replaced bool
}

// PutFeedback stores payload (already validated JSON) as userID's feedback
// of type typ on requestID, replacing an earlier one of the same type. The
// request must be one of userID's rows in orgID's request log; otherwise,
// and for malformed ids, it returns ErrNotFound and writes nothing.
func (db *DB) PutFeedback(ctx context.Context, orgID, userID, requestID, typ string, payload []byte) (Feedback, error) {
	var user, org [16]byte
	if !parseUUID(&user, userID) || !parseUUID(&org, orgID) {
		return Feedback{}, ErrNotFound
	}
	f := Feedback{RequestID: requestID, Type: typ}
	var inserted bool
	err := db.Pool.QueryRow(ctx, `insert into feedback (org_id, user_id, request_id, type, payload)
select $1, $2, $3, $4, $5::jsonb
where exists (select 1 from request_log where request_id = $3 and user_id = $2 and org_id = $1)
on conflict (org_id, user_id, request_id, type)
do update set payload = excluded.payload, updated_at = now()
returning created_at, updated_at, xmax = 0`,
		pgtype.UUID{Bytes: org, Valid: true}, pgtype.UUID{Bytes: user, Valid: true}, requestID, typ, string(payload)).
		Scan(&f.CreatedAt, &f.UpdatedAt, &inserted)
	if errors.Is(err, pgx.ErrNoRows) {
		return Feedback{}, ErrNotFound
	}
	if err != nil {
		return Feedback{}, fmt.Errorf("cannot store feedback: %w", err)
	}
	f.CreatedAt, f.UpdatedAt, f.Replaced = f.CreatedAt.UTC(), f.UpdatedAt.UTC(), !inserted
	return f, nil
}

// FeedbackTypes lists the feedback types userID recorded in orgID for
// requestID, in name order; empty (never nil) when there are none.
func (db *DB) FeedbackTypes(ctx context.Context, orgID, userID, requestID string) ([]string, error) {
	var user, org [16]byte
	if !parseUUID(&user, userID) || !parseUUID(&org, orgID) {
		return []string{}, nil
	}
	rows, err := db.Pool.Query(ctx, `select type from feedback
where org_id = $1 and user_id = $2 and request_id = $3 order by type`,
		pgtype.UUID{Bytes: org, Valid: true}, pgtype.UUID{Bytes: user, Valid: true}, requestID)
	if err != nil {
		return nil, fmt.Errorf("cannot read feedback: %w", err)
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("cannot read feedback: %w", err)
	}
	if types == nil {
		types = []string{}
	}
	return types, nil
}

package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OutboxMessage is one message of the outbox. To is the recipient's address:
// for an invitation addressed by user id it is the account's e-mail, read at
// delivery time (never at invite time), and empty when no such account
// exists.
type OutboxMessage struct {
	ID            string  `json:"id"`
	Kind          string  `json:"kind"`
	OrgID         *string `json:"org_id"`
	InvitationID  *string `json:"invitation_id"`
	To            string  `json:"to"`
	Subject       string  `json:"subject"`
	Status        string  `json:"status"`
	Attempts      int     `json:"attempts"`
	NextAttemptAt string  `json:"next_attempt_at"`
	LastError     *string `json:"last_error"`
	CreatedAt     string  `json:"created_at"`
	SentAt        *string `json:"sent_at"`
	Text          string  `json:"-"`
	HTML          string  `json:"-"`
}

const outboxColumns = `x.id, x.kind, x.org_id::text, x.invitation_id::text,
	coalesce(x.to_email, (select email from users where id = x.to_user_id), ''), x.subject, x.status, x.attempts,
	x.next_attempt_at, x.last_error, x.created_at, x.sent_at, x.body_text, x.body_html`

func scanOutbox(row pgx.Row) (OutboxMessage, error) {
	var m OutboxMessage
	var next, created time.Time
	var sent *time.Time
	err := row.Scan(&m.ID, &m.Kind, &m.OrgID, &m.InvitationID, &m.To, &m.Subject, &m.Status, &m.Attempts,
		&next, &m.LastError, &created, &sent, &m.Text, &m.HTML)
	m.NextAttemptAt, m.CreatedAt, m.SentAt = timestamp(next), timestamp(created), optTimestamp(sent)
	return m, err
}

// ClaimOutbox leases up to n due messages for lease: they are not handed to
// another claimer until the lease passes, so a sender that crashes mid-send
// loses nothing (the message is sent again after the lease).
func (db *DB) ClaimOutbox(ctx context.Context, n int, lease time.Duration) ([]OutboxMessage, error) {
	rows, err := db.Pool.Query(ctx, `with due as (
			select id from outbox where status = 'pending' and next_attempt_at <= now()
				and (lease_until is null or lease_until <= now())
			order by next_attempt_at, id limit $1 for update skip locked)
		update outbox x set lease_until = now() + make_interval(secs => $2), attempts = x.attempts + 1
		from due where x.id = due.id
		returning `+outboxColumns, n, lease.Seconds())
	if err != nil {
		return nil, fmt.Errorf("cannot claim outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxMessage
	for rows.Next() {
		m, err := scanOutbox(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot claim outbox: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot claim outbox: %w", err)
	}
	return out, nil
}

// OutboxSent records a delivered message.
func (db *DB) OutboxSent(ctx context.Context, id string) error {
	_, err := db.Pool.Exec(ctx, `update outbox set status = 'sent', sent_at = now(), lease_until = null, last_error = null
		where id = $1`, id)
	if err != nil {
		return fmt.Errorf("cannot record delivery: %w", err)
	}
	return nil
}

// OutboxRetry records a failed attempt to be retried at next.
func (db *DB) OutboxRetry(ctx context.Context, id, reason string, next time.Time) error {
	_, err := db.Pool.Exec(ctx, `update outbox set next_attempt_at = $2, lease_until = null, last_error = $3
		where id = $1 and status = 'pending'`, id, next, reason)
	if err != nil {
		return fmt.Errorf("cannot record delivery attempt: %w", err)
	}
	return nil
}

// OutboxFailed records a permanent delivery failure.
func (db *DB) OutboxFailed(ctx context.Context, id, reason string) error {
	_, err := db.Pool.Exec(ctx, `update outbox set status = 'failed', lease_until = null, last_error = $2
		where id = $1 and status = 'pending'`, id, reason)
	if err != nil {
		return fmt.Errorf("cannot record delivery failure: %w", err)
	}
	return nil
}

// ListOutbox lists messages, newest first; status filters when set.
func (db *DB) ListOutbox(ctx context.Context, orgID, status string, limit int) ([]OutboxMessage, error) {
	rows, err := db.Pool.Query(ctx, `select `+outboxColumns+` from outbox x
		where ($1 = '' or x.org_id::text = $1) and ($2 = '' or x.status = $2)
		order by x.created_at desc, x.id limit $3`, orgID, status, limit)
	if err != nil {
		return nil, fmt.Errorf("cannot list outbox: %w", err)
	}
	defer rows.Close()
	out := []OutboxMessage{}
	for rows.Next() {
		m, err := scanOutbox(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot list outbox: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot list outbox: %w", err)
	}
	return out, nil
}

// RetryOutbox puts a failed (or waiting) message back to be sent now. A
// message already sent is ErrConflict; an unknown id is ErrNotFound.
func (db *DB) RetryOutbox(ctx context.Context, id string) (OutboxMessage, error) {
	if !ValidUUID(id) {
		return OutboxMessage{}, ErrNotFound
	}
	m, err := scanOutbox(db.Pool.QueryRow(ctx, `update outbox x set status = 'pending', next_attempt_at = now(),
			lease_until = null, attempts = 0
		where x.id = $1 and x.status <> 'sent' returning `+outboxColumns, id))
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := db.Pool.QueryRow(ctx, `select exists (select 1 from outbox where id = $1)`, id).Scan(&exists); err != nil {
			return OutboxMessage{}, fmt.Errorf("cannot retry message: %w", err)
		}
		if exists {
			return OutboxMessage{}, fmt.Errorf("cannot retry message: already sent: %w", ErrConflict)
		}
		return OutboxMessage{}, ErrNotFound
	}
	if err != nil {
		return OutboxMessage{}, fmt.Errorf("cannot retry message: %w", err)
	}
	return m, nil
}

package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// retentionLockKey is the PostgreSQL advisory lock held while a batch of
// expired conversations is deleted, so that of several gateway processes
// one deletes at a time. The value spells "gwretent".
const retentionLockKey int64 = 0x6777726574656e74

// DeleteExpiredConversations deletes the conversations whose retention
// deadline is at or before now, with their messages, in batches of at most
// batch conversations, and the Idempotency-Key replays older than
// AppendReplayTTL. Each batch is one transaction under a transaction-level
// advisory lock; when another process holds it, this one stops and reports
// ran false (the other is doing the work). A conversation being appended
// to is skipped, not waited for: the append moves its deadline anyway.
// Every deletion is recorded, like one through the API, without a request
// id.
func (db *DB) DeleteExpiredConversations(ctx context.Context, now time.Time, batch int) (deleted int, ran bool, err error) {
	if batch < 1 {
		return 0, false, fmt.Errorf("cannot delete expired conversations: batch must be at least 1")
	}
	for first := true; ; first = false {
		var n int64
		var locked bool
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock($1)`, retentionLockKey).Scan(&locked); err != nil {
				return err
			}
			if !locked {
				return nil
			}
			if first {
				if _, err := tx.Exec(ctx, `delete from conversation_appends where created_at <= $1::timestamptz - $2::interval`,
					now, AppendReplayTTL); err != nil {
					return err
				}
			}
			tag, err := tx.Exec(ctx, `delete from conversations where id in (
					select id from conversations where retention_until <= $1
					order by retention_until limit $2 for update skip locked)
				and retention_until <= $1`, now, batch)
			if err != nil {
				return err
			}
			n = tag.RowsAffected()
			return nil
		})
		if err != nil {
			return deleted, ran, fmt.Errorf("cannot delete expired conversations: %w", err)
		}
		if !locked {
			return deleted, ran, nil
		}
		ran = true
		deleted += int(n)
		if n < int64(batch) {
			return deleted, true, nil
		}
	}
}

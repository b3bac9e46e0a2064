package storage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// mendLockKey is the PostgreSQL advisory lock held while mending, so that
// of several processes one works at a time. The value spells "gwmend!!".
const mendLockKey int64 = 0x67776d656e642121

// mendFlag names the maintenance_flags row that says a mend is due.
const mendFlag = "mend_after_older_processes"

// MendAfterOlderProcesses repairs what a process of a release from before
// schema version 15 may leave behind when it shares the database with
// newer ones: it attaches files without locking them and grants vault
// access without locking the membership, so a file can be deleted under a
// message that lists it, and a grant can outlive its member's removal.
// While such a process is connected (its key listener says so) nothing is
// mended and the mend is marked due; once none is, the due mend runs once:
// messages stop listing files deleted or gone, and grants of users who are
// no longer members end (a vault's owner keeps theirs, as on removal).
// Migration 15 marks it due, for what older processes did before it.
func (db *DB) MendAfterOlderProcesses(ctx context.Context) (mended bool, err error) {
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock($1)`, mendLockKey).Scan(&locked); err != nil || !locked {
			return err
		}
		var older int
		if err := tx.QueryRow(ctx, `select count(*) from pg_stat_activity
			where datname = current_database() and application_name = $1`, LegacyListenerApplicationName).Scan(&older); err != nil {
			return err
		}
		if older > 0 {
			_, err := tx.Exec(ctx, `insert into maintenance_flags (name) values ($1) on conflict do nothing`, mendFlag)
			return err
		}
		tag, err := tx.Exec(ctx, `delete from maintenance_flags where name = $1`, mendFlag)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, `update conversation_messages m
			set file_ids = array(select x from unnest(m.file_ids) with ordinality as u(x, n)
			                     where exists (select 1 from files f where f.id::text = x and f.state <> 'deleted')
			                     order by n)
			where cardinality(m.file_ids) > 0
			  and exists (select 1 from unnest(m.file_ids) x
			              where not exists (select 1 from files f where f.id::text = x and f.state <> 'deleted'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `delete from vault_members m using vaults v
			where m.vault_id = v.id and v.owner_id is distinct from m.user_id
			  and not exists (select 1 from memberships ms where ms.org_id = v.org_id and ms.user_id = m.user_id)`); err != nil {
			return err
		}
		mended = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("cannot mend after older processes: %w", err)
	}
	return mended, nil
}

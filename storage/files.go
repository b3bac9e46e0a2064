package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edgegw/gateway/hotpath"
)

// ErrFileTooLarge is a file store's answer to bytes past the limit of a
// Put: nothing was kept.
var ErrFileTooLarge = errors.New("file exceeds the byte limit")

// FileStore keeps the bytes of uploaded files under opaque keys. Every
// gateway process of a fleet reads the same store. Two implementations
// pass one contract suite (storage/filestoretest): PGFileStore, the
// embedded default, and S3FileStore.
type FileStore interface {
	// Put reads r to its end and keeps the bytes under key. More than
	// limit bytes is ErrFileTooLarge; on any error nothing is kept under
	// key. It returns the bytes kept.
	Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error)
	// Open reads the bytes under key; ErrNotFound when there are none.
	// The reader is the caller's to close and may outlive ctx's request
	// but not ctx.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes the bytes under key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// File is a file's record.
type File struct {
	ID          string
	OrgID       string
	UserID      string
	Filename    string
	Bytes       int64
	ContentType string
	Purpose     string
	TextStatus  string
	TextReason  *string
	TextTokens  int
	Pages       *int
	StoreKey    string
	CreatedAt   time.Time
	ExpiresAt   *time.Time
}

// NewFile is a file about to be stored: its record and the text read from
// it.
type NewFile struct {
	OrgID, UserID        string
	Filename             string
	Bytes                int64
	ContentType, Purpose string
	TextStatus           string
	TextReason           *string
	TextTokens           int
	Text                 *string
	Pages                *int
	StoreKey             string
	CreatedAt            time.Time
	ExpiresAt            *time.Time
}

// FileKey is the keyset position of a file in its owner's listing.
type FileKey struct {
	CreatedAt time.Time
	ID        string
}

// PendingFileTTL is how long an upload may stay pending (its bytes being
// written) before the janitor takes it for abandoned.
const PendingFileTTL = time.Hour

const fileColumns = `id, org_id, user_id, filename, bytes, content_type, purpose, text_status, text_reason,
	text_tokens, pages, store_key, created_at, expires_at`

// fileVisible is the condition of a file its owner can read at $now: ready,
// not deleted, not expired, and not a chat attachment whose conversations
// have all passed their retention deadline: those go with them (the
// release trigger deletes it when the retention job deletes the last), and
// a conversation past its deadline is gone for the API at once. $1 is the
// user, $2 the organization, $3 now.
const fileVisible = ` from files where user_id = $1 and org_id = $2 and state = 'ready'
	and (expires_at is null or expires_at > $3)
	and (purpose <> 'chat_attachment'
		or coalesce((select bool_or(c.retention_until > $3) from conversation_messages m
			join conversations c on c.id = m.conversation_id
			where cardinality(m.file_ids) > 0 and m.file_ids @> array[files.id::text]), true))`

func scanFile(row pgx.Row) (File, error) {
	var f File
	err := row.Scan(&f.ID, &f.OrgID, &f.UserID, &f.Filename, &f.Bytes, &f.ContentType, &f.Purpose, &f.TextStatus,
		&f.TextReason, &f.TextTokens, &f.Pages, &f.StoreKey, &f.CreatedAt, &f.ExpiresAt)
	return f, err
}

// CreateFile records a file whose bytes are about to be written: pending,
// invisible to every read until ReadyFile.
func (db *DB) CreateFile(ctx context.Context, n NewFile) (File, error) {
	f, err := scanFile(db.Pool.QueryRow(ctx, `insert into files
			(org_id, user_id, filename, bytes, content_type, purpose, state, text_status, text_reason, text_tokens,
			 text, pages, store_key, created_at, expires_at)
		values ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $9, $10, $11, $12, $13, $14)
		returning `+fileColumns,
		n.OrgID, n.UserID, n.Filename, n.Bytes, n.ContentType, n.Purpose, n.TextStatus, n.TextReason, n.TextTokens,
		n.Text, n.Pages, n.StoreKey, n.CreatedAt, n.ExpiresAt))
	if err != nil {
		return File{}, fmt.Errorf("cannot record file: %w", err)
	}
	return f, nil
}

// ReadyFile makes a pending file readable once its bytes are stored.
func (db *DB) ReadyFile(ctx context.Context, id string) error {
	tag, err := db.Pool.Exec(ctx, `update files set state = 'ready' where id = $1 and state = 'pending'`, id)
	if err != nil {
		return fmt.Errorf("cannot mark file ready: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return ErrNotFound
	}
	return nil
}

// DropPendingFile deletes the record of an upload that failed before its
// bytes were stored.
func (db *DB) DropPendingFile(ctx context.Context, id string) error {
	if _, err := db.Pool.Exec(ctx, `delete from files where id = $1 and state = 'pending'`, id); err != nil {
		return fmt.Errorf("cannot drop pending file: %w", err)
	}
	return nil
}

// GetFile reads one file its owner can read at now, or ErrNotFound: a
// malformed id, another user's or organization's file, a deleted or an
// expired one all answer the same.
func (db *DB) GetFile(ctx context.Context, userID, orgID, id string, now time.Time) (File, error) {
	if !ValidUUID(id) {
		return File{}, ErrNotFound
	}
	f, err := scanFile(db.Pool.QueryRow(ctx, `select `+fileColumns+fileVisible+` and id = $4`, userID, orgID, now, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return File{}, ErrNotFound
	}
	if err != nil {
		return File{}, fmt.Errorf("cannot read file: %w", err)
	}
	return f, nil
}

// ListFiles lists the caller's readable files, newest first, at most limit,
// starting after the key (nil for the first page). more reports whether
// another page follows.
func (db *DB) ListFiles(ctx context.Context, userID, orgID string, now time.Time, after *FileKey, limit int) (out []File, more bool, err error) {
	out = []File{}
	if after != nil && !ValidUUID(after.ID) {
		return nil, false, ErrBadCursor
	}
	var afterAt *time.Time
	var afterID *string
	if after != nil {
		afterAt, afterID = &after.CreatedAt, &after.ID
	}
	rows, err := db.Pool.Query(ctx, `select `+fileColumns+fileVisible+`
			and ($4::timestamptz is null or (created_at, id) < ($4, $5::uuid))
		order by created_at desc, id desc limit $6`, userID, orgID, now, afterAt, afterID, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("cannot list files: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, false, fmt.Errorf("cannot list files: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("cannot list files: %w", err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// DeleteFile deletes a file its owner can read at now: gone to every read
// at once and detached from every message that listed it, in one
// transaction; the janitor deletes the bytes. ErrNotFound as GetFile.
func (db *DB) DeleteFile(ctx context.Context, userID, orgID, id string, now time.Time) error {
	if !ValidUUID(id) {
		return ErrNotFound
	}
	return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update files set state = 'deleted', deleted_at = $3
			where user_id = $1 and org_id = $2 and state = 'ready' and (expires_at is null or expires_at > $3) and id = $4`,
			userID, orgID, now, id)
		if err != nil {
			return fmt.Errorf("cannot delete file: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return detachFile(ctx, tx, id)
	})
}

// detachFile removes a file's id from every message that lists it.
func detachFile(ctx context.Context, tx pgx.Tx, id string) error {
	if _, err := tx.Exec(ctx, `update conversation_messages set file_ids = array_remove(file_ids, $1)
		where cardinality(file_ids) > 0 and file_ids @> array[$1]`, id); err != nil {
		return fmt.Errorf("cannot detach file from messages: %w", err)
	}
	return nil
}

// FileMissingError names the first file id of a message that is not a
// file of the author's readable at the time of the append.
type FileMissingError struct{ ID string }

func (e *FileMissingError) Error() string { return "file " + e.ID + " not found" }

// MissingFile returns the first of ids that is not a file userID may read
// in orgID at now, or "" when every one is.
func (db *DB) MissingFile(ctx context.Context, userID, orgID string, ids []string, now time.Time) (string, error) {
	return missingFile(ctx, db.Pool, userID, orgID, ids, now, false)
}

// missingFile is MissingFile on q. With lock, the files found stay locked
// FOR SHARE until q's transaction ends: a message that attaches them then
// commits before any deletion of theirs (DeleteFile, or the trigger of a
// conversation's deletion, both of which lock the row first) can look
// for it, and a file whose deletion is in flight is waited for and then
// missing.
func missingFile(ctx context.Context, q convQuerier, userID, orgID string, ids []string, now time.Time, lock bool) (string, error) {
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if !ValidUUID(id) {
			return id, nil
		}
		valid = append(valid, id)
	}
	if len(valid) == 0 {
		return "", nil
	}
	sql := `select id::text` + fileVisible + ` and id = any($4::uuid[])`
	if lock {
		sql += ` order by id for share`
	}
	rows, err := q.Query(ctx, sql, userID, orgID, now, valid)
	if err != nil {
		return "", fmt.Errorf("cannot check files: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("cannot check files: %w", err)
	}
	have := make(map[string]bool, len(found))
	for _, id := range found {
		have[id] = true
	}
	for _, id := range valid {
		if !have[canonicalUUID(id)] {
			return id, nil
		}
	}
	return "", nil
}

// Files joins the file records with the store that holds their bytes: it
// is chat's hotpath.FileSource.
type Files struct {
	DB    *DB
	Store FileStore
	// Now is the clock reads are judged by; nil is time.Now.
	Now func() time.Time
}

var _ hotpath.FileSource = (*Files)(nil)

func (fs *Files) now() time.Time {
	if fs.Now != nil {
		return fs.Now()
	}
	return time.Now()
}

// Attachments implements hotpath.FileSource.
func (fs *Files) Attachments(ctx context.Context, orgID, userID string, ids []string, maxImageBytes int64) ([]hotpath.AttachedFile, error) {
	for _, id := range ids {
		if !ValidUUID(id) {
			return nil, &hotpath.FileMissingError{ID: id}
		}
	}
	rows, err := fs.DB.Pool.Query(ctx, `select id::text, filename, content_type, bytes, coalesce(pages, 0), text_status,
			coalesce(text_reason, ''), text_tokens, coalesce(text, ''), store_key`+fileVisible+` and id = any($4::uuid[])`,
		userID, orgID, fs.now(), ids)
	if err != nil {
		return nil, fmt.Errorf("cannot read attached files: %w", err)
	}
	byID := make(map[string]*hotpath.AttachedFile, len(ids))
	keys := make(map[string]string, len(ids))
	for rows.Next() {
		var f hotpath.AttachedFile
		var key string
		if err := rows.Scan(&f.ID, &f.Filename, &f.ContentType, &f.Bytes, &f.Pages, &f.TextStatus, &f.Reason,
			&f.TextTokens, &f.Text, &key); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cannot read attached files: %w", err)
		}
		byID[f.ID], keys[f.ID] = &f, key
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read attached files: %w", err)
	}
	out := make([]hotpath.AttachedFile, 0, len(ids))
	for _, id := range ids {
		f, ok := byID[canonicalUUID(id)]
		if !ok {
			return nil, &hotpath.FileMissingError{ID: id}
		}
		if f.TextStatus == hotpath.FileTextImage && f.Bytes <= maxImageBytes {
			data, err := fs.read(ctx, keys[f.ID], maxImageBytes)
			if err != nil {
				return nil, err
			}
			f.Data = data
		}
		out = append(out, *f)
	}
	return out, nil
}

func (fs *Files) read(ctx context.Context, key string, limit int64) ([]byte, error) {
	r, err := fs.Store.Open(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("cannot read file bytes: %w", err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read file bytes: %w", err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("cannot read file bytes: %w", ErrFileTooLarge)
	}
	return data, nil
}

// filesLockKey is the PostgreSQL advisory lock held while the janitor
// deletes files, so that of several gateway processes one works at a time.
// The value spells "gwfiles!".
const filesLockKey int64 = 0x677766696c657321

// SweepFiles deletes, in batches of at most batch, the bytes and then the
// records of files deleted, expired at or before now, or pending (an
// upload abandoned) for longer than PendingFileTTL; an expired file is
// detached from the messages that listed it. Each batch is one transaction
// under a transaction-level advisory lock; when another process holds it,
// this one stops and reports ran false. Bytes whose deletion fails keep
// their record for the next sweep.
func (fs *Files) SweepFiles(ctx context.Context, now time.Time, batch int) (deleted int, ran bool, err error) {
	if batch < 1 {
		return 0, false, fmt.Errorf("cannot sweep files: batch must be at least 1")
	}
	for {
		var n int
		var locked bool
		err := pgx.BeginFunc(ctx, fs.DB.Pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock($1)`, filesLockKey).Scan(&locked); err != nil {
				return err
			}
			if !locked {
				return nil
			}
			rows, err := tx.Query(ctx, `select id::text, store_key, state from files
				where state = 'deleted'
				   or (state = 'ready' and expires_at <= $1)
				   or (state = 'pending' and created_at <= $1::timestamptz - $2::interval)
				limit $3 for update skip locked`, now, PendingFileTTL, batch)
			if err != nil {
				return err
			}
			type doomed struct{ id, key, state string }
			var list []doomed
			for rows.Next() {
				var d doomed
				if err := rows.Scan(&d.id, &d.key, &d.state); err != nil {
					rows.Close()
					return err
				}
				list = append(list, d)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			for _, d := range list {
				if err := fs.Store.Delete(ctx, d.key); err != nil {
					return fmt.Errorf("cannot delete file bytes: %w", err)
				}
				// A deleted file was detached when it was deleted; detaching
				// it again costs one index probe and mends messages that an
				// append racing the deletion attached it to before appends
				// locked the files they attach.
				if err := detachFile(ctx, tx, d.id); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `delete from files where id = $1`, d.id); err != nil {
					return err
				}
			}
			n = len(list)
			return nil
		})
		if err != nil {
			return deleted, ran, fmt.Errorf("cannot sweep files: %w", err)
		}
		if !locked {
			return deleted, ran, nil
		}
		ran = true
		deleted += n
		if n < batch {
			return deleted, ran, nil
		}
	}
}

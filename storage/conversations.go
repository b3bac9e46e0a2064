package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ConversationRetention is how long a conversation lives after its last
// activity (its creation or its latest append) before the retention job
// deletes it with its messages.
const ConversationRetention = 365 * 24 * time.Hour

// Errors of the conversation queries; control maps each to its code.
// ErrNotFound stands for a conversation the caller cannot see, which is
// every conversation of another author, organization or unreadable vault.
var (
	// ErrConversationReadOnly: the caller sees the conversation but may not
	// write it (it is held in a vault the caller may read but not write).
	ErrConversationReadOnly = errors.New("conversation is read-only for the caller")
	// ErrMessageNotFound: the message id names no message of the conversation.
	ErrMessageNotFound = errors.New("message not found in the conversation")
	// ErrVaultNotFound: the vault is missing, another organization's, or one
	// the caller does not participate in.
	ErrVaultNotFound = errors.New("vault not found")
	// ErrVaultForbidden: the caller participates in the vault without the
	// grants the operation needs.
	ErrVaultForbidden = errors.New("vault grant does not allow this")
	// ErrBadCursor: a page cursor that does not belong to this conversation.
	ErrBadCursor = errors.New("cursor does not belong to this conversation")
	// ErrAppendKeyReused: an Idempotency-Key used before on the
	// conversation with a different request.
	ErrAppendKeyReused = errors.New("idempotency key was used with a different request")
)

// MessageRefError refuses an append whose parent_id or expected_leaf is not
// a message of the conversation.
type MessageRefError struct {
	// Field is "parent_id" or "expected_leaf".
	Field string
}

func (e *MessageRefError) Error() string {
	return e.Field + ": not a message of this conversation"
}

// Conversation is a conversation as its author sees it.
type Conversation struct {
	ID      string
	OrgID   string
	UserID  string
	Title   *string
	Model   *string
	VaultID *string
	Source  string
	// Meta is the compact JSON object text as stored, or nil.
	Meta       []byte
	ArchivedAt *time.Time
	// ActiveLeafMessageID is nil while the conversation is one chain.
	ActiveLeafMessageID *string
	// MessageCount is the number of messages, which is also the last
	// sequence number.
	MessageCount   int
	CreatedAt      time.Time
	UpdatedAt      time.Time
	RetentionUntil time.Time
	// CanWrite is the caller's write permission: false only when the
	// conversation is held in a vault the caller may read but not write.
	CanWrite bool
}

// NewConversation is what a create request may set.
type NewConversation struct {
	Title   *string
	Model   *string
	VaultID *string
	// Source is chat, cli or agent. Required.
	Source string
	// Meta is a compact JSON object, or nil.
	Meta []byte
}

// ConversationPatch is an update: only the fields marked Set change; a Set
// field with a nil value is cleared.
type ConversationPatch struct {
	SetTitle bool
	Title    *string
	SetModel bool
	Model    *string
}

// ConversationFilter selects the conversations a list shows.
type ConversationFilter struct {
	// Source is chat, cli or agent.
	Source string
	// Archived selects the archived shelf instead of the live list.
	Archived bool
	// VaultID, when set, keeps only the conversations held in that vault.
	VaultID *string
}

// ConversationKey is a position in the list: the last conversation of a
// page. The next page starts after it.
type ConversationKey struct {
	UpdatedAt time.Time
	ID        string
}

// convColumns are the columns scanConversation reads, in order, followed by
// the caller's write permission.
const convColumns = `c.id, c.org_id, c.user_id, c.title, c.model, c.vault_id, c.source, c.meta::text,
	c.archived_at, c.active_leaf_message_id, c.message_count, c.created_at, c.updated_at, c.retention_until`

// convCanWrite is the caller's write permission over a row of convVisible.
const convCanWrite = `(c.vault_id is null or coalesce(g.can_write, false))`

// convVisible is the FROM and WHERE of every read: the conversations of
// author $1 in organization $2 that are not held in a vault the author can
// no longer read and whose retention deadline has not passed. Past its
// deadline a conversation is deleted for the API at once, though the
// retention job removes its rows only at its next run.
const convVisible = ` from conversations c
	left join vault_grants g on g.vault_id = c.vault_id and g.user_id = c.user_id and g.org_id = c.org_id
	where c.user_id = $1 and c.org_id = $2 and (c.vault_id is null or coalesce(g.can_read, false))
		and c.retention_until > now()`

func scanConversation(row pgx.Row, withPermission bool) (Conversation, error) {
	var c Conversation
	var meta *string
	dst := []any{&c.ID, &c.OrgID, &c.UserID, &c.Title, &c.Model, &c.VaultID, &c.Source, &meta,
		&c.ArchivedAt, &c.ActiveLeafMessageID, &c.MessageCount, &c.CreatedAt, &c.UpdatedAt, &c.RetentionUntil}
	if withPermission {
		dst = append(dst, &c.CanWrite)
	}
	if err := row.Scan(dst...); err != nil {
		return Conversation{}, err
	}
	if meta != nil {
		c.Meta = []byte(*meta)
	}
	return c, nil
}

// ValidUUID reports whether s is a UUID in its canonical textual form, so
// that a malformed id is answered as a missing one before it reaches the
// database.
func ValidUUID(s string) bool {
	var b [16]byte
	return parseUUID(&b, s)
}

// CanonUUID reports whether *s is a UUID and, when it is, rewrites it as
// PostgreSQL prints a uuid (lower case). A client may send an id in any
// case and PostgreSQL matches it either way, but an id compared in Go (the
// vault's owner, a member's role read into a map, a conversation's current
// leaf) or hashed (an idempotent request, a cursor's filters) must be in
// the form the database reads back, or an upper-case id names the same row
// while escaping the check. Routes canonicalize the ids they take where
// they parse them.
func CanonUUID(s *string) bool {
	if !ValidUUID(*s) {
		return false
	}
	if strings.ContainsAny(*s, "ABCDEF") {
		*s = canonicalUUID(*s)
	}
	return true
}

// canonicalUUID is id as PostgreSQL prints a uuid: lower case.
func canonicalUUID(id string) string {
	b := []byte(id)
	for i, c := range b {
		if c >= 'A' && c <= 'F' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// CreateConversation creates a conversation of userID in orgID. A vault
// needs the author's read and write grants on it: without a membership (or
// in another organization, or held) it is ErrVaultNotFound, with a
// membership that lacks either grant ErrVaultForbidden.
func (db *DB) CreateConversation(ctx context.Context, userID, orgID string, n NewConversation) (Conversation, error) {
	if n.VaultID != nil {
		// The caller's standing as every vault route reads it: a held
		// member is no member at all.
		a, err := loadVault(ctx, db.Pool, orgID, userID, *n.VaultID, false)
		if err != nil {
			return Conversation{}, err
		}
		if !a.member || a.held {
			return Conversation{}, ErrVaultNotFound
		}
		if !a.flags.CanRead || !a.flags.CanWrite {
			return Conversation{}, ErrVaultForbidden
		}
	}
	var meta *string
	if n.Meta != nil {
		s := string(n.Meta)
		meta = &s
	}
	row := db.Pool.QueryRow(ctx, `insert into conversations as c
			(org_id, user_id, vault_id, title, model, source, meta, retention_until)
		values ($1, $2, $3, $4, $5, $6, $7::json, now() + $8::interval)
		returning `+convColumns, orgID, userID, n.VaultID, n.Title, n.Model, n.Source, meta, ConversationRetention)
	c, err := scanConversation(row, false)
	if pgErrCode(err) == "23503" { // the vault went away meanwhile
		return Conversation{}, ErrVaultNotFound
	}
	if err != nil {
		return Conversation{}, fmt.Errorf("cannot create conversation: %w", err)
	}
	c.CanWrite = true
	return c, nil
}

// GetConversation reads one conversation the caller can see, or ErrNotFound.
func (db *DB) GetConversation(ctx context.Context, userID, orgID, id string) (Conversation, error) {
	return getConversation(ctx, db.Pool, userID, orgID, id, false)
}

// getConversation reads (and with lock, locks for the transaction) one
// visible conversation.
func getConversation(ctx context.Context, q convQuerier, userID, orgID, id string, lock bool) (Conversation, error) {
	if !ValidUUID(id) {
		return Conversation{}, ErrNotFound
	}
	sql := `select ` + convColumns + `, ` + convCanWrite + convVisible + ` and c.id = $3`
	if lock {
		sql += ` for update of c`
	}
	c, err := scanConversation(q.QueryRow(ctx, sql, userID, orgID, id), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return Conversation{}, ErrNotFound
	}
	if err != nil {
		return Conversation{}, fmt.Errorf("cannot read conversation: %w", err)
	}
	return c, nil
}

// lockWritable locks a visible conversation for the transaction and checks
// the caller may write it.
func lockWritable(ctx context.Context, tx pgx.Tx, userID, orgID, id string) (Conversation, error) {
	c, err := getConversation(ctx, tx, userID, orgID, id, true)
	if err != nil {
		return Conversation{}, err
	}
	if !c.CanWrite {
		return Conversation{}, ErrConversationReadOnly
	}
	return c, nil
}

// convQuerier is what both the pool and a transaction offer.
type convQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ListConversations lists the caller's visible conversations matching f,
// most recently active first, at most limit of them, starting after the
// key (nil for the first page). more reports whether another page follows.
func (db *DB) ListConversations(ctx context.Context, userID, orgID string, f ConversationFilter, after *ConversationKey, limit int) (out []Conversation, more bool, err error) {
	out = []Conversation{}
	if f.VaultID != nil && !ValidUUID(*f.VaultID) {
		return out, false, nil // a vault that cannot exist matches nothing
	}
	if after != nil && !ValidUUID(after.ID) {
		return nil, false, ErrBadCursor
	}
	var afterAt *time.Time
	var afterID *string
	if after != nil {
		afterAt, afterID = &after.UpdatedAt, &after.ID
	}
	rows, err := db.Pool.Query(ctx, `select `+convColumns+`, `+convCanWrite+convVisible+`
			and c.source = $3 and (c.archived_at is not null) = $4
			and ($5::uuid is null or c.vault_id = $5)
			and ($6::timestamptz is null or (c.updated_at, c.id) < ($6, $7::uuid))
		order by c.updated_at desc, c.id desc
		limit $8`, userID, orgID, f.Source, f.Archived, f.VaultID, afterAt, afterID, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("cannot list conversations: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		c, err := scanConversation(rows, true)
		if err != nil {
			return nil, false, fmt.Errorf("cannot list conversations: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("cannot list conversations: %w", err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// UpdateConversation applies a patch to the title and model. It is not
// activity: updated_at and retention_until stay where they are.
func (db *DB) UpdateConversation(ctx context.Context, userID, orgID, id string, p ConversationPatch) (Conversation, error) {
	var out Conversation
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := lockWritable(ctx, tx, userID, orgID, id); err != nil {
			return err
		}
		row := tx.QueryRow(ctx, `update conversations c set
				title = case when $2 then $3 else c.title end,
				model = case when $4 then $5 else c.model end
			where c.id = $1 returning `+convColumns, id, p.SetTitle, p.Title, p.SetModel, p.Model)
		var err error
		if out, err = scanConversation(row, false); err != nil {
			return fmt.Errorf("cannot update conversation: %w", err)
		}
		out.CanWrite = true
		return nil
	})
	return out, err
}

// SetConversationArchived archives or restores a conversation. Both are
// idempotent; archiving again keeps the first archive instant. Neither is
// activity.
func (db *DB) SetConversationArchived(ctx context.Context, userID, orgID, id string, archived bool) error {
	return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := lockWritable(ctx, tx, userID, orgID, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update conversations set archived_at = case when $2 then coalesce(archived_at, now()) end
			where id = $1`, id, archived); err != nil {
			return fmt.Errorf("cannot archive conversation: %w", err)
		}
		return nil
	})
}

// DeleteConversation deletes a conversation and every message of it at
// once. The deletion is recorded (by a trigger, whatever deletes a
// conversation) as metadata only, with requestID.
func (db *DB) DeleteConversation(ctx context.Context, userID, orgID, id, requestID string) error {
	return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := lockWritable(ctx, tx, userID, orgID, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `select set_config('gw.request_id', $1, true)`, requestID); err != nil {
			return fmt.Errorf("cannot delete conversation: %w", err)
		}
		if _, err := tx.Exec(ctx, `delete from conversations where id = $1`, id); err != nil {
			return fmt.Errorf("cannot delete conversation: %w", err)
		}
		return nil
	})
}

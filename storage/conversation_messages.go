package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AppendReplayTTL is how long an append's Idempotency-Key replays its
// stored response.
const AppendReplayTTL = 24 * time.Hour

// Message is a stored conversation message.
type Message struct {
	ID             string
	ConversationID string
	// ParentID is nil for a root.
	ParentID *string
	Sequence int
	Role     string
	Content  string
	Status   string
	// ToolCalls is the JSON array text as stored, or nil.
	ToolCalls  []byte
	ToolCallID *string
	// FileIDs are in the order sent; never nil.
	FileIDs []string
	// SiblingIDs are the other children of the parent (for a root, the
	// other roots), oldest first; never nil.
	SiblingIDs []string
	CreatedAt  time.Time
}

// NewMessage is an append.
type NewMessage struct {
	Role    string
	Content string
	Status  string
	// ToolCalls is a compact JSON array, or nil.
	ToolCalls []byte
	// ToolCallID is set on tool messages only.
	ToolCallID *string
	FileIDs    []string
	// FilesAt is the instant FileIDs are checked at: each must name a file
	// of the author's in the organization, readable then (not deleted or
	// expired); otherwise the append is a *FileMissingError.
	FilesAt time.Time
	// ParentID answers that message instead of the current leaf.
	ParentID *string
	// Root makes the message a new root beside the first message.
	Root bool
	// ExpectedLeaf is the leaf the client believes is current: when it is
	// stale the message is stored but the leaf does not move.
	ExpectedLeaf *string
	// Title names the conversation while its title is null; "" leaves it.
	// Only a user message names a conversation.
	Title string
}

// AppendResult is what an append wrote.
type AppendResult struct {
	Message      Message
	Conversation Conversation
	LeafMoved    bool
}

// AppendKey makes an append idempotent: the first append under KeyHash
// stores its response, and a retry whose request hashes to BodyHash gets
// that response back instead of writing again.
type AppendKey struct {
	KeyHash  [32]byte
	BodyHash [32]byte
}

// msgColumns are the columns scanMessage reads, in order.
const msgColumns = `m.id, m.conversation_id, m.parent_id, m.sequence, m.role, m.content, m.status,
	m.tool_calls::text, m.tool_call_id, m.file_ids, m.created_at,
	case when m.parent_id is null
		then array(select s.id::text from conversation_messages s
			where s.conversation_id = m.conversation_id and s.parent_id is null and s.id <> m.id order by s.sequence)
		else array(select s.id::text from conversation_messages s
			where s.parent_id = m.parent_id and s.id <> m.id order by s.sequence)
	end`

func scanMessage(row pgx.Row) (Message, error) {
	var m Message
	var toolCalls *string
	if err := row.Scan(&m.ID, &m.ConversationID, &m.ParentID, &m.Sequence, &m.Role, &m.Content, &m.Status,
		&toolCalls, &m.ToolCallID, &m.FileIDs, &m.CreatedAt, &m.SiblingIDs); err != nil {
		return Message{}, err
	}
	if toolCalls != nil {
		m.ToolCalls = []byte(*toolCalls)
	}
	if m.FileIDs == nil {
		m.FileIDs = []string{}
	}
	if m.SiblingIDs == nil {
		m.SiblingIDs = []string{}
	}
	return m, nil
}

// AppendMessage appends a message to a conversation the caller can write,
// in one transaction under the conversation's row lock: the sequence, the
// parent, the leaf, the derived title, updated_at and the retention
// deadline, and with key the stored response, all commit together.
//
// render turns the result into the response body; it runs inside the
// transaction so that the body stored for replays is the body sent. The
// body is returned. A retry under key with the same request returns the
// stored body and a nil result; with another request, ErrAppendKeyReused.
func (db *DB) AppendMessage(ctx context.Context, userID, orgID, convID string, n NewMessage, key *AppendKey,
	render func(*AppendResult) ([]byte, error)) (*AppendResult, []byte, error) {
	var res *AppendResult
	var body []byte
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		conv, err := lockWritable(ctx, tx, userID, orgID, convID)
		if err != nil {
			return err
		}
		if key != nil {
			var bodyHash, stored []byte
			err := tx.QueryRow(ctx, `select body_hash, response from conversation_appends
				where conversation_id = $1 and key_hash = $2 and created_at > now() - $3::interval`,
				convID, key.KeyHash[:], AppendReplayTTL).Scan(&bodyHash, &stored)
			switch {
			case err == nil && bytes.Equal(bodyHash, key.BodyHash[:]):
				body = stored
				return nil
			case err == nil:
				return ErrAppendKeyReused
			case !errors.Is(err, pgx.ErrNoRows):
				return fmt.Errorf("cannot read idempotent append: %w", err)
			}
		}
		if len(n.FileIDs) > 0 {
			missing, err := missingFile(ctx, tx, userID, orgID, n.FileIDs, n.FilesAt, true)
			if err != nil {
				return err
			}
			if missing != "" {
				return &FileMissingError{ID: missing}
			}
			n.FileIDs = canonicalFileIDs(n.FileIDs)
		}
		r, err := appendLocked(ctx, tx, &conv, n)
		if err != nil {
			return err
		}
		if body, err = render(r); err != nil {
			return fmt.Errorf("cannot render appended message: %w", err)
		}
		if key != nil {
			if _, err := tx.Exec(ctx, `insert into conversation_appends (conversation_id, key_hash, body_hash, response)
				values ($1, $2, $3, $4)
				on conflict (conversation_id, key_hash) do update
					set body_hash = excluded.body_hash, response = excluded.response, created_at = now()`,
				convID, key.KeyHash[:], key.BodyHash[:], body); err != nil {
				return fmt.Errorf("cannot store idempotent append: %w", err)
			}
		}
		res = r
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return res, body, nil
}

// appendLocked writes the message into conv, which the transaction holds
// locked.
func appendLocked(ctx context.Context, tx pgx.Tx, conv *Conversation, n NewMessage) (*AppendResult, error) {
	// The current leaf: the active leaf, or the newest message while the
	// conversation is one chain.
	newest, err := newestMessage(ctx, tx, conv)
	if err != nil {
		return nil, err
	}
	leaf := newest
	if conv.ActiveLeafMessageID != nil {
		leaf = conv.ActiveLeafMessageID
	}
	parent := leaf
	switch {
	case n.Root:
		parent = nil
	case n.ParentID != nil:
		if ok, err := messageOf(ctx, tx, conv.ID, *n.ParentID); err != nil {
			return nil, err
		} else if !ok {
			return nil, &MessageRefError{Field: "parent_id"}
		}
		parent = n.ParentID
	}
	moved := true
	if n.ExpectedLeaf != nil {
		if ok, err := messageOf(ctx, tx, conv.ID, *n.ExpectedLeaf); err != nil {
			return nil, err
		} else if !ok {
			return nil, &MessageRefError{Field: "expected_leaf"}
		}
		moved = leaf != nil && *leaf == *n.ExpectedLeaf
	}
	// A conversation stays one chain (active leaf null) only while every
	// message answers the newest one and the leaf follows it.
	chain := conv.ActiveLeafMessageID == nil && sameID(parent, newest) && moved

	seq := conv.MessageCount + 1
	fileIDs := n.FileIDs
	if fileIDs == nil {
		fileIDs = []string{}
	}
	var toolCalls *string
	if n.ToolCalls != nil {
		s := string(n.ToolCalls)
		toolCalls = &s
	}
	var title *string
	if n.Role == "user" && n.Title != "" {
		title = &n.Title
	}
	var msgID string
	if err := tx.QueryRow(ctx, `insert into conversation_messages
			(conversation_id, user_id, parent_id, sequence, role, content, status, tool_calls, tool_call_id, file_ids, created_at)
		values ($1, $2, $3, $4, $5, $6, $7, $8::json, $9, $10, clock_timestamp())
		returning id`, conv.ID, conv.UserID, parent, seq, n.Role, n.Content, n.Status, toolCalls, n.ToolCallID,
		fileIDs).Scan(&msgID); err != nil {
		return nil, fmt.Errorf("cannot append message: %w", err)
	}
	active := conv.ActiveLeafMessageID
	switch {
	case chain:
	case moved:
		active = &msgID
	case active == nil:
		active = leaf // the chain's leaf stays put while newer messages hang below it
	}
	// One clock reading stamps both, so the deadline is exactly the
	// retention after the activity.
	row := tx.QueryRow(ctx, `with t as (select clock_timestamp() as ts)
		update conversations c set
			message_count = $2,
			updated_at = t.ts,
			retention_until = t.ts + $3::interval,
			active_leaf_message_id = $4,
			title = coalesce(c.title, $5)
		from t where c.id = $1 returning `+convColumns, conv.ID, seq, ConversationRetention, active, title)
	updated, err := scanConversation(row, false)
	if err != nil {
		return nil, fmt.Errorf("cannot append message: %w", err)
	}
	updated.CanWrite = conv.CanWrite
	m, err := scanMessage(tx.QueryRow(ctx, `select `+msgColumns+` from conversation_messages m where m.id = $1`, msgID))
	if err != nil {
		return nil, fmt.Errorf("cannot read appended message: %w", err)
	}
	return &AppendResult{Message: m, Conversation: updated, LeafMoved: moved}, nil
}

func sameID(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// newestMessage returns the id of the conversation's newest message, or nil
// when it has none.
func newestMessage(ctx context.Context, q convQuerier, conv *Conversation) (*string, error) {
	if conv.MessageCount == 0 {
		return nil, nil
	}
	var id string
	err := q.QueryRow(ctx, `select id from conversation_messages where conversation_id = $1 and sequence = $2`,
		conv.ID, conv.MessageCount).Scan(&id)
	if err != nil {
		return nil, fmt.Errorf("cannot read newest message: %w", err)
	}
	return &id, nil
}

// messageOf reports whether id names a message of the conversation.
func messageOf(ctx context.Context, q convQuerier, convID, id string) (bool, error) {
	if !ValidUUID(id) {
		return false, nil
	}
	var ok bool
	err := q.QueryRow(ctx, `select exists (select 1 from conversation_messages where id = $1 and conversation_id = $2)`,
		id, convID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("cannot read message: %w", err)
	}
	return ok, nil
}

// branchLeaf is the leaf that reading or switching to message id shows:
// the current leaf when id is on the active path (so switching to the
// branch already shown changes nothing), otherwise the deepest descendant
// of id, taking the newest child at each level. While the conversation is
// one chain, every message is on the active path.
func branchLeaf(ctx context.Context, q convQuerier, conv *Conversation, id string) (string, error) {
	if conv.ActiveLeafMessageID == nil {
		newest, err := newestMessage(ctx, q, conv)
		if err != nil {
			return "", err
		}
		return *newest, nil
	}
	active := *conv.ActiveLeafMessageID
	var onPath bool
	if err := q.QueryRow(ctx, `with recursive up(id, parent_id) as (
			select id, parent_id from conversation_messages where id = $1
			union all
			select m.id, m.parent_id from conversation_messages m join up on m.id = up.parent_id
				where m.sequence >= (select sequence from conversation_messages where id = $2)
		)
		select exists (select 1 from up where id = $2)`, active, id).Scan(&onPath); err != nil {
		return "", fmt.Errorf("cannot walk the active path: %w", err)
	}
	if onPath {
		return active, nil
	}
	var leaf string
	if err := q.QueryRow(ctx, `with recursive down(id, depth) as (
			select $1::uuid, 0
			union all
			select child.id, down.depth + 1 from down
			cross join lateral (select c.id from conversation_messages c
				where c.parent_id = down.id order by c.sequence desc limit 1) child
		)
		select id::text from down order by depth desc limit 1`, id).Scan(&leaf); err != nil {
		return "", fmt.Errorf("cannot find the newest descendant: %w", err)
	}
	return leaf, nil
}

// SwitchBranch makes the branch through messageID the active one and
// returns its leaf (see branchLeaf). It is not activity: updated_at and
// the retention deadline stay; a conversation that never branched keeps a
// null active leaf.
func (db *DB) SwitchBranch(ctx context.Context, userID, orgID, convID, messageID string) (string, error) {
	var leaf string
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		conv, err := lockWritable(ctx, tx, userID, orgID, convID)
		if err != nil {
			return err
		}
		if ok, err := messageOf(ctx, tx, conv.ID, messageID); err != nil {
			return err
		} else if !ok {
			return ErrMessageNotFound
		}
		if leaf, err = branchLeaf(ctx, tx, &conv, messageID); err != nil {
			return err
		}
		if conv.ActiveLeafMessageID != nil && *conv.ActiveLeafMessageID != leaf {
			if _, err := tx.Exec(ctx, `update conversations set active_leaf_message_id = $2 where id = $1`,
				conv.ID, leaf); err != nil {
				return fmt.Errorf("cannot switch branch: %w", err)
			}
		}
		return nil
	})
	return leaf, err
}

// MessagePageRequest selects a page of one path through a conversation's
// tree.
type MessagePageRequest struct {
	// Limit is the most messages returned.
	Limit int
	// Desc pages from the leaf towards the first message.
	Desc bool
	// Branch reads the branch through this message without switching.
	Branch *string
	// Leaf and After continue a page: the path's leaf and the sequence of
	// the last message already returned.
	Leaf  *string
	After int
}

// MessagePage is a conversation with one page of one path through it.
type MessagePage struct {
	Conversation Conversation
	Messages     []Message
	// LeafID is the leaf of the path read; "" when there are no messages.
	LeafID string
	// More reports whether another page follows the last message.
	More bool
}

// ReadConversation reads a conversation the caller can see with one page
// of messages: the path from the leaf (the active one, the branch's, or
// the cursor's) back to the first message, in sequence order ascending or
// descending. A Branch that is not a message of the conversation is
// ErrMessageNotFound; a cursor Leaf that is not is ErrBadCursor.
func (db *DB) ReadConversation(ctx context.Context, userID, orgID, convID string, r MessagePageRequest) (MessagePage, error) {
	var page MessagePage
	err := pgx.BeginTxFunc(ctx, db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			conv, err := getConversation(ctx, tx, userID, orgID, convID, false)
			if err != nil {
				return err
			}
			page.Conversation = conv
			page.Messages = []Message{}
			var leaf string
			switch {
			case r.Leaf != nil:
				if ok, err := messageOf(ctx, tx, conv.ID, *r.Leaf); err != nil {
					return err
				} else if !ok {
					return ErrBadCursor
				}
				leaf = *r.Leaf
			case r.Branch != nil:
				if ok, err := messageOf(ctx, tx, conv.ID, *r.Branch); err != nil {
					return err
				} else if !ok {
					return ErrMessageNotFound
				}
				if leaf, err = branchLeaf(ctx, tx, &conv, *r.Branch); err != nil {
					return err
				}
			case conv.ActiveLeafMessageID != nil:
				leaf = *conv.ActiveLeafMessageID
			case conv.MessageCount > 0:
				newest, err := newestMessage(ctx, tx, &conv)
				if err != nil {
					return err
				}
				leaf = *newest
			default:
				return nil
			}
			page.LeafID = leaf
			page.Messages, page.More, err = readPath(ctx, tx, &conv, leaf, r)
			return err
		})
	return page, err
}

// readPath reads one page of the path from leaf to the first message.
// Sequence numbers grow from a parent to its children, so a path in
// sequence order is the path in tree order, and a page continues after the
// last sequence returned.
func readPath(ctx context.Context, q convQuerier, conv *Conversation, leaf string, r MessagePageRequest) ([]Message, bool, error) {
	dir, cmp := "asc", ">"
	bound := r.After // asc: after this sequence
	if r.Desc {
		dir, cmp = "desc", "<"
		if bound == 0 {
			bound = int(^uint32(0) >> 1)
		}
	}
	var sql string
	if conv.ActiveLeafMessageID == nil {
		// One chain: the path to any message is every message up to it.
		sql = `select ` + msgColumns + ` from conversation_messages m
			where m.conversation_id = $1
				and m.sequence <= (select sequence from conversation_messages where id = $2)
				and m.sequence ` + cmp + ` $3
			order by m.sequence ` + dir + ` limit $4`
	} else {
		sql = `with recursive path(id, parent_id, sequence) as (
				select id, parent_id, sequence from conversation_messages where id = $2 and conversation_id = $1
				union all
				select m.id, m.parent_id, m.sequence from conversation_messages m join path p on m.id = p.parent_id
			)
			select ` + msgColumns + ` from path join conversation_messages m on m.id = path.id
			where path.sequence ` + cmp + ` $3
			order by m.sequence ` + dir + ` limit $4`
	}
	rows, err := q.Query(ctx, sql, conv.ID, leaf, bound, r.Limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("cannot read messages: %w", err)
	}
	defer rows.Close()
	out := []Message{}
	for rows.Next() {
		m, err := scanMessage(rows)
		if err != nil {
			return nil, false, fmt.Errorf("cannot read messages: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("cannot read messages: %w", err)
	}
	if len(out) > r.Limit {
		return out[:r.Limit], true, nil
	}
	return out, false, nil
}

// canonicalFileIDs spells each id as PostgreSQL prints it, dropping a
// repeat that differed only in case, so that deleting the file finds it.
func canonicalFileIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		c := canonicalUUID(id)
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

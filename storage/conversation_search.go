package storage

import (
	"context"
	"fmt"
	"time"
)

// Search highlight markers: literal text around each matched term of a
// snippet, never HTML.
const (
	SearchHighlightStart = "[[hl]]"
	SearchHighlightStop  = "[[/hl]]"
)

// SearchHit is one message matching a search.
type SearchHit struct {
	MessageID         string
	ConversationID    string
	ConversationTitle *string
	// Archived reports whether the message's conversation is archived.
	Archived bool
	Role     string
	Sequence int
	// Snippet is plain text with each matched term between the highlight
	// markers.
	Snippet string
	Rank    float32
	// OnActivePath is true for every message of a conversation that never
	// branched, and otherwise for the active leaf and its ancestors.
	OnActivePath bool
	CreatedAt    time.Time
}

// The snippet is the message text as written, markers added. ts_headline
// drops what its parser takes for HTML tags, so no "<" may reach it. On the
// way in U+0001 becomes U+0001 U+0003 and "<" becomes U+0001 U+0002; on
// the way out "<" is restored first, then U+0001. Every U+0001 of the
// escaped text starts one pair, so text that already held these
// characters comes back as written. The pairs are control characters,
// which the parser reads as blanks, like the "<" they stand for: they stay
// in one blank token, so no fragment edge or marker falls between them,
// and they never join the word beside them. (Private-use characters did:
// the parser counts every non-ASCII character as a letter, so "<i>quokka"
// became one word the query did not match, and the hit had no markers.)
// The search matches the stored tsvector, which the swap does not touch.
const (
	searchEscapeIn = `replace(replace(left(h.content, 100000), E'\x01', E'\x01\x03'), '<', E'\x01\x02')`
	searchSnippet  = `replace(replace(ts_headline('english', ` + searchEscapeIn + `, query.q, $6),
		E'\x01\x02', '<'), E'\x01\x03', E'\x01')`
)

// searchHeadline are ts_headline's options: the literal markers, and up to
// two fragments of about 10 to 30 words.
const searchHeadline = `StartSel="` + SearchHighlightStart + `", StopSel="` + SearchHighlightStop +
	`", MaxWords=30, MinWords=10, MaxFragments=2, FragmentDelimiter=" … "`

// SearchMessages searches the text of the caller's visible conversations of
// one source, archived ones and inactive branches included, most relevant
// first. q is in websearch syntax (quoted phrases, or, a leading - to
// exclude); no input is a syntax error. A query without a term to look for
// (empty, only stop words, or only exclusions) matches nothing.
func (db *DB) SearchMessages(ctx context.Context, userID, orgID, q, source string, limit int) ([]SearchHit, error) {
	rows, err := db.Pool.Query(ctx, `with recursive
		query as (select websearch_to_tsquery('english', $3) as q),
		hits as (
			select m.id, m.conversation_id, m.role, m.sequence, m.created_at, m.content,
				ts_rank_cd(m.search, query.q) as rank,
				c.title, c.archived_at is not null as archived, c.active_leaf_message_id
			from query, conversation_messages m
			join conversations c on c.id = m.conversation_id
			left join vault_grants g on g.vault_id = c.vault_id and g.user_id = c.user_id and g.org_id = c.org_id
			where querytree(query.q) not in ('', 'T')
				and m.user_id = $1 and m.search @@ query.q
				and c.user_id = $1 and c.org_id = $2 and c.source = $4
				and (c.vault_id is null or coalesce(g.can_read, false))
				and c.retention_until > now()
			order by rank desc, m.created_at desc, m.id
			limit $5
		),
		path(id, parent_id) as (
			select m.id, m.parent_id from conversation_messages m
			where m.id in (select active_leaf_message_id from hits)
			union
			select m.id, m.parent_id from path join conversation_messages m on m.id = path.parent_id
		)
		select h.id, h.conversation_id, h.title, h.archived, h.role, h.sequence, h.created_at, h.rank,
			`+searchSnippet+`,
			h.active_leaf_message_id is null or exists (select 1 from path where path.id = h.id)
		from hits h, query
		order by h.rank desc, h.created_at desc, h.id`,
		userID, orgID, q, source, limit, searchHeadline)
	if err != nil {
		return nil, fmt.Errorf("cannot search messages: %w", err)
	}
	defer rows.Close()
	out := []SearchHit{}
	for rows.Next() {
		var h SearchHit
		if err := rows.Scan(&h.MessageID, &h.ConversationID, &h.ConversationTitle, &h.Archived, &h.Role,
			&h.Sequence, &h.CreatedAt, &h.Rank, &h.Snippet, &h.OnActivePath); err != nil {
			return nil, fmt.Errorf("cannot search messages: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot search messages: %w", err)
	}
	return out, nil
}

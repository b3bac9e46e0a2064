package storage_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// convAuthor is a member of an organization who writes conversations.
type convAuthor struct{ userID, orgID string }

func convSeed(t *testing.T, db *storage.DB, email string) convAuthor {
	t.Helper()
	ctx := context.Background()
	org, err := db.CreateOrg(ctx, "Org of "+email)
	require.NoError(t, err)
	u, err := db.CreateUser(ctx, email, org.ID, hotpath.RoleMember)
	require.NoError(t, err)
	return convAuthor{userID: u.ID, orgID: org.ID}
}

func convCreate(t *testing.T, db *storage.DB, a convAuthor) storage.Conversation {
	t.Helper()
	c, err := db.CreateConversation(context.Background(), a.userID, a.orgID, storage.NewConversation{Source: "chat"})
	require.NoError(t, err)
	return c
}

func convRender(r *storage.AppendResult) ([]byte, error) { return []byte(r.Message.ID), nil }

func convAppend(t *testing.T, db *storage.DB, a convAuthor, convID string, n storage.NewMessage) *storage.AppendResult {
	t.Helper()
	if n.Role == "" {
		n.Role = "user"
	}
	if n.Status == "" {
		n.Status = "complete"
	}
	r, _, err := db.AppendMessage(context.Background(), a.userID, a.orgID, convID, n, nil, convRender)
	require.NoError(t, err)
	return r
}

func TestConversationConcurrentAppendsKeepEverySequence(t *testing.T) {
	storetest.EachDB(t, testConversationConcurrentAppendsKeepEverySequence)
}

func testConversationConcurrentAppendsKeepEverySequence(t *testing.T, db *storage.DB) {
	ctx := context.Background()
	a := convSeed(t, db, "ada@example.com")
	conv := convCreate(t, db, a)

	const writers, each = 24, 6
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, _, err := db.AppendMessage(ctx, a.userID, a.orgID, conv.ID, storage.NewMessage{
					Role: "user", Status: "complete", Content: fmt.Sprintf("writer %d message %d", w, i)}, nil, convRender)
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	var count, distinct, maxSeq int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*), count(distinct sequence), max(sequence)
		from conversation_messages where conversation_id = $1`, conv.ID).Scan(&count, &distinct, &maxSeq))
	require.Equal(t, writers*each, count, "no message lost")
	require.Equal(t, count, distinct, "no sequence repeated")
	require.Equal(t, count, maxSeq, "no sequence skipped")

	// Appends without a parent answer the newest message, so the
	// conversation is still one chain: every message's parent is the one
	// before it.
	var broken int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from conversation_messages m
		left join conversation_messages p on p.id = m.parent_id
		where m.conversation_id = $1 and coalesce(p.sequence, 0) <> m.sequence - 1`, conv.ID).Scan(&broken))
	require.Zero(t, broken)
	got, err := db.GetConversation(ctx, a.userID, a.orgID, conv.ID)
	require.NoError(t, err)
	require.Equal(t, count, got.MessageCount)
	require.Nil(t, got.ActiveLeafMessageID, "a chain never branched")
}

func TestConversationConcurrentForksKeepEveryMessage(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	a := convSeed(t, db, "ada@example.com")
	conv := convCreate(t, db, a)
	root := convAppend(t, db, a, conv.ID, storage.NewMessage{Content: "root"})

	const writers = 32
	var wg sync.WaitGroup
	ids := make([]string, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := db.AppendMessage(ctx, a.userID, a.orgID, conv.ID, storage.NewMessage{Role: "assistant",
				Status: "complete", Content: fmt.Sprintf("answer %d", w), ParentID: &root.Message.ID}, nil, convRender)
			if err == nil {
				ids[w] = r.Message.ID
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.NotEmpty(t, id)
	}
	page, err := db.ReadConversation(ctx, a.userID, a.orgID, conv.ID, storage.MessagePageRequest{Limit: 200,
		Branch: &root.Message.ID})
	require.NoError(t, err)
	require.Len(t, page.Messages, 2, "root and its newest child")
	require.Len(t, page.Messages[1].SiblingIDs, writers-1)
	require.Equal(t, writers+1, page.Conversation.MessageCount)
}

func TestConversationIdempotentAppendIsOneWrite(t *testing.T) {
	storetest.EachDB(t, testConversationIdempotentAppendIsOneWrite)
}

func testConversationIdempotentAppendIsOneWrite(t *testing.T, db *storage.DB) {
	ctx := context.Background()
	a := convSeed(t, db, "ada@example.com")
	conv := convCreate(t, db, a)
	key := &storage.AppendKey{KeyHash: sha256.Sum256([]byte("k1")), BodyHash: sha256.Sum256([]byte("body"))}
	n := storage.NewMessage{Role: "user", Status: "complete", Content: "hello"}

	var wg sync.WaitGroup
	bodies := make([][]byte, 8)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, body, err := db.AppendMessage(ctx, a.userID, a.orgID, conv.ID, n, key, convRender)
			if err == nil {
				bodies[i] = body
			}
		}()
	}
	wg.Wait()
	for _, b := range bodies {
		require.Equal(t, bodies[0], b, "every retry replays the first response")
	}
	got, err := db.GetConversation(ctx, a.userID, a.orgID, conv.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.MessageCount)

	other := &storage.AppendKey{KeyHash: key.KeyHash, BodyHash: sha256.Sum256([]byte("other"))}
	_, _, err = db.AppendMessage(ctx, a.userID, a.orgID, conv.ID, n, other, convRender)
	require.ErrorIs(t, err, storage.ErrAppendKeyReused)

	// The stored response is written with the append: a failed append
	// stores nothing.
	bad := "00000000-0000-0000-0000-000000000000"
	k2 := &storage.AppendKey{KeyHash: sha256.Sum256([]byte("k2")), BodyHash: sha256.Sum256([]byte("body"))}
	_, _, err = db.AppendMessage(ctx, a.userID, a.orgID, conv.ID, storage.NewMessage{Role: "user", Status: "complete",
		Content: "x", ParentID: &bad}, k2, convRender)
	var ref *storage.MessageRefError
	require.ErrorAs(t, err, &ref)
	var stored int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from conversation_appends where key_hash = $1`,
		k2.KeyHash[:]).Scan(&stored))
	require.Zero(t, stored)
	// And a render that fails rolls the message back.
	_, _, err = db.AppendMessage(ctx, a.userID, a.orgID, conv.ID, n, nil,
		func(*storage.AppendResult) ([]byte, error) { return nil, errors.New("boom") })
	require.Error(t, err)
	got, err = db.GetConversation(ctx, a.userID, a.orgID, conv.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.MessageCount)
}

func TestConversationRetentionDeletesExpired(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	a := convSeed(t, db, "ada@example.com")
	expired := make([]string, 7)
	for i := range expired {
		c := convCreate(t, db, a)
		convAppend(t, db, a, c.ID, storage.NewMessage{Content: "old words"})
		convAppend(t, db, a, c.ID, storage.NewMessage{Content: "more old words"})
		expired[i] = c.ID
	}
	live := convCreate(t, db, a)
	convAppend(t, db, a, live.ID, storage.NewMessage{Content: "fresh"})
	require.WithinDuration(t, time.Now().Add(storage.ConversationRetention), live.RetentionUntil, time.Minute,
		"365 days from creation")

	now := time.Now()
	_, err := db.Pool.Exec(ctx, `update conversations set retention_until = $2 where id = any($1)`,
		expired, now.Add(-time.Hour))
	require.NoError(t, err)

	deleted, ran, err := db.DeleteExpiredConversations(ctx, now, 3) // three batches: 3, 3, 1
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, len(expired), deleted)

	var convs, msgs, records int
	require.NoError(t, db.Pool.QueryRow(ctx, `select
		(select count(*) from conversations where id = any($1)),
		(select count(*) from conversation_messages where conversation_id = any($1)),
		(select count(*) from conversation_deletions where conversation_id = any($1) and request_id is null
			and message_count = 2 and user_id = $2 and org_id = $3)`, expired, a.userID, a.orgID).Scan(&convs, &msgs, &records))
	require.Zero(t, convs)
	require.Zero(t, msgs)
	require.Equal(t, len(expired), records, "each deletion is recorded")
	_, err = db.GetConversation(ctx, a.userID, a.orgID, live.ID)
	require.NoError(t, err, "a conversation inside its deadline stays")

	deleted, ran, err = db.DeleteExpiredConversations(ctx, now, 3)
	require.NoError(t, err)
	require.True(t, ran)
	require.Zero(t, deleted)
}

// Past its deadline a conversation is deleted for the API at once: not
// read, listed, searched or written, and an append does not bring it back,
// though the job has not run yet.
func TestConversationPastItsDeadlineIsGone(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	a := convSeed(t, db, "ada@example.com")
	c := convCreate(t, db, a)
	convAppend(t, db, a, c.ID, storage.NewMessage{Content: "lapsed words"})
	live := convCreate(t, db, a)
	convAppend(t, db, a, live.ID, storage.NewMessage{Content: "lapsed words too"})
	_, err := db.Pool.Exec(ctx, `update conversations set retention_until = now() - interval '1 second' where id = $1`, c.ID)
	require.NoError(t, err)

	_, err = db.GetConversation(ctx, a.userID, a.orgID, c.ID)
	require.ErrorIs(t, err, storage.ErrNotFound)
	_, err = db.ReadConversation(ctx, a.userID, a.orgID, c.ID, storage.MessagePageRequest{Limit: 10})
	require.ErrorIs(t, err, storage.ErrNotFound)
	list, _, err := db.ListConversations(ctx, a.userID, a.orgID, storage.ConversationFilter{Source: "chat"}, nil, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, live.ID, list[0].ID)
	hits, err := db.SearchMessages(ctx, a.userID, a.orgID, "lapsed", "chat", 10)
	require.NoError(t, err)
	require.Len(t, hits, 1)
	require.Equal(t, live.ID, hits[0].ConversationID)
	_, _, err = db.AppendMessage(ctx, a.userID, a.orgID, c.ID, storage.NewMessage{Role: "user", Status: "complete", Content: "again"}, nil, convRender)
	require.ErrorIs(t, err, storage.ErrNotFound)
	_, err = db.UpdateConversation(ctx, a.userID, a.orgID, c.ID, storage.ConversationPatch{SetModel: true})
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.ErrorIs(t, db.SetConversationArchived(ctx, a.userID, a.orgID, c.ID, true), storage.ErrNotFound)

	deleted, _, err := db.DeleteExpiredConversations(ctx, time.Now(), 10)
	require.NoError(t, err)
	require.Equal(t, 1, deleted, "the job still deletes its rows")
}

func TestConversationRetentionRunsInOneProcessAtATime(t *testing.T) {
	storetest.EachDB(t, testConversationRetentionRunsInOneProcessAtATime)
}

func testConversationRetentionRunsInOneProcessAtATime(t *testing.T, db *storage.DB) {
	ctx := context.Background()
	a := convSeed(t, db, "ada@example.com")
	c := convCreate(t, db, a)
	_, err := db.Pool.Exec(ctx, `update conversations set retention_until = now() - interval '1 day' where id = $1`, c.ID)
	require.NoError(t, err)

	// Another process is deleting: it holds the lock.
	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	var locked bool
	require.NoError(t, other.QueryRow(ctx, `select pg_try_advisory_xact_lock($1)`, int64(0x6777726574656e74)).Scan(&locked))
	require.True(t, locked)

	deleted, ran, err := db.DeleteExpiredConversations(ctx, time.Now(), 10)
	require.NoError(t, err)
	require.False(t, ran, "the lock is taken: this process leaves the work to the other")
	require.Zero(t, deleted)
	require.NoError(t, other.Rollback(ctx))

	deleted, ran, err = db.DeleteExpiredConversations(ctx, time.Now(), 10)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 1, deleted)

	// Many processes at once delete each conversation once.
	for range 20 {
		c := convCreate(t, db, a)
		_, err := db.Pool.Exec(ctx, `update conversations set retention_until = now() - interval '1 day' where id = $1`, c.ID)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	counts := make([]int, 6)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, _, err := db.DeleteExpiredConversations(ctx, time.Now(), 2)
			if err == nil {
				counts[i] = n
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	// Whoever missed the lock stopped early; a last run finishes the rest.
	rest, _, err := db.DeleteExpiredConversations(ctx, time.Now(), 100)
	require.NoError(t, err)
	require.Equal(t, 20, total+rest)
	var records int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from conversation_deletions`).Scan(&records))
	require.Equal(t, 21, records, "one record per deleted conversation")
}

func TestConversationRetentionSkipsAConversationBeingAppended(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	a := convSeed(t, db, "ada@example.com")
	c := convCreate(t, db, a)
	_, err := db.Pool.Exec(ctx, `update conversations set retention_until = now() - interval '1 day' where id = $1`, c.ID)
	require.NoError(t, err)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `select 1 from conversations where id = $1 for update`, c.ID)
	require.NoError(t, err)
	deleted, ran, err := db.DeleteExpiredConversations(ctx, time.Now(), 10)
	require.NoError(t, err)
	require.True(t, ran)
	require.Zero(t, deleted, "a locked conversation is skipped, not waited for")
	require.NoError(t, tx.Rollback(ctx))
}

func TestConversationDeleteRecordsMetadataOnly(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	a := convSeed(t, db, "ada@example.com")
	title := "Secret plans"
	c, err := db.CreateConversation(ctx, a.userID, a.orgID, storage.NewConversation{Source: "cli", Title: &title})
	require.NoError(t, err)
	convAppend(t, db, a, c.ID, storage.NewMessage{Content: "the secret text"})
	require.NoError(t, db.DeleteConversation(ctx, a.userID, a.orgID, c.ID, "req-123"))

	var convID, userID, orgID, requestID string
	var vaultID *string
	var count int
	var created time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `select conversation_id, user_id, org_id, vault_id, message_count,
		conversation_created_at, request_id from conversation_deletions`).Scan(&convID, &userID, &orgID, &vaultID,
		&count, &created, &requestID))
	require.Equal(t, c.ID, convID)
	require.Equal(t, a.userID, userID)
	require.Equal(t, a.orgID, orgID)
	require.Nil(t, vaultID)
	require.Equal(t, 1, count)
	require.WithinDuration(t, c.CreatedAt, created, time.Millisecond)
	require.Equal(t, "req-123", requestID)

	// The record has no column that could hold a title, a message or a
	// file name.
	rows, err := db.Pool.Query(ctx, `select column_name from information_schema.columns
		where table_name = 'conversation_deletions'`)
	require.NoError(t, err)
	var cols []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		cols = append(cols, s)
	}
	require.NoError(t, rows.Err())
	sort.Strings(cols)
	require.Equal(t, []string{"conversation_created_at", "conversation_id", "created_at", "id", "message_count",
		"org_id", "request_id", "user_id", "vault_id"}, cols)

	// Gone at once, and the request id does not leak into later
	// transactions on the same connection.
	_, err = db.GetConversation(ctx, a.userID, a.orgID, c.ID)
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.NoError(t, db.DeleteConversation(ctx, a.userID, a.orgID, convCreate(t, db, a).ID, ""))
	var nulls int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from conversation_deletions where request_id is null`).Scan(&nulls))
	require.Equal(t, 1, nulls)
}

func TestConversationVaultDeletionCascades(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	a := convSeed(t, db, "ada@example.com")
	var vaultID string
	require.NoError(t, db.Pool.QueryRow(ctx, `insert into vaults (org_id, name) values ($1, 'Team') returning id`,
		a.orgID).Scan(&vaultID))
	_, err := db.Pool.Exec(ctx, `insert into vault_members (vault_id, user_id, can_read, can_write) values ($1, $2, true, true)`,
		vaultID, a.userID)
	require.NoError(t, err)
	c, err := db.CreateConversation(ctx, a.userID, a.orgID, storage.NewConversation{Source: "chat", VaultID: &vaultID})
	require.NoError(t, err)
	convAppend(t, db, a, c.ID, storage.NewMessage{Content: "inside the vault"})
	_, err = db.Pool.Exec(ctx, `delete from vaults where id = $1`, vaultID)
	require.NoError(t, err)
	_, err = db.GetConversation(ctx, a.userID, a.orgID, c.ID)
	require.ErrorIs(t, err, storage.ErrNotFound)
	var recorded string
	require.NoError(t, db.Pool.QueryRow(ctx, `select vault_id from conversation_deletions where conversation_id = $1`,
		c.ID).Scan(&recorded))
	require.Equal(t, vaultID, recorded)
}

// A snippet is the message text as written: "<" survives ts_headline, and
// so do the control characters that carry it past ts_headline; a matched
// word is marked even where a "<" touches it.
func TestConversationSearchSnippetIsTheTextAsWritten(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	a := convSeed(t, db, "ada@example.com")
	c := convCreate(t, db, a)
	unmark := strings.NewReplacer(storage.SearchHighlightStart, "", storage.SearchHighlightStop, "")
	search := func(q string) storage.SearchHit {
		t.Helper()
		hits, err := db.SearchMessages(ctx, a.userID, a.orgID, q, "chat", 10)
		require.NoError(t, err)
		require.Len(t, hits, 1)
		return hits[0]
	}
	mark := func(w string) string { return storage.SearchHighlightStart + w + storage.SearchHighlightStop }

	// Short enough to be its own snippet.
	// (It ends on a long word: ts_headline trims a fragment's short ones.)
	short := "tangerine \ue000\ue002 <\ue000 \x01 <b>x</b> \x01\x03 \x01\x02 \x03\x02 <\x01 \x01< \x02< a\x01b clementine"
	convAppend(t, db, a, c.ID, storage.NewMessage{Content: short})
	h := search("tangerine")
	require.Equal(t, short, unmark.Replace(h.Snippet))
	require.True(t, strings.HasPrefix(h.Snippet, mark("tangerine")))

	for _, tc := range []struct{ text, q, want string }{
		{"see <i>quokka</i> soon", "quokka", mark("quokka") + "</i>"},
		{"if pangolin<limit then stop", "pangolin", mark("pangolin") + "<limit"},
		{"if okapi<margin then stop", "okapi margin", mark("okapi") + "<" + mark("margin")},
		{"vicuna<3 always", "vicuna", mark("vicuna") + "<3 always"},
	} {
		convAppend(t, db, a, c.ID, storage.NewMessage{Content: tc.text})
		h := search(tc.q)
		require.Contains(t, h.Snippet, tc.want, tc.text)
		require.Contains(t, tc.text, unmark.Replace(h.Snippet), "a piece of the text as written")
	}

	// Long: each fragment is a piece of the text as written, whichever
	// word it starts or ends on.
	var b strings.Builder
	pieces := []string{"\x01", "<", "\x01\x03", "\x01<", "<\x01", "\x02", "\ue000<"}
	for i := range 120 {
		if i == 60 || i == 100 {
			b.WriteString("coconut ")
		}
		fmt.Fprintf(&b, "%sw%d %s ", pieces[i%len(pieces)], i, pieces[(i+1)%len(pieces)])
	}
	long := b.String()
	convAppend(t, db, a, c.ID, storage.NewMessage{Content: long})
	h = search("coconut")
	require.Contains(t, h.Snippet, mark("coconut"))
	for _, frag := range strings.Split(unmark.Replace(h.Snippet), " … ") {
		require.Contains(t, long, frag)
	}
}

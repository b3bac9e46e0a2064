package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// These tests put a writer's call beside a transaction that is in flight,
// holding what a concurrent request would hold, and commit it only once the
// call has finished or waits on a lock: the interleaving that lost a write
// when the call read without locking.

// fileFixture is a user's ready chat attachment and a conversation of
// theirs.
type fileFixture struct {
	db   *storage.DB
	org  storage.Org
	user storage.User
	fs   *storage.Files
	file storage.File
	conv string
}

func newFileFixture(t *testing.T) fileFixture {
	t.Helper()
	db := storetest.DB(t)
	org, u := seed(t, db)
	fs := &storage.Files{DB: db, Store: &storage.PGFileStore{DB: db}}
	f := fileFixture{db: db, org: org, user: u, fs: fs,
		file: storeFile(t, fs, org.ID, u.ID, time.Now(), nil, "chat_attachment")}
	f.conv = f.newConversation(t)
	return f
}

func (f fileFixture) newConversation(t *testing.T) string {
	t.Helper()
	c, err := f.db.CreateConversation(context.Background(), f.user.ID, f.org.ID, storage.NewConversation{Source: "chat"})
	require.NoError(t, err)
	return c.ID
}

// attach appends a user message attaching ids to conv.
func (f fileFixture) attach(conv string, ids ...string) error {
	_, _, err := f.db.AppendMessage(context.Background(), f.user.ID, f.org.ID, conv, storage.NewMessage{Role: "user",
		Content: "x", Status: "complete", FileIDs: ids, FilesAt: time.Now()}, nil, noRender)
	return err
}

// inFlight begins the concurrent transaction and runs stmts in it.
func inFlight(t *testing.T, db *storage.DB, stmts ...func(tx pgx.Tx) error) pgx.Tx {
	t.Helper()
	tx, err := db.Pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	for _, s := range stmts {
		require.NoError(t, s(tx))
	}
	return tx
}

// stmt is one statement for inFlight.
func stmt(sql string, args ...any) func(tx pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(context.Background(), sql, args...)
		return err
	}
}

// beside runs call on its own goroutine and returns once it has finished
// or waits on a lock in db's database; wait then returns call's error.
func beside(t *testing.T, db *storage.DB, call func() error) (wait func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- call() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-errc:
			return func() error { return err }
		default:
		}
		var waiting int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*) from pg_stat_activity
			where datname = current_database() and wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting > 0 {
			return func() error { return <-errc }
		}
		require.True(t, time.Now().Before(deadline), "the call neither finished nor waited on a lock")
	}
}

func TestAppendDoesNotAttachAFileBeingDeleted(t *testing.T) {
	ctx := context.Background()
	f := newFileFixture(t)

	// DELETE /files/{id}, or the deletion of the last conversation that
	// attached the file, has marked it deleted and not committed yet.
	tx := inFlight(t, f.db, stmt(`update files set state = 'deleted', deleted_at = now() where id = $1`, f.file.ID))
	wait := beside(t, f.db, func() error { return f.attach(f.conv, f.file.ID) })
	require.NoError(t, tx.Commit(ctx))
	var missing *storage.FileMissingError
	require.ErrorAs(t, wait(), &missing, "the append waits for the deletion, then finds no file")
	require.Equal(t, f.file.ID, missing.ID)

	var listed int
	require.NoError(t, f.db.Pool.QueryRow(ctx, `select count(*) from conversation_messages where file_ids @> array[$1]`,
		f.file.ID).Scan(&listed))
	require.Zero(t, listed, "no message lists a deleted file")
}

func TestConversationsSharingAFileDeletedAtOnceDeleteIt(t *testing.T) {
	ctx := context.Background()
	f := newFileFixture(t)
	other := f.newConversation(t)
	for _, c := range []string{f.conv, other} {
		require.NoError(t, f.attach(c, f.file.ID))
	}

	// The other conversation's deletion is in flight: its messages are
	// gone to itself only.
	tx := inFlight(t, f.db, stmt(`delete from conversation_messages where conversation_id = $1`, other),
		stmt(`delete from conversations where id = $1`, other))
	wait := beside(t, f.db, func() error { return f.db.DeleteConversation(ctx, f.user.ID, f.org.ID, f.conv, "req") })
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, wait())

	_, err := f.db.GetFile(ctx, f.user.ID, f.org.ID, f.file.ID, time.Now())
	require.ErrorIs(t, err, storage.ErrNotFound, "no message attaches the file any more")
}

func TestVaultGrantWaitsForAMemberRemoval(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, admin := seed(t, db)
	member, err := db.CreateUser(ctx, "bob@example.com", org.ID, hotpath.RoleMember)
	require.NoError(t, err)
	name := "Shared"
	v, err := db.CreateVault(ctx, org.ID, admin.ID, storage.VaultFields{Name: &name})
	require.NoError(t, err)

	// The member's removal is in flight: the membership is locked and
	// deleted, and the vault grants it held are gone with it.
	tx := inFlight(t, db,
		stmt(`select 1 from memberships where org_id = $1 and user_id = $2 for update`, org.ID, member.ID),
		stmt(`delete from memberships where org_id = $1 and user_id = $2`, org.ID, member.ID),
		stmt(`delete from vault_members where user_id = $1`, member.ID))
	read := true
	wait := beside(t, db, func() error {
		_, _, err := db.AddVaultMember(ctx, org.ID, admin.ID, v.ID, member.ID, storage.MemberGrants{CanRead: &read})
		return err
	})
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, wait(), storage.ErrUserNotFound, "the grant waits for the removal, then finds no member")

	var grants int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from vault_members where user_id = $1`,
		member.ID).Scan(&grants))
	require.Zero(t, grants, "no grant outlives the membership")
}

func TestMendAfterOlderProcesses(t *testing.T) {
	ctx := context.Background()
	f := newFileFixture(t)
	mended, err := f.db.MendAfterOlderProcesses(ctx)
	require.NoError(t, err)
	require.True(t, mended, "migration 15 marks a mend due")

	// What an older process's races left: a file deleted under a message,
	// the id of one the janitor has since swept, and a vault grant of a
	// member removed meanwhile.
	deleted := storeFile(t, f.fs, f.org.ID, f.user.ID, time.Now().Add(time.Millisecond), nil, "chat_attachment")
	require.NoError(t, f.attach(f.conv, f.file.ID, deleted.ID))
	swept := "0b5c0e4c-6f1e-4d1a-9a53-2b1f4f6f0c11"
	_, err = f.db.Pool.Exec(ctx, `update files set state = 'deleted', deleted_at = now() where id = $1`, deleted.ID)
	require.NoError(t, err)
	_, err = f.db.Pool.Exec(ctx, `update conversation_messages set file_ids = file_ids || $1::text where conversation_id = $2`,
		swept, f.conv)
	require.NoError(t, err)
	member, err := f.db.CreateUser(ctx, "bob@example.com", f.org.ID, hotpath.RoleMember)
	require.NoError(t, err)
	name := "Shared"
	v, err := f.db.CreateVault(ctx, f.org.ID, f.user.ID, storage.VaultFields{Name: &name})
	require.NoError(t, err)
	read := true
	_, _, err = f.db.AddVaultMember(ctx, f.org.ID, f.user.ID, v.ID, member.ID, storage.MemberGrants{CanRead: &read})
	require.NoError(t, err)
	_, err = f.db.Pool.Exec(ctx, `delete from memberships where user_id = $1`, member.ID)
	require.NoError(t, err)

	// An older process is connected: nothing is mended yet.
	cc := f.db.Pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = storage.LegacyListenerApplicationName
	older, err := pgx.ConnectConfig(ctx, cc)
	require.NoError(t, err)
	mended, err = f.db.MendAfterOlderProcesses(ctx)
	require.NoError(t, err)
	require.False(t, mended)
	fileIDs := func() []string {
		page, err := f.db.ReadConversation(ctx, f.user.ID, f.org.ID, f.conv, storage.MessagePageRequest{Limit: 10})
		require.NoError(t, err)
		return page.Messages[0].FileIDs
	}
	require.Len(t, fileIDs(), 3)

	// Once it is gone, the mend runs, once.
	require.NoError(t, older.Close(ctx))
	require.Eventually(t, func() bool {
		mended, err = f.db.MendAfterOlderProcesses(ctx)
		require.NoError(t, err)
		return mended
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{f.file.ID}, fileIDs(), "the live file is kept, in its place")
	var grants int
	require.NoError(t, f.db.Pool.QueryRow(ctx, `select count(*) from vault_members where user_id = $1`, member.ID).Scan(&grants))
	require.Zero(t, grants, "the removed member's grant ends")
	require.NoError(t, f.db.Pool.QueryRow(ctx, `select count(*) from vault_members where user_id = $1`, f.user.ID).Scan(&grants))
	require.Equal(t, 1, grants, "the owner's stays")
	mended, err = f.db.MendAfterOlderProcesses(ctx)
	require.NoError(t, err)
	require.False(t, mended, "nothing is due any more")
}

func TestRotationsSentWithOneSecretHaveOneWinner(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, u := seed(t, db)
	issued, err := db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: org.ID, Kind: hotpath.KindDeveloper})
	require.NoError(t, err)
	presented := hotpath.HashToken([]byte(issued.AccessToken))

	// Another rotation sent with the same secret is in flight: it holds
	// the key's row and has written its new hash.
	fresh, _ := hotpath.GenerateToken(hotpath.TokenUser)
	freshHash := hotpath.HashToken([]byte(fresh))
	tx := inFlight(t, db, stmt(`select 1 from api_keys where id = $1 for update`, issued.KeyID),
		stmt(`update api_keys set hash = $2 where id = $1`, issued.KeyID, freshHash[:]))
	wait := beside(t, db, func() error {
		_, _, err := db.RotateOwnKey(ctx, issued.KeyID, u.ID, org.ID, &presented)
		return err
	})
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, wait(), storage.ErrKeySuperseded, "the secret it was sent with is no longer the key's")

	// Sent with the key's current secret, or by another credential of the
	// owner's (nil), a rotation goes through.
	_, old, err := db.RotateOwnKey(ctx, issued.KeyID, u.ID, org.ID, &freshHash)
	require.NoError(t, err)
	require.Equal(t, freshHash, old)
	_, _, err = db.RotateOwnKey(ctx, issued.KeyID, u.ID, org.ID, nil)
	require.NoError(t, err)
}

// A chat attachment goes with its conversations: once every conversation
// attaching it has passed its retention deadline, it is gone for the API
// (read, listed, attached again) as they are, before the retention job
// deletes them and it; attached also to a live one, it stays.
func TestAttachmentOfConversationsPastTheirDeadlineIsGone(t *testing.T) {
	ctx := context.Background()
	f := newFileFixture(t)
	require.NoError(t, f.attach(f.conv, f.file.ID))
	kept := storeFile(t, f.fs, f.org.ID, f.user.ID, time.Now(), nil, "chat_attachment")
	require.NoError(t, f.attach(f.conv, kept.ID))
	live := f.newConversation(t)
	require.NoError(t, f.attach(live, kept.ID))
	_, err := f.db.Pool.Exec(ctx, `update conversations set retention_until = now() - interval '1 second' where id = $1`, f.conv)
	require.NoError(t, err)

	_, err = f.db.GetFile(ctx, f.user.ID, f.org.ID, f.file.ID, time.Now())
	require.ErrorIs(t, err, storage.ErrNotFound)
	list, _, err := f.db.ListFiles(ctx, f.user.ID, f.org.ID, time.Now(), nil, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, kept.ID, list[0].ID, "attached to a live conversation too, it stays")
	other := f.newConversation(t)
	require.Error(t, f.attach(other, f.file.ID), "it cannot be attached again")

	deleted, _, err := f.db.DeleteExpiredConversations(ctx, time.Now(), 10)
	require.NoError(t, err)
	require.Equal(t, 1, deleted)
	var state string
	require.NoError(t, f.db.Pool.QueryRow(ctx, `select state from files where id = $1`, f.file.ID).Scan(&state))
	require.NotEqual(t, "ready", state, "the job deleted it with its conversation")
}

package storage_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/filestoretest"
	"github.com/edgegw/gateway/storage/storetest"
)

func TestPGFileStoreContract(t *testing.T) {
	filestoretest.Run(t, &storage.PGFileStore{DB: storetest.DB(t)})
}

// newFakeS3 serves an in-process S3-compatible store with one bucket.
func newFakeS3(t *testing.T) storage.S3Config {
	t.Helper()
	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket("gw-files"))
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return storage.S3Config{Endpoint: srv.Listener.Addr().String(), Bucket: "gw-files", Region: "us-east-1",
		AccessKeyID: "test", SecretAccessKey: "test-secret", Insecure: true}
}

func TestS3FileStoreContract(t *testing.T) {
	s, err := storage.NewS3FileStore(newFakeS3(t))
	require.NoError(t, err)
	require.NoError(t, s.Check(context.Background()))
	filestoretest.Run(t, s)
}

func TestS3ConfigValidate(t *testing.T) {
	for name, c := range map[string]storage.S3Config{
		"no endpoint": {Bucket: "b"},
		"scheme":      {Endpoint: "https://s3.example.com", Bucket: "b"},
		"no bucket":   {Endpoint: "s3.example.com"},
		"half a key":  {Endpoint: "s3.example.com", Bucket: "b", AccessKeyID: "x"},
	} {
		t.Run(name, func(t *testing.T) { require.Error(t, c.Validate()) })
	}
	c := storage.S3Config{Endpoint: "s3.example.com", Bucket: "b"}
	require.NoError(t, c.Validate())
	require.Equal(t, "files/", c.Prefix)
}

// storeFile records and stores a ready file of u's.
func storeFile(t *testing.T, fs *storage.Files, org, user string, at time.Time, expires *time.Time, purpose string) storage.File {
	t.Helper()
	ctx := context.Background()
	key := "k-" + at.Format(time.RFC3339Nano) + purpose + user
	text := "hello"
	f, err := fs.DB.CreateFile(ctx, storage.NewFile{OrgID: org, UserID: user, Filename: "a.txt", Bytes: 5,
		ContentType: "text/plain", Purpose: purpose, TextStatus: hotpath.FileTextReady, TextTokens: 1, Text: &text,
		StoreKey: key, CreatedAt: at, ExpiresAt: expires})
	require.NoError(t, err)
	_, err = fs.Store.Put(ctx, key, bytes.NewReader([]byte(text)), 100)
	require.NoError(t, err)
	require.NoError(t, fs.DB.ReadyFile(ctx, f.ID))
	return f
}

func TestFilesIsolationListAndExpiry(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, u := seed(t, db)
	other, err := db.CreateUser(ctx, "bob@example.com", org.ID, hotpath.RoleMember)
	require.NoError(t, err)
	fs := &storage.Files{DB: db, Store: &storage.PGFileStore{DB: db}}
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	exp := t0.Add(30 * time.Minute)
	a := storeFile(t, fs, org.ID, u.ID, t0, nil, "chat_attachment")
	b := storeFile(t, fs, org.ID, u.ID, t0.Add(time.Second), &exp, "chat_attachment")
	theirs := storeFile(t, fs, org.ID, other.ID, t0, nil, "chat_attachment")

	// Pending uploads are invisible.
	pending, err := db.CreateFile(ctx, storage.NewFile{OrgID: org.ID, UserID: u.ID, Filename: "p.txt", ContentType: "text/plain",
		Purpose: "chat_attachment", TextStatus: hotpath.FileTextReady, StoreKey: "pending", CreatedAt: t0})
	require.NoError(t, err)
	_, err = db.GetFile(ctx, u.ID, org.ID, pending.ID, t0)
	require.ErrorIs(t, err, storage.ErrNotFound)

	got, err := db.GetFile(ctx, u.ID, org.ID, a.ID, t0)
	require.NoError(t, err)
	require.Equal(t, "a.txt", got.Filename)
	for _, id := range []string{theirs.ID, "not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
		_, err = db.GetFile(ctx, u.ID, org.ID, id, t0)
		require.ErrorIs(t, err, storage.ErrNotFound, id)
	}
	list, more, err := db.ListFiles(ctx, u.ID, org.ID, t0, nil, 1)
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, []string{b.ID}, []string{list[0].ID}, "newest first")
	list, more, err = db.ListFiles(ctx, u.ID, org.ID, t0, &storage.FileKey{CreatedAt: list[0].CreatedAt, ID: list[0].ID}, 1)
	require.NoError(t, err)
	require.False(t, more)
	require.Equal(t, a.ID, list[0].ID)

	// At expires_at the file is gone to every read at once.
	_, err = db.GetFile(ctx, u.ID, org.ID, b.ID, exp)
	require.ErrorIs(t, err, storage.ErrNotFound)
	list, _, err = db.ListFiles(ctx, u.ID, org.ID, exp, nil, 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	_, err = fs.Attachments(ctx, org.ID, u.ID, []string{a.ID, b.ID}, 0)
	var missing *hotpath.FileMissingError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, b.ID, missing.ID)

	miss, err := db.MissingFile(ctx, u.ID, org.ID, []string{a.ID, theirs.ID}, t0)
	require.NoError(t, err)
	require.Equal(t, theirs.ID, miss)
	miss, err = db.MissingFile(ctx, u.ID, org.ID, []string{a.ID, b.ID}, t0)
	require.NoError(t, err)
	require.Empty(t, miss)

	// The janitor deletes the expired file's bytes and record; the live
	// one stays.
	n, ran, err := fs.SweepFiles(ctx, exp, 10)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 1, n)
	_, err = fs.Store.Open(ctx, b.StoreKey)
	require.ErrorIs(t, err, storage.ErrNotFound)
	_, err = fs.Store.Open(ctx, a.StoreKey)
	require.NoError(t, err)
	// An upload pending past its TTL is abandoned and swept.
	n, _, err = fs.SweepFiles(ctx, t0.Add(storage.PendingFileTTL), 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestSweepFilesOneProcessAtATime(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	fs := &storage.Files{DB: db, Store: &storage.PGFileStore{DB: db}}
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `select pg_advisory_xact_lock(7455540311111332641)`)
	require.NoError(t, err)
	_, ran, err := fs.SweepFiles(ctx, time.Now(), 10)
	require.NoError(t, err)
	require.False(t, ran, "another process holds the janitor's lock")
}

func TestFileDeletionDetachesAndConversationDeletionDeletes(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, u := seed(t, db)
	fs := &storage.Files{DB: db, Store: &storage.PGFileStore{DB: db}}
	now := time.Now()
	only := storeFile(t, fs, org.ID, u.ID, now, nil, "chat_attachment")
	shared := storeFile(t, fs, org.ID, u.ID, now.Add(time.Millisecond), nil, "chat_attachment")
	detached := storeFile(t, fs, org.ID, u.ID, now.Add(2*time.Millisecond), nil, "chat_attachment")

	conv := func() string {
		c, err := db.CreateConversation(ctx, u.ID, org.ID, storage.NewConversation{Source: "chat"})
		require.NoError(t, err)
		return c.ID
	}
	c1, c2 := conv(), conv()
	_, _, err := db.AppendMessage(ctx, u.ID, org.ID, c1, storage.NewMessage{Role: "user", Content: "x", Status: "complete",
		FileIDs: []string{only.ID, shared.ID, detached.ID}}, nil, noRender)
	require.NoError(t, err)
	_, _, err = db.AppendMessage(ctx, u.ID, org.ID, c2, storage.NewMessage{Role: "user", Content: "y", Status: "complete",
		FileIDs: []string{shared.ID}}, nil, noRender)
	require.NoError(t, err)

	// Deleting a file removes it from the messages that listed it.
	require.NoError(t, db.DeleteFile(ctx, u.ID, org.ID, detached.ID, time.Now()))
	page, err := db.ReadConversation(ctx, u.ID, org.ID, c1, storage.MessagePageRequest{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{only.ID, shared.ID}, page.Messages[0].FileIDs)
	require.ErrorIs(t, db.DeleteFile(ctx, u.ID, org.ID, detached.ID, time.Now()), storage.ErrNotFound)

	// Deleting c1 deletes the file only it attaches; the one c2 still
	// attaches stays.
	require.NoError(t, db.DeleteConversation(ctx, u.ID, org.ID, c1, "req"))
	_, err = db.GetFile(ctx, u.ID, org.ID, only.ID, time.Now())
	require.ErrorIs(t, err, storage.ErrNotFound)
	_, err = db.GetFile(ctx, u.ID, org.ID, shared.ID, time.Now())
	require.NoError(t, err)
	n, _, err := fs.SweepFiles(ctx, time.Now(), 10)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the deleted file and the conversation's file")
}

func noRender(*storage.AppendResult) ([]byte, error) { return nil, nil }

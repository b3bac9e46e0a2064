package storage_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// recorder is an Invalidator that remembers what it was told.
type recorder struct {
	mu     sync.Mutex
	hashes []hotpath.TokenHash
	resets int
	live   []bool
	wake   chan struct{}
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 64)} }

func (r *recorder) note(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *recorder) Invalidate(h hotpath.TokenHash) { r.note(func() { r.hashes = append(r.hashes, h) }) }
func (r *recorder) Reset()                         { r.note(func() { r.resets++ }) }
func (r *recorder) SetLive(l bool)                 { r.note(func() { r.live = append(r.live, l) }) }

// waitFor polls cond each time the recorder hears something, for at most d.
func (r *recorder) waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.wake:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestListenerForwardsInvalidations(t *testing.T) {
	storetest.EachDB(t, testListenerForwardsInvalidations)
}

func testListenerForwardsInvalidations(t *testing.T, db *storage.DB) {
	ctx, cancel := context.WithCancel(context.Background())
	rec := newRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.ListenKeys(ctx, rec, storage.ListenConfig{Probe: 200 * time.Millisecond}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() { cancel(); <-done })
	rec.waitFor(t, 5*time.Second, "listener to go live", func() bool { return len(rec.live) > 0 && rec.live[len(rec.live)-1] })

	org, u := seed(t, db)
	issued, err := db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: org.ID, Kind: hotpath.KindDeveloper})
	require.NoError(t, err)
	require.NoError(t, db.RevokeKey(ctx, issued.KeyID))
	want := hotpath.HashToken([]byte(issued.AccessToken))
	rec.waitFor(t, time.Second, "the revoked key's hash", func() bool {
		for _, h := range rec.hashes {
			if h == want {
				return true
			}
		}
		return false
	})

	resets := rec.resets
	require.NoError(t, db.SetUserSuspended(ctx, u.ID, true))
	rec.waitFor(t, time.Second, "a reset after suspension", func() bool { return rec.resets > resets })

	// Kill the listening connection: the listener must say it is not live,
	// then come back live by itself.
	lives := len(rec.live)
	_, err = db.Pool.Exec(ctx, `select pg_terminate_backend(pid) from pg_stat_activity
		where application_name = $1 and datname = current_database()`, storage.ListenerApplicationName)
	require.NoError(t, err)
	rec.waitFor(t, 10*time.Second, "the listener to drop and return", func() bool {
		seen := rec.live[lives:]
		for i, l := range seen {
			if !l {
				for _, back := range seen[i:] {
					if back {
						return true
					}
				}
			}
		}
		return false
	})
}

// slowRecorder takes its time over each invalidation, as a busy process
// might: a sync that did not wait for it would return first.
type slowRecorder struct{ *recorder }

func (s slowRecorder) Invalidate(h hotpath.TokenHash) {
	time.Sleep(300 * time.Millisecond)
	s.recorder.Invalidate(h)
}

func TestSyncKeysWaitsForEveryListener(t *testing.T) {
	db := storetest.DB(t)
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	recs := []*recorder{newRecorder(), newRecorder()}
	var wg sync.WaitGroup
	for _, rec := range recs {
		wg.Go(func() { db.ListenKeys(ctx, slowRecorder{rec}, storage.ListenConfig{}, quiet) })
		rec.waitFor(t, 5*time.Second, "listener to go live", func() bool { return len(rec.live) > 0 && rec.live[len(rec.live)-1] })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	org, u := seed(t, db)
	issued, err := db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: org.ID, Kind: hotpath.KindDeveloper})
	require.NoError(t, err)
	require.NoError(t, db.RevokeKey(ctx, issued.KeyID))
	acked, listeners, err := db.SyncKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, listeners)
	require.Equal(t, 2, acked)
	want := hotpath.HashToken([]byte(issued.AccessToken))
	for i, rec := range recs {
		rec.mu.Lock()
		require.Contains(t, rec.hashes, want, "listener %d had not applied the revocation when the sync returned", i)
		require.Zero(t, rec.resets, "a sync marker distrusts nothing")
		rec.mu.Unlock()
	}

	// A release from before markers listens on the key channel only: it is
	// not waited for, and hears no marker.
	connect := func(name string) *pgx.Conn {
		cc := db.Pool.Config().ConnConfig.Copy()
		cc.RuntimeParams["application_name"] = name
		conn, err := pgx.ConnectConfig(ctx, cc)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	legacy := connect(storage.LegacyListenerApplicationName)
	_, err = legacy.Exec(ctx, "listen "+storage.KeyChannel)
	require.NoError(t, err)
	acked, listeners, err = db.SyncKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, listeners)
	require.Equal(t, 2, acked)
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	n, err := legacy.WaitForNotification(wctx)
	wcancel()
	require.Error(t, err, "the legacy listener heard %v", n)

	// A listener that never answers (a process stopped in its tracks)
	// holds the sync until its context ends.
	mute := connect(storage.ListenerApplicationName)
	_, err = mute.Exec(ctx, "listen "+storage.KeySyncChannel)
	require.NoError(t, err)
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	acked, listeners, err = db.SyncKeys(sctx)
	require.Error(t, err)
	require.Equal(t, 3, listeners)
	require.Equal(t, 2, acked)
}

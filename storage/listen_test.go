package storage_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

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

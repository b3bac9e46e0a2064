//go:build unix

package storage_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// pgTools finds the PostgreSQL server binaries and the system user the
// server at baseURL runs as, so a test can start servers of its own.
type pgTools struct {
	bindir   string
	uid, gid uint32
}

func findPGTools(t *testing.T, baseURL string) pgTools {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, baseURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var bindir, datadir string
	require.NoError(t, conn.QueryRow(ctx, `select setting from pg_config where name = 'BINDIR'`).Scan(&bindir))
	require.NoError(t, conn.QueryRow(ctx, `show data_directory`).Scan(&datadir))
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(datadir, &st), "the server's data directory")
	return pgTools{bindir: bindir, uid: st.Uid, gid: st.Gid}
}

// command runs a PostgreSQL binary as the server's user.
func (p pgTools) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bindir, name), args...)
	if uint32(os.Getuid()) != p.uid {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: p.uid, Gid: p.gid}}
	}
	return cmd
}

// dir makes a directory the server's user owns, under one it can reach
// (t.TempDir is private to whoever runs the test), removed at the end.
func (p pgTools) dir(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "gw-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	require.NoError(t, os.Chown(root, int(p.uid), int(p.gid)))
	data := filepath.Join(root, "data")
	require.NoError(t, os.Mkdir(data, 0o700))
	require.NoError(t, os.Chown(data, int(p.uid), int(p.gid)))
	return data
}

// serve starts postgres on data at a free port and returns its URL (user
// "gateway", database "postgres") once it answers, and a function that
// stops it (also called at the end of the test).
func (p pgTools) serve(t *testing.T, data string, standby bool) (string, func()) {
	t.Helper()
	port := storetest.FreePort(t)
	server := p.command("postgres", "-D", data, "-p", strconv.Itoa(port), "-k", filepath.Dir(data),
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	server.Stdout, server.Stderr = io.Discard, io.Discard
	require.NoError(t, server.Start())
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = server.Process.Signal(syscall.SIGINT) // fast shutdown
			_, _ = server.Process.Wait()
		}
	}
	t.Cleanup(stop)
	u := "postgres://gateway@" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/postgres?sslmode=disable"
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		var recovering bool
		return c.QueryRow(ctx, `select pg_is_in_recovery()`).Scan(&recovering) == nil && recovering == standby
	}, 30*time.Second, 50*time.Millisecond, "the server never answered")
	return u, stop
}

// startPrimaryAndReplica starts a small PostgreSQL primary of its own (the
// shared server holds every other test's databases, and a base backup
// copies a whole cluster) and a streaming replica of it, and returns both
// URLs and a function that stops the replica.
func startPrimaryAndReplica(t *testing.T) (primaryURL, replicaURL string, stopReplica func()) {
	t.Helper()
	p := findPGTools(t, storetest.DatabaseURL(t))
	data := p.dir(t)
	out, err := p.command("initdb", "--pgdata", data, "--username", "gateway", "--auth", "trust", "--no-sync").CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)
	primaryURL, _ = p.serve(t, data, false)
	u, err := url.Parse(primaryURL)
	require.NoError(t, err)
	standby := p.dir(t)
	out, err = p.command("pg_basebackup", "--pgdata", standby, "--write-recovery-conf", "--checkpoint", "fast",
		"--wal-method", "stream", "--no-sync", "--host", u.Hostname(), "--port", u.Port(), "--username", "gateway").CombinedOutput()
	require.NoError(t, err, "pg_basebackup: %s", out)
	replicaURL, stopReplica = p.serve(t, standby, true)
	return primaryURL, replicaURL, stopReplica
}

// TestReadReplica proves which server a staleness-tolerant read goes to,
// by what it sees: with the replica's replay paused, a measurement written
// to the primary is invisible while the replica is within its lag bound,
// visible once the bound is passed (the primary answers), and the
// replica serves again once it catches up. A replica that stops serves
// nothing wrong: reads go to the primary.
func TestReadReplica(t *testing.T) {
	primaryURL, replicaURL, stopReplica := startPrimaryAndReplica(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := storage.Open(ctx, storage.Config{URL: primaryURL})
	require.NoError(t, err)
	_, _, err = db.Migrate(ctx)
	require.NoError(t, err)
	db.Close()

	const maxLag = 2 * time.Second
	db, err = storage.Open(ctx, storage.Config{URL: primaryURL, ReadURL: replicaURL, ReadMaxLag: maxLag})
	require.NoError(t, err)
	defer db.Close()
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		db.WatchReplica(wctx, 50*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() { stopWatch(); <-watched }()

	replica, err := pgx.Connect(ctx, replicaURL)
	require.NoError(t, err)
	defer replica.Close(ctx)

	since := time.Now().Add(-time.Hour)
	seen := func(component string) bool {
		got, err := db.RecentProbes(ctx, since, 5)
		require.NoError(t, err)
		return len(got[component]) > 0
	}
	record := func(component string) {
		require.NoError(t, db.RecordProbe(ctx, storage.Probe{Component: component, CheckedAt: time.Now(), OK: true}, time.Hour))
	}
	stats := func() (time.Duration, uint64, uint64) {
		ok, lag, reads, fallbacks := db.ReplicaStats()
		require.True(t, ok)
		return lag, reads, fallbacks
	}

	// Caught up: the replica is measured and serves the reads.
	require.Eventually(t, func() bool { lag, _, _ := stats(); return lag >= 0 && lag < maxLag },
		20*time.Second, 20*time.Millisecond, "the replica was never measured as caught up")
	record("caught-up")
	require.Eventually(t, func() bool { return seen("caught-up") }, 10*time.Second, 10*time.Millisecond)
	_, reads, _ := stats()
	require.Positive(t, reads, "reads served by the replica")

	// Replay paused: the replica is stale, and within the bound it is
	// still read, so the new measurement is not seen...
	_, err = replica.Exec(ctx, `select pg_wal_replay_pause()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var state string
		return replica.QueryRow(ctx, `select pg_get_wal_replay_pause_state()`).Scan(&state) == nil && state == "paused"
	}, 10*time.Second, 10*time.Millisecond)
	record("while-paused")
	written := time.Now()
	require.False(t, seen("while-paused"), "a read within the lag bound is the replica's")
	// ...until the staleness passes the bound: then the primary answers.
	require.Eventually(t, func() bool { return seen("while-paused") }, 20*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(written), maxLag-100*time.Millisecond,
		"the primary took the reads before the replica was past its bound")
	_, _, fallbacks := stats()
	require.Positive(t, fallbacks)

	// Replay resumed: the replica catches up and serves again.
	_, err = replica.Exec(ctx, `select pg_wal_replay_resume()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { lag, _, _ := stats(); return lag >= 0 && lag < maxLag },
		20*time.Second, 20*time.Millisecond, "the replica never caught up again")
	_, before, _ := stats()
	require.True(t, seen("while-paused"))
	_, after, _ := stats()
	require.Equal(t, before+1, after, "served by the replica again")

	// The replica stops: reads go on, on the primary.
	stopReplica()
	record("after-stop")
	require.True(t, seen("after-stop"))
	require.Eventually(t, func() bool { lag, _, _ := stats(); return lag < 0 }, 10*time.Second, 20*time.Millisecond,
		"a replica that cannot be reached is not measured")
	require.True(t, seen("after-stop"))
}

// TestReadURLMustBeAReplica: a read URL naming a server that is not in
// recovery (a second primary, whose data may be anything) is never used.
func TestReadURLMustBeAReplica(t *testing.T) {
	url := storetest.DatabaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := storage.Open(ctx, storage.Config{URL: url, ReadURL: url})
	require.NoError(t, err)
	defer db.Close()
	require.ErrorContains(t, storage.CheckReplica(ctx, db), "not a replica")
}

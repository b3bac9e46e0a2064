package storetest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
)

// The PgBouncer a test binary shares, in front of DATABASE_URL's server:
// started on first use, stopped by StopPgBouncer (from TestMain) or with
// the binary.
var bouncer struct {
	once sync.Once
	addr string
	err  error
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// PgBouncerURL returns dbURL (a database on DATABASE_URL's server, from
// DatabaseURL) reached through a PgBouncer in transaction mode: every
// transaction, and every statement outside one, may run on another server
// connection, and protocol-level prepared statements are not followed, as
// with Debian bookworm's PgBouncer 1.18. Without the pgbouncer program a
// test skips, except under CI=true, where it fails.
func PgBouncerURL(t testing.TB, dbURL string) string {
	t.Helper()
	bin := pgbouncerBinary(t)
	base := need(t, "DATABASE_URL")
	bouncer.once.Do(func() { bouncer.addr, bouncer.err = startBouncer(bin, base) })
	require.NoError(t, bouncer.err, "cannot start the test PgBouncer")
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Host = bouncer.addr
	return u.String()
}

// PooledDB returns an open, migrated database of the test's own whose pool
// goes through PgBouncer in transaction mode (PgBouncerURL) and whose
// sessions (the key listener, the status lock, migrations) connect directly
// (storage.Config.DirectURL), as a deployment behind PgBouncer runs.
func PooledDB(t testing.TB) *storage.DB {
	t.Helper()
	direct := DatabaseURL(t)
	ctx := context.Background()
	db, err := storage.Open(ctx, storage.Config{URL: PgBouncerURL(t, direct), DirectURL: direct})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	_, _, err = db.Migrate(ctx)
	require.NoError(t, err)
	return db
}

// EachDB runs f on a migrated database of its own, as subtests Direct
// (storetest.DB) and PgBouncer (PooledDB).
func EachDB(t *testing.T, f func(t *testing.T, db *storage.DB)) {
	t.Run("Direct", func(t *testing.T) { f(t, DB(t)) })
	t.Run("PgBouncer", func(t *testing.T) { f(t, PooledDB(t)) })
}

// StopPgBouncer stops the test PgBouncer, if one was started. Call it from
// TestMain after m.Run.
func StopPgBouncer() {
	if bouncer.cmd != nil {
		_ = bouncer.cmd.Process.Kill()
		<-bouncer.done
		bouncer.cmd = nil
	}
	if bouncer.dir != "" {
		os.RemoveAll(bouncer.dir)
	}
}

// pgbouncerBinary finds pgbouncer, which Debian installs in /usr/sbin.
func pgbouncerBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	return needBinary(t, "pgbouncer", "pgbouncer")
}

func startBouncer(bin, base string) (string, error) {
	srv, err := pgx.ParseConfig(base)
	if err != nil {
		return "", fmt.Errorf("DATABASE_URL: %w", err)
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		return "", err
	}
	bouncer.dir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	// Every database of the server, as the server's user: "any" takes
	// clients at their word, which a loopback test may.
	target := fmt.Sprintf("host=%s port=%d user=%s", srv.Host, srv.Port, srv.User)
	if srv.Password != "" {
		target += " password=" + srv.Password
	}
	ini := strings.Join([]string{
		"[databases]",
		"* = " + target,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(port),
		"unix_socket_dir =",
		"auth_type = any",
		"pool_mode = transaction",
		"max_client_conn = 1000",
		"default_pool_size = 20",
		"",
	}, "\n")
	path := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(path, []byte(ini), 0o644); err != nil {
		return "", err
	}
	logf, err := os.Create(filepath.Join(dir, "pgbouncer.log"))
	if err != nil {
		return "", err
	}
	defer logf.Close()
	args := []string{path}
	if os.Geteuid() == 0 { // PgBouncer refuses to run as root
		name, err := unprivilegedUser()
		if err != nil {
			return "", err
		}
		args = []string{"-u", name, path}
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("cannot start pgbouncer: %w", err)
	}
	bouncer.cmd, bouncer.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(bouncer.done)
	}()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Host = addr
	for {
		c, err := pgx.Connect(ctx, u.String())
		if err == nil {
			err = c.Ping(ctx)
			c.Close(ctx)
			if err == nil {
				return addr, nil
			}
		}
		select {
		case <-ctx.Done():
		case <-bouncer.done:
		case <-time.After(50 * time.Millisecond):
			continue
		}
		log, _ := os.ReadFile(logf.Name())
		return "", fmt.Errorf("pgbouncer does not answer on %s: %w\n%s", addr, err, log)
	}
}

// unprivilegedUser names the account root runs PgBouncer as.
func unprivilegedUser() (string, error) {
	for _, name := range []string{"postgres", "nobody"} {
		if _, err := user.Lookup(name); err == nil {
			return name, nil
		}
	}
	return "", fmt.Errorf("cannot run pgbouncer as root, and neither postgres nor nobody exists")
}

// FreePort returns a loopback port nothing listens on now, for a server a
// test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	require.NoError(t, err)
	return p
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pgbouncerName is the pooler's program and process name.
const pgbouncerName = "pgbouncer"

// lookPgBouncer finds pgbouncer, which Debian installs in /usr/sbin (not
// on every user's PATH).
func lookPgBouncer() (string, bool) {
	if p, err := exec.LookPath(pgbouncerName); err == nil {
		return p, true
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", true
	}
	return "", false
}

// findPgBouncer returns the path of pgbouncer. When it is missing and
// needed, root installs the Debian package pgbouncer. For the tests, which
// start PgBouncers of their own (need false), anyone else is told how and
// those tests skip outside CI; to start one (need true) it is an error.
func findPgBouncer(ctx context.Context, in *installer, need bool) (string, error) {
	if p, ok := lookPgBouncer(); ok {
		return p, nil
	}
	if !isRoot() && !need {
		logf("pgbouncer is missing: the PgBouncer tests will skip (install the Debian package pgbouncer, or run as root)")
		return "", nil
	}
	if err := in.install(ctx, "pgbouncer", "pgbouncer"); err != nil {
		return "", err
	}
	p, ok := lookPgBouncer()
	if !ok {
		return "", fmt.Errorf("cannot find pgbouncer after installing it")
	}
	return p, nil
}

func (s *stack) pgbouncerDir() string     { return s.path("pgbouncer") }
func (s *stack) pgbouncerINI() string     { return filepath.Join(s.pgbouncerDir(), "pgbouncer.ini") }
func (s *stack) pgbouncerPIDFile() string { return filepath.Join(s.pgbouncerDir(), "pgbouncer.pid") }
func (s *stack) pgbouncerLog() string     { return filepath.Join(s.pgbouncerDir(), "pgbouncer.log") }

// pgbouncerRunning returns the port of the PgBouncer started from .data, if
// it runs.
func (s *stack) pgbouncerRunning() (int, bool) {
	pid, ok := readPID(s.pgbouncerPIDFile())
	if !ok || !processAlive(pid, pgbouncerName) {
		return 0, false
	}
	b, err := os.ReadFile(s.pgbouncerINI())
	if err != nil {
		return 0, false
	}
	port, ok := iniPort(string(b))
	return port, ok
}

// iniPort reads listen_port from a pgbouncer.ini.
func iniPort(ini string) (int, bool) {
	for _, line := range strings.Split(ini, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "listen_port" {
			port, err := strconv.Atoi(strings.TrimSpace(v))
			return port, err == nil && port > 0
		}
	}
	return 0, false
}

// pgbouncerINI is the configuration of a loopback PgBouncer in transaction
// mode in front of the dev PostgreSQL on pgPort, for every database, as
// the dev cluster's superuser (the cluster trusts loopback, so does the
// pooler).
func pgbouncerINI(dir string, pgPort, port int) string {
	return strings.Join([]string{
		"[databases]",
		fmt.Sprintf("* = host=127.0.0.1 port=%d user=%s", pgPort, pgUser),
		"",
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(port),
		"unix_socket_dir =",
		"auth_type = any",
		"pool_mode = transaction",
		"max_client_conn = 1000",
		"default_pool_size = 20",
		"logfile = " + filepath.Join(dir, "pgbouncer.log"),
		"pidfile = " + filepath.Join(dir, "pgbouncer.pid"),
		"",
	}, "\n")
}

// upPgBouncer starts PgBouncer in transaction mode in front of the
// PostgreSQL on pgPort, on port (0: a free one), and returns its port. One
// already running from .data is left alone.
func (s *stack) upPgBouncer(ctx context.Context, bin string, a account, pgPort, port int) (int, error) {
	if running, ok := s.pgbouncerRunning(); ok {
		logf("pgbouncer already running on %s", loopback(running))
		return running, nil
	}
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("cannot find a free port for pgbouncer: %w", err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	} else if err := checkPortFree(port, "--pgbouncer-port"); err != nil {
		return 0, err
	}
	dir := s.pgbouncerDir()
	if err := a.ensureDir(dir, 0o750); err != nil {
		return 0, err
	}
	if err := os.WriteFile(s.pgbouncerINI(), []byte(pgbouncerINI(dir, pgPort, port)), 0o640); err != nil {
		return 0, fmt.Errorf("cannot write %s: %w", s.rel(s.pgbouncerINI()), err)
	}
	if err := a.ownTree(dir); err != nil {
		return 0, err
	}
	cmd := a.command(ctx, dir, bin, "-d", s.pgbouncerINI()) // -d: daemonize once listening
	if _, err := runOutput(cmd); err != nil {
		return 0, withLog(fmt.Errorf("cannot start pgbouncer: %w", err), s.rel(s.pgbouncerLog()))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", loopback(port), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return 0, withLog(fmt.Errorf("cannot reach pgbouncer on %s: %w", loopback(port), err), s.rel(s.pgbouncerLog()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	pid, _ := readPID(s.pgbouncerPIDFile())
	logf("pgbouncer (transaction mode) started on %s as user %s (pid %d, dir %s)", loopback(port), a.name, pid, s.rel(dir))
	return port, nil
}

// downPgBouncer stops the PgBouncer of .data, if it runs.
func (s *stack) downPgBouncer() error {
	pid, ok := readPID(s.pgbouncerPIDFile())
	if !ok || !processAlive(pid, pgbouncerName) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("cannot stop pgbouncer (pid %d): %w", pid, err)
	}
	if err := waitExit(pid, pgbouncerName, 15*time.Second); err != nil {
		return err
	}
	logf("pgbouncer stopped (pid %d)", pid)
	return nil
}

// appendPgBouncerEnv adds PGBOUNCER_URL, the dev database through the
// pooler, to services.env. Run the gateway on it with DATABASE_URL set to
// it and DATABASE_DIRECT_URL to the direct one.
func appendPgBouncerEnv(env []byte, port int) []byte {
	return fmt.Appendf(env, "PGBOUNCER_URL=postgres://%s@127.0.0.1:%d/%s?sslmode=disable\n", pgUser, port, pgDatabase)
}

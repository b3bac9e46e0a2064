package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// pgLibDir holds Debian's PostgreSQL server binaries, one directory per
	// major version: /usr/lib/postgresql/15/bin/initdb.
	pgLibDir = "/usr/lib/postgresql"
	// pgUser is the cluster's superuser; trust auth, so no password.
	pgUser = "gateway"
	// pgDatabase is the database the gateway and its tests use.
	pgDatabase = "gateway"
	// pgConfName is the settings file devstack writes into the cluster.
	pgConfName = "devstack.conf"
)

var errNoPostgres = errors.New("no PostgreSQL server binaries")

// postgres locates one installation's programs.
type postgres struct {
	version string // major version, such as "15"; "" when found on PATH
	bin     string // directory holding initdb, pg_ctl, pg_isready and psql
}

func (pg postgres) tool(name string) string { return filepath.Join(pg.bin, name) }

// findPostgres locates the server binaries, installing them when missing and
// allowed. An existing cluster needs binaries of its own major version.
func findPostgres(ctx context.Context, in *installer, pgData string) (postgres, error) {
	want := clusterVersion(pgData)
	pg, err := lookPostgres(want)
	if !errors.Is(err, errNoPostgres) {
		return pg, err
	}
	if err := in.install(ctx, "postgresql", "the PostgreSQL server binaries (initdb, pg_ctl)"); err != nil {
		return postgres{}, err
	}
	return lookPostgres(want)
}

// lookPostgres finds the binaries of version want, or of the highest version
// installed when want is "". Outside Debian's layout it falls back to PATH.
func lookPostgres(want string) (postgres, error) {
	versions := installedVersions(pgLibDir)
	if len(versions) == 0 {
		if p, err := exec.LookPath("pg_ctl"); err == nil {
			return postgres{bin: filepath.Dir(p)}, nil
		}
		return postgres{}, errNoPostgres
	}
	if want == "" {
		want, _ = highestVersion(versions)
	} else if !slices.Contains(versions, want) {
		return postgres{}, fmt.Errorf("cannot run the cluster in .data/pg: PostgreSQL %s made it, but only %s is installed under %s; remove it with make clean-data",
			want, strings.Join(versions, ", "), pgLibDir)
	}
	return postgres{version: want, bin: filepath.Join(pgLibDir, want, "bin")}, nil
}

// installedVersions lists the version directories under lib whose bin holds
// initdb and pg_ctl.
func installedVersions(lib string) []string {
	entries, err := os.ReadDir(lib)
	if err != nil {
		return nil
	}
	var versions []string
	for _, e := range entries {
		bin := filepath.Join(lib, e.Name(), "bin")
		if _, ok := parseVersion(e.Name()); ok &&
			isFile(filepath.Join(bin, "initdb")) && isFile(filepath.Join(bin, "pg_ctl")) {
			versions = append(versions, e.Name())
		}
	}
	return versions
}

// highestVersion picks the highest version among directory names such as
// "9.6", "15" and "16"; names that are not dotted numbers are ignored.
func highestVersion(names []string) (string, bool) {
	best, bestParts := "", []int(nil)
	for _, name := range names {
		parts, ok := parseVersion(name)
		if ok && (bestParts == nil || slices.Compare(parts, bestParts) > 0) {
			best, bestParts = name, parts
		}
	}
	return best, bestParts != nil
}

func parseVersion(s string) ([]int, bool) {
	fields := strings.Split(s, ".")
	parts := make([]int, len(fields))
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || f == "" || f[0] == '+' {
			return nil, false
		}
		parts[i] = n
	}
	return parts, true
}

// clusterVersion is the major version that made the cluster in pgData, or ""
// when there is no cluster.
func clusterVersion(pgData string) string {
	b, err := os.ReadFile(filepath.Join(pgData, "PG_VERSION"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// postmasterStatus reads the cluster's postmaster.pid and reports the server's
// pid and port and whether that process still runs.
func postmasterStatus(pgData string) (pid, port int, running bool) {
	b, err := os.ReadFile(filepath.Join(pgData, "postmaster.pid"))
	if err != nil {
		return 0, 0, false
	}
	pid, port, err = parsePostmasterPID(b)
	if err != nil {
		return 0, 0, false
	}
	return pid, port, processAlive(pid, "postgres")
}

// parsePostmasterPID parses postmaster.pid, whose first line is the pid and
// whose fourth is the port.
func parsePostmasterPID(b []byte) (pid, port int, err error) {
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, 0, fmt.Errorf("cannot parse postmaster.pid: %d lines, want at least 4", len(lines))
	}
	if pid, err = strconv.Atoi(strings.TrimSpace(lines[0])); err != nil {
		return 0, 0, fmt.Errorf("cannot parse pid in postmaster.pid: %w", err)
	}
	if port, err = strconv.Atoi(strings.TrimSpace(lines[3])); err != nil {
		return 0, 0, fmt.Errorf("cannot parse port in postmaster.pid: %w", err)
	}
	return pid, port, nil
}

func (s *stack) pgLog() string { return filepath.Join(s.logDir(), "postgres.log") }

func (s *stack) upPostgres(ctx context.Context, pg postgres, a account, port int) error {
	if pid, runningPort, running := postmasterStatus(s.pgData()); running {
		if runningPort != port {
			return fmt.Errorf("cannot start PostgreSQL on port %d: the cluster in %s already runs on port %d (pid %d); stop it first with: go run ./cmd/devstack down",
				port, s.rel(s.pgData()), runningPort, pid)
		}
		if err := pg.waitReady(ctx, port, 30*time.Second); err != nil {
			return err
		}
		logf("postgres already running on %s (pid %d)", loopback(port), pid)
		return pg.ensureDatabase(ctx, port)
	}
	if err := checkPortFree(port, "--pg-port"); err != nil {
		return err
	}
	if err := s.initPostgres(ctx, pg, a); err != nil {
		return err
	}
	if err := s.configurePostgres(a, port); err != nil {
		return err
	}
	if err := s.startPostgres(ctx, pg, a); err != nil {
		return err
	}
	pid, _, _ := postmasterStatus(s.pgData())
	logf("postgres %s started on %s as user %s (pid %d, data %s, log %s)",
		pg.version, loopback(port), a.name, pid, s.rel(s.pgData()), s.rel(s.pgLog()))
	return pg.ensureDatabase(ctx, port)
}

// initPostgres creates the cluster unless it exists.
func (s *stack) initPostgres(ctx context.Context, pg postgres, a account) error {
	dir := s.pgData()
	if err := a.ensureDir(dir, 0o700); err != nil {
		return err
	}
	if clusterVersion(dir) != "" {
		return nil
	}
	logf("creating a PostgreSQL cluster in %s", s.rel(dir))
	cmd := a.command(ctx, s.data, pg.tool("initdb"),
		"--pgdata", dir, "--username", pgUser, "--auth", "trust",
		"--encoding", "UTF8", "--locale", "C", "--no-sync")
	if _, err := runOutput(cmd); err != nil {
		return fmt.Errorf("cannot create PostgreSQL cluster: %w", err)
	}
	return nil
}

// configurePostgres writes the settings file for port and makes sure
// postgresql.conf includes it.
func (s *stack) configurePostgres(a account, port int) error {
	conf := filepath.Join(s.pgData(), pgConfName)
	if err := os.WriteFile(conf, pgConf(port), 0o600); err != nil {
		return fmt.Errorf("cannot write %s: %w", s.rel(conf), err)
	}
	if err := a.ownTree(conf); err != nil {
		return err
	}
	return includeConf(filepath.Join(s.pgData(), "postgresql.conf"), pgConfName)
}

// pgConf renders the settings devstack applies on every start.
func pgConf(port int) []byte {
	return fmt.Appendf(nil, `# Written by cmd/devstack on every start: change its flags, not this file.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = ''
max_connections = 200
# For development and tests only: a crash may lose or corrupt data.
fsync = off
synchronous_commit = off
full_page_writes = off
`, port)
}

// includeConf appends an include of name to the server's postgresql.conf
// once.
func includeConf(path, name string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", path, err)
	}
	line := "include_if_exists = '" + name + "'"
	if bytes.Contains(b, []byte(line)) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", path, err)
	}
	_, err = fmt.Fprintf(f, "\n# Settings of cmd/devstack, rewritten on every start.\n%s\n", line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cannot append to %s: %w", path, err)
	}
	return nil
}

func (s *stack) startPostgres(ctx context.Context, pg postgres, a account) error {
	if err := a.ensureDir(s.logDir(), 0o755); err != nil {
		return err
	}
	cmd := a.command(ctx, s.data, pg.tool("pg_ctl"), "start",
		"--pgdata", s.pgData(), "--log", s.pgLog(), "--wait", "--timeout", "60", "--silent")
	if _, err := runOutput(cmd); err != nil {
		return withLog(fmt.Errorf("cannot start PostgreSQL: %w", err), s.rel(s.pgLog()))
	}
	return nil
}

// waitReady waits until the server accepts connections on port.
func (pg postgres) waitReady(ctx context.Context, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cmd := exec.CommandContext(ctx, pg.tool("pg_isready"), "--quiet", "--timeout", "2",
			"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--username", pgUser, "--dbname", "postgres")
		err := cmd.Run()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("cannot reach PostgreSQL on %s: not accepting connections after %s", loopback(port), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ensureDatabase creates the gateway database unless it exists.
func (pg postgres) ensureDatabase(ctx context.Context, port int) error {
	cmd := exec.CommandContext(ctx, pg.tool("psql"), "--no-psqlrc", "--set", "ON_ERROR_STOP=1",
		"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--username", pgUser, "--dbname", "postgres")
	cmd.Stdin = strings.NewReader("SELECT 'CREATE DATABASE " + pgDatabase + "' " +
		"WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '" + pgDatabase + "')\\gexec\n")
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10")
	out, err := runOutput(cmd)
	if err != nil {
		return fmt.Errorf("cannot create database %s: %w", pgDatabase, err)
	}
	if strings.Contains(out, "CREATE DATABASE") {
		logf("created database %s", pgDatabase)
	}
	return nil
}

func (s *stack) downPostgres(ctx context.Context) error {
	pid, port, running := postmasterStatus(s.pgData())
	if !running {
		logf("postgres is not running")
		return nil
	}
	pg, err := lookPostgres(clusterVersion(s.pgData()))
	if err != nil {
		return fmt.Errorf("cannot stop PostgreSQL: %w", err)
	}
	a, err := serviceAccount(ctx, s.pgData(), false)
	if err != nil {
		return err
	}
	cmd := a.command(ctx, s.data, pg.tool("pg_ctl"), "stop",
		"--pgdata", s.pgData(), "--mode", "fast", "--wait", "--timeout", "60", "--silent")
	if _, err := runOutput(cmd); err != nil {
		return fmt.Errorf("cannot stop PostgreSQL: %w", err)
	}
	logf("postgres stopped (pid %d on %s)", pid, loopback(port))
	return nil
}

func isFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}

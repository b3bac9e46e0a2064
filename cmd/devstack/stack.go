package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// errNoData reports that the repository has no .data directory yet.
var errNoData = errors.New("no .data directory")

// errNotUp reports that the services are not running.
var errNotUp = errors.New("services are not up; start them with: go run ./cmd/devstack up")

// stack is the set of servers under one repository's .data directory.
//
// Layout:
//
//	.data/pg/               PostgreSQL cluster
//	.data/log/postgres.log  PostgreSQL server log
//	.data/redis/            Redis working directory, pid file and log
//	.data/pgbouncer/        PgBouncer configuration, pid file and log (up --pgbouncer)
//	.data/services.env      connection URLs for the Makefile and tests
//	.data/devstack.lock     serializes concurrent up and down runs
type stack struct {
	root string // repository root, absolute
	data string // root/.data
	lock *os.File
}

type upOptions struct {
	redis     bool
	chromium  bool
	pgPort    int
	redisPort int
	// pgbouncer starts PgBouncer in transaction mode in front of
	// PostgreSQL, on pgbouncerPort (0: a free port).
	pgbouncer     bool
	pgbouncerPort int
	// pgbouncerBinary installs pgbouncer when missing, for the tests that
	// start their own (on with redis, as make test runs up).
	pgbouncerBinary bool
}

// openStack finds the repository root and locks its .data directory, creating
// it when create is set; otherwise a missing .data is errNoData.
func openStack(create bool) (*stack, error) {
	root, err := findRoot()
	if err != nil {
		return nil, err
	}
	s := &stack{root: root, data: dataDir(root)}
	if create {
		if err := os.MkdirAll(s.data, 0o755); err != nil {
			return nil, fmt.Errorf("cannot create %s: %w", s.rel(s.data), err)
		}
	} else if _, err := os.Stat(s.data); errors.Is(err, fs.ErrNotExist) {
		return nil, errNoData
	}
	if err := s.acquireLock(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *stack) acquireLock() error {
	f, err := os.OpenFile(s.path("devstack.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("cannot open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return fmt.Errorf("cannot lock %s: %w", s.rel(f.Name()), err)
	}
	s.lock = f
	return nil
}

// close releases the lock.
func (s *stack) close() {
	if s.lock != nil {
		s.lock.Close()
	}
}

func (s *stack) up(ctx context.Context, opt upOptions) error {
	var in installer
	pg, err := findPostgres(ctx, &in, s.pgData())
	if err != nil {
		return err
	}
	var redisBin string
	if opt.redis {
		if redisBin, err = findRedis(ctx, &in); err != nil {
			return err
		}
	}
	var bouncerBin string
	if opt.pgbouncer || opt.pgbouncerBinary {
		if bouncerBin, err = findPgBouncer(ctx, &in, opt.pgbouncer); err != nil {
			return err
		}
	}
	acct, err := serviceAccount(ctx, s.pgData(), true)
	if err != nil {
		return err
	}
	if err := acct.checkTraverse(s.data); err != nil {
		return err
	}

	if err := s.upPostgres(ctx, pg, acct, opt.pgPort); err != nil {
		return err
	}
	redisPort := 0
	switch {
	case opt.redis:
		if err := s.upRedis(ctx, redisBin, acct, opt.redisPort); err != nil {
			return err
		}
		redisPort = opt.redisPort
	case s.redisRunning(opt.redisPort):
		redisPort = opt.redisPort // started earlier with --redis: keep advertising it
	}
	bouncerPort := 0
	if opt.pgbouncer {
		if bouncerPort, err = s.upPgBouncer(ctx, bouncerBin, acct, opt.pgPort, opt.pgbouncerPort); err != nil {
			return err
		}
	} else if port, running := s.pgbouncerRunning(); running {
		bouncerPort = port // started earlier with --pgbouncer: keep advertising it
	}
	chromium, err := findChromium(ctx, &in, opt.chromium)
	if err != nil {
		return err
	}
	env := renderEnv(opt.pgPort, redisPort, chromium)
	if bouncerPort != 0 {
		env = appendPgBouncerEnv(env, bouncerPort)
	}
	if err := s.writeEnv(env); err != nil {
		return err
	}
	logf("wrote %s", s.rel(s.envFile()))
	return nil
}

func (s *stack) down(ctx context.Context) error {
	if err := os.Remove(s.envFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cannot remove %s: %w", s.rel(s.envFile()), err)
	}
	if err := s.downPgBouncer(); err != nil {
		return err
	}
	if err := s.downRedis(); err != nil {
		return err
	}
	return s.downPostgres(ctx)
}

// readEnv returns the content of services.env, or errNotUp when PostgreSQL
// does not run.
func (s *stack) readEnv() ([]byte, error) {
	env, err := os.ReadFile(s.envFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNotUp
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", s.rel(s.envFile()), err)
	}
	if _, _, running := postmasterStatus(s.pgData()); !running {
		return nil, errNotUp
	}
	return env, nil
}

// writeEnv replaces services.env atomically.
func (s *stack) writeEnv(env []byte) error {
	tmp := s.envFile() + ".tmp"
	if err := os.WriteFile(tmp, env, 0o644); err != nil {
		return fmt.Errorf("cannot write %s: %w", s.rel(tmp), err)
	}
	if err := os.Rename(tmp, s.envFile()); err != nil {
		return fmt.Errorf("cannot replace %s: %w", s.rel(s.envFile()), err)
	}
	return nil
}

func (s *stack) path(elem ...string) string {
	return filepath.Join(append([]string{s.data}, elem...)...)
}

func (s *stack) pgData() string   { return s.path("pg") }
func (s *stack) logDir() string   { return s.path("log") }
func (s *stack) redisDir() string { return s.path("redis") }
func (s *stack) envFile() string  { return s.path("services.env") }

// rel shortens a path under the repository root for messages.
func (s *stack) rel(p string) string {
	if r, err := filepath.Rel(s.root, p); err == nil && filepath.IsLocal(r) {
		return r
	}
	return p
}

func dataDir(root string) string { return filepath.Join(root, ".data") }

// findRoot returns the repository root: the nearest directory holding go.mod,
// starting from the working directory.
func findRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("cannot get working directory: %w", err)
	}
	return findRootFrom(wd)
}

func findRootFrom(start string) (string, error) {
	dir := filepath.Clean(start)
	for {
		if info, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && info.Mode().IsRegular() {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("cannot find repository root: no go.mod in %s or any parent directory", start)
		}
		dir = parent
	}
}

// renderEnv renders services.env. redisPort 0 leaves REDIS_URL out, an
// empty chromium leaves CHROMIUM_PATH out.
func renderEnv(pgPort, redisPort int, chromium string) []byte {
	env := fmt.Appendf(nil, "DATABASE_URL=postgres://%s@127.0.0.1:%d/%s?sslmode=disable\n", pgUser, pgPort, pgDatabase)
	if redisPort != 0 {
		env = fmt.Appendf(env, "REDIS_URL=redis://127.0.0.1:%d/0\n", redisPort)
	}
	if chromium != "" {
		env = fmt.Appendf(env, "CHROMIUM_PATH=%s\n", chromium)
	}
	return env
}

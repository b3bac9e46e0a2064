// Command devstack runs private PostgreSQL and Redis servers for development
// and tests, under .data/ in the repository root.
//
// Usage:
//
//	devstack up [--redis] [--chromium] [--pgbouncer] [--pg-port 54329] [--redis-port 63799] [--pgbouncer-port 0]
//	devstack down
//	devstack env
//
// up is idempotent: a server that already runs from .data/ on the requested
// port is left alone. It then writes .data/services.env with DATABASE_URL (and
// REDIS_URL when Redis runs, CHROMIUM_PATH when Chromium is installed), which
// the Makefile sources. With --chromium (the default with --redis, which is
// how make test brings the services up) a missing Chromium is installed for
// the approval-page browser tests, and a missing pgbouncer for the tests
// that start PgBouncers of their own. With --pgbouncer, a PgBouncer in
// transaction mode runs in front of PostgreSQL (on a free port unless
// --pgbouncer-port says) and services.env gains PGBOUNCER_URL: run the
// gateway with DATABASE_URL=$PGBOUNCER_URL and DATABASE_DIRECT_URL set to
// the direct URL to try it behind a pooler. The servers listen on
// 127.0.0.1 only and trade durability for speed (fsync off, no Redis
// persistence): they are for development and tests, never for real data.
//
// Missing server binaries are installed with apt-get when devstack runs as
// root. PostgreSQL refuses to run as root, so root hands both servers to an
// unprivileged system user: postgres when the Debian package created it,
// otherwise gwdata.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const (
	defaultPGPort    = 54329
	defaultRedisPort = 63799
)

const usage = `usage: devstack <command> [flags]

commands:
  up [--redis] [--chromium] [--pgbouncer] [--pg-port N] [--redis-port N] [--pgbouncer-port N]
        start PostgreSQL (and Redis with --redis, PgBouncer in transaction
        mode with --pgbouncer) under .data/ and write .data/services.env;
        does nothing for a server already running; --chromium (default
        with --redis) installs Chromium when missing; --redis also
        installs pgbouncer when missing, for the tests
  down  stop the servers started by up
  env   print .data/services.env (fails when the servers are not up)
`

// errUsage reports a command line that could not be understood; the usage
// text has already been printed.
var errUsage = errors.New("invalid command line")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	switch {
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "devstack: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "up":
		return runUp(ctx, args[1:])
	case "down":
		return runDown(ctx, args[1:])
	case "env":
		return runEnv(args[1:])
	case "help", "-h", "-help", "--help":
		fmt.Fprint(os.Stdout, usage)
		return nil
	}
	fmt.Fprintf(os.Stderr, "devstack: unknown command %q\n\n%s", args[0], usage)
	return errUsage
}

func runUp(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	withRedis := fs.Bool("redis", false, "also start Redis")
	withChromium := fs.Bool("chromium", false, "also make sure Chromium is installed, for the browser tests (default: on with --redis, as make test runs it)")
	pgPort := fs.Int("pg-port", defaultPGPort, "PostgreSQL port on 127.0.0.1")
	redisPort := fs.Int("redis-port", defaultRedisPort, "Redis port on 127.0.0.1")
	withBouncer := fs.Bool("pgbouncer", false, "also start PgBouncer in transaction mode in front of PostgreSQL")
	bouncerPort := fs.Int("pgbouncer-port", 0, "PgBouncer port on 127.0.0.1 (0: a free port)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, p := range []int{*pgPort, *redisPort} {
		if p < 1 || p > 65535 {
			return fmt.Errorf("cannot use port %d: ports run from 1 to 65535", p)
		}
	}
	if *bouncerPort < 0 || *bouncerPort > 65535 || *bouncerPort == *pgPort {
		return fmt.Errorf("cannot give PgBouncer port %d", *bouncerPort)
	}
	if *withRedis && *pgPort == *redisPort {
		return fmt.Errorf("cannot give PostgreSQL and Redis the same port %d", *pgPort)
	}

	s, err := openStack(true)
	if err != nil {
		return err
	}
	defer s.close()
	chromiumSet := false
	fs.Visit(func(f *flag.Flag) { chromiumSet = chromiumSet || f.Name == "chromium" })
	if !chromiumSet {
		*withChromium = *withRedis // the test services: make test runs up --redis
	}
	return s.up(ctx, upOptions{redis: *withRedis, chromium: *withChromium, pgPort: *pgPort, redisPort: *redisPort,
		pgbouncer: *withBouncer, pgbouncerPort: *bouncerPort, pgbouncerBinary: *withRedis})
}

func runDown(ctx context.Context, args []string) error {
	if err := parseFlags(flag.NewFlagSet("down", flag.ContinueOnError), args); err != nil {
		return err
	}
	s, err := openStack(false)
	if errors.Is(err, errNoData) {
		logf("nothing to stop: there is no .data directory")
		return nil
	}
	if err != nil {
		return err
	}
	defer s.close()
	return s.down(ctx)
}

func runEnv(args []string) error {
	if err := parseFlags(flag.NewFlagSet("env", flag.ContinueOnError), args); err != nil {
		return err
	}
	root, err := findRoot()
	if err != nil {
		return err
	}
	s := &stack{root: root, data: dataDir(root)}
	env, err := s.readEnv()
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(env)
	return err
}

// parseFlags parses a subcommand's flags and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return errUsage // the flag package has printed the problem and the defaults
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "devstack %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}

// logf prints one short progress line on stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "devstack: "+format+"\n", args...)
}

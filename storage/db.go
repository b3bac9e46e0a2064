// Package storage is the gateway's PostgreSQL and Redis layer: the pool,
// embedded schema migrations, the queries behind keys and identities, the
// invalidation listener that keeps hotpath's key cache true, and the Redis
// client.
package storage

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// versionTable records the applied schema version (one row, managed by tern).
const versionTable = "public.schema_version"

// Config configures the PostgreSQL pool.
//
// PgBouncer in transaction mode. The pool may go through a pooler that
// hands the server connection back after every transaction: nothing the
// gateway runs on the pool relies on session state outside a transaction
// (advisory locks there are transaction-scoped, set_config is local). What
// needs a session of its own (the key listener's LISTEN, the status
// prober's advisory lock, the migrations' lock) connects to DirectURL
// instead. Setting DirectURL says that URL is pooled: its queries then run
// in pgx's cache_describe mode (no named prepared statements, which
// PgBouncer before 1.21 cannot follow across server connections) unless
// the URL names a default_query_exec_mode itself.
type Config struct {
	// URL is a PostgreSQL connection URL or DSN. Required.
	URL string
	// DirectURL reaches the same database without a pooler, for the
	// connections that hold a session (see above). Empty: URL is direct
	// and serves them too.
	DirectURL string
	// MaxConns bounds the pool. Default 16.
	MaxConns int32
	// ConnectTimeout bounds establishing one connection. Default 5s.
	ConnectTimeout time.Duration
	// ReadURL, when set, names a streaming replica of the database that
	// takes the reads that tolerate staleness (replica.go). Optional.
	ReadURL string
	// ReadMaxLag is the staleness above which the replica is not read.
	// Default 1s.
	ReadMaxLag time.Duration
}

// Validate checks the configuration and fills in defaults.
func (c *Config) Validate() error {
	if c.URL == "" {
		return errors.New("database-url: must be set (DATABASE_URL)")
	}
	if _, err := pgxpool.ParseConfig(c.URL); err != nil {
		return fmt.Errorf("database-url: %w", err)
	}
	if c.DirectURL != "" {
		if _, err := pgx.ParseConfig(c.DirectURL); err != nil {
			return fmt.Errorf("database-direct-url: %w", err)
		}
		if c.DirectURL == c.URL {
			// A session lock taken through the pooler would stay on a
			// server connection the pooler keeps, held for nobody.
			return errors.New("database-direct-url: must reach PostgreSQL without the pooler database-url goes through, not be the same URL")
		}
	}
	if c.MaxConns == 0 {
		c.MaxConns = 16
	}
	if c.MaxConns < 1 {
		return errors.New("database-max-conns: must be at least 1")
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.ReadURL != "" {
		if _, err := pgxpool.ParseConfig(c.ReadURL); err != nil {
			return fmt.Errorf("database-read-url: %w", err)
		}
	}
	if c.ReadMaxLag == 0 {
		c.ReadMaxLag = time.Second
	}
	if c.ReadMaxLag < 0 {
		return errors.New("database-read-max-lag: must be positive")
	}
	return nil
}

// DB is the gateway's handle on PostgreSQL.
type DB struct {
	Pool   *pgxpool.Pool
	cfg    Config
	direct *pgx.ConnConfig // the sessions' connections: DirectURL, else the pool's
	// replica, when configured, takes the reads that tolerate staleness.
	replica *replica
}

// Open creates the pool. It does not wait for the database to answer, so a
// gateway can start (and report not ready) while PostgreSQL is down.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("cannot parse database url: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	direct := pc.ConnConfig.Copy()
	if cfg.DirectURL != "" {
		if direct, err = pgx.ParseConfig(cfg.DirectURL); err != nil {
			return nil, fmt.Errorf("cannot parse database direct url: %w", err)
		}
		direct.ConnectTimeout = cfg.ConnectTimeout
		if !namesExecMode(cfg.URL) {
			pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("cannot create database pool: %w", err)
	}
	db := &DB{Pool: pool, cfg: cfg, direct: direct}
	if cfg.ReadURL != "" {
		if db.replica, err = openReplica(ctx, cfg); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return db, nil
}

// namesExecMode reports whether a connection string sets pgx's
// default_query_exec_mode.
func namesExecMode(conn string) bool { return strings.Contains(conn, "default_query_exec_mode") }

// connectDirect opens a connection of its own, outside the pool and any
// pooler, for state that lives as long as the session; name marks it in
// pg_stat_activity.
func (db *DB) connectDirect(ctx context.Context, name string) (*pgx.Conn, error) {
	cc := db.direct.Copy()
	cc.RuntimeParams["application_name"] = name
	return pgx.ConnectConfig(ctx, cc)
}

// Close closes the pools.
func (db *DB) Close() {
	db.Pool.Close()
	if db.replica != nil {
		db.replica.pool.Close()
	}
}

// Ping checks that the database answers.
func (db *DB) Ping(ctx context.Context) error { return db.Pool.Ping(ctx) }

// Unavailable reports whether err says the database cannot answer right
// now rather than that the request was wrong: no connection could be made
// (pgx's ConnectError, whatever the dial or the handshake said), a
// connection was lost or the pool is closed, the server is shutting down or
// not yet accepting connections, or it did not answer in time. The same
// request may succeed when sent again, so the API answers it 503
// service_unavailable, never internal_error.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var (
		connect *pgconn.ConnectError
		netErr  net.Error
		pgErr   *pgconn.PgError
	)
	switch {
	case errors.As(err, &connect), errors.As(err, &netErr),
		errors.Is(err, puddle.ErrClosedPool), errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.Is(err, io.ErrUnexpectedEOF):
		// pgx returns it as it is when the server's end of a pooled
		// connection closed before its answer: the first query after
		// PostgreSQL went away.
		return true
	case errors.As(err, &pgErr):
		// Class 08 is connection_exception; 57P01 admin_shutdown, 57P02
		// crash_shutdown, 57P03 cannot_connect_now.
		return strings.HasPrefix(pgErr.Code, "08") ||
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	return false
}

// BinaryVersion is the schema version this binary's embedded migrations
// reach.
func BinaryVersion() int32 {
	names, err := migrate.FindMigrations(migrationsFS())
	if err != nil {
		panic(fmt.Sprintf("embedded migrations are broken: %v", err))
	}
	return int32(len(names))
}

func migrationsFS() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err)
	}
	return sub
}

// ErrSchemaNewer is Migrate's answer on a database a later release has
// migrated: this binary applies nothing. Migrations keep what the release
// before them reads and writes (each only adds, or changes what the earlier
// release never reads), so a release rolled back, or one still running
// beside a newer one, serves on the newer schema.
var ErrSchemaNewer = errors.New("the database schema is newer than this binary's")

// MigrationsApplicationName marks the migrations' connection in
// pg_stat_activity.
const MigrationsApplicationName = "gateway-migrate"

// Migrate applies every embedded migration the database lacks. tern holds a
// PostgreSQL session advisory lock while it works, so processes starting
// together migrate once and the others wait, then find nothing to do; the
// lock needs a session, so Migrate connects directly (Config.DirectURL).
func (db *DB) Migrate(ctx context.Context) (from, to int32, err error) {
	conn, err := db.connectDirect(ctx, MigrationsApplicationName)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot connect for migrations: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, err := migrate.NewMigrator(ctx, conn, versionTable)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot prepare migrations: %w", err)
	}
	if err := m.LoadMigrations(migrationsFS()); err != nil {
		return 0, 0, fmt.Errorf("cannot load migrations: %w", err)
	}
	if from, err = m.GetCurrentVersion(ctx); err != nil {
		return 0, 0, fmt.Errorf("cannot read schema version: %w", err)
	}
	if from > int32(len(m.Migrations)) {
		return from, from, fmt.Errorf("%w: version %d, this binary's %d", ErrSchemaNewer, from, len(m.Migrations))
	}
	if err := m.Migrate(ctx); err != nil {
		return from, 0, fmt.Errorf("cannot migrate: %w", err)
	}
	to, err = m.GetCurrentVersion(ctx)
	if err != nil {
		return from, 0, fmt.Errorf("cannot read schema version: %w", err)
	}
	return from, to, nil
}

// SchemaVersion reads the applied schema version without writing anything:
// 0 on a database never migrated.
func (db *DB) SchemaVersion(ctx context.Context) (int32, error) {
	var v int32
	err := db.Pool.QueryRow(ctx, "select version from "+versionTable).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cannot read schema version: %w", err)
	}
	return v, nil
}

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
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// versionTable records the applied schema version (one row, managed by tern).
const versionTable = "public.schema_version"

// Config configures the PostgreSQL pool.
type Config struct {
	// URL is a PostgreSQL connection URL or DSN. Required.
	URL string
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
	Pool *pgxpool.Pool
	cfg  Config
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
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("cannot create database pool: %w", err)
	}
	db := &DB{Pool: pool, cfg: cfg}
	if cfg.ReadURL != "" {
		if db.replica, err = openReplica(ctx, cfg); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return db, nil
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

// Migrate applies every embedded migration the database lacks. tern holds a
// PostgreSQL advisory lock while it works, so processes starting together
// migrate once and the others wait, then find nothing to do.
func (db *DB) Migrate(ctx context.Context) (from, to int32, err error) {
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot acquire connection for migrations: %w", err)
	}
	defer conn.Release()
	m, err := migrate.NewMigrator(ctx, conn.Conn(), versionTable)
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
		return from, from, fmt.Errorf("database schema version %d is newer than this binary's %d", from, len(m.Migrations))
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

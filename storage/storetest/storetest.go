// Package storetest gives tests their own PostgreSQL database and Redis
// connection on the servers `make test` starts (DATABASE_URL, REDIS_URL),
// and starts what those do not provide from the programs on PATH, once per
// test binary: a three-node Redis Cluster, a Redis primary behind a
// sentinel, and a PgBouncer in transaction mode in front of DATABASE_URL's
// server. Without a service or program a test skips, except under CI=true,
// where it fails: CI must never pass by skipping.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
)

func need(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v != "" {
		return v
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not set under CI: run the tests with `make test`, which starts the services", env)
	}
	t.Skipf("%s is not set; `make test` starts the services and sets it", env)
	return ""
}

// DatabaseURL creates an empty database for this test on the server at
// DATABASE_URL, drops it when the test ends, and returns its URL.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	base := need(t, "DATABASE_URL")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	require.NoError(t, err, "cannot connect to DATABASE_URL")
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "gwtest_" + hex.EncodeToString(rnd[:])
	_, err = admin.Exec(ctx, "create database "+name)
	require.NoError(t, err)
	admin.Close(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "drop database if exists "+name+" with (force)")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(base)
	require.NoError(t, err, "DATABASE_URL must be a postgres:// URL")
	u.Path = "/" + name
	return u.String()
}

// DB returns an open, migrated database of the test's own.
func DB(t testing.TB) *storage.DB {
	t.Helper()
	ctx := context.Background()
	db, err := storage.Open(ctx, storage.Config{URL: DatabaseURL(t)})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	_, _, err = db.Migrate(ctx)
	require.NoError(t, err)
	return db
}

// RedisURL returns REDIS_URL, under the same skip-or-fail rule.
func RedisURL(t testing.TB) string {
	t.Helper()
	return need(t, "REDIS_URL")
}

// Redis returns a client on REDIS_URL. Tests share the server, so keys must
// carry a prefix of the test's own (see Prefix).
func Redis(t testing.TB) rueidis.Client {
	t.Helper()
	c, err := storage.OpenRedis(context.Background(), need(t, "REDIS_URL"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// Prefix returns a random key prefix for a test's Redis keys.
func Prefix() string {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return "gwtest:" + hex.EncodeToString(rnd[:]) + ":"
}

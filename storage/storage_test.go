package storage_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

func TestMigrateConcurrentlyOnce(t *testing.T) {
	ctx := context.Background()
	url := storetest.DatabaseURL(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := storage.Open(ctx, storage.Config{URL: url, MaxConns: 2})
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			_, _, errs[i] = db.Migrate(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	db, err := storage.Open(ctx, storage.Config{URL: url})
	require.NoError(t, err)
	defer db.Close()
	v, err := db.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, storage.BinaryVersion(), v)
	from, to, err := db.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, from, to, "a second migration finds nothing to do")
}

func TestSchemaVersionOfEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	db, err := storage.Open(ctx, storage.Config{URL: storetest.DatabaseURL(t)})
	require.NoError(t, err)
	defer db.Close()
	v, err := db.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
}

// seed makes an organization with one member and returns both.
func seed(t *testing.T, db *storage.DB) (storage.Org, storage.User) {
	t.Helper()
	ctx := context.Background()
	org, err := db.CreateOrg(ctx, "Acme")
	require.NoError(t, err)
	u, err := db.CreateUser(ctx, "ada@example.com", org.ID, hotpath.RoleAdmin)
	require.NoError(t, err)
	return org, u
}

func TestKeysStoreOnlyHashes(t *testing.T) { storetest.EachDB(t, testKeysStoreOnlyHashes) }

func testKeysStoreOnlyHashes(t *testing.T, db *storage.DB) {
	ctx := context.Background()
	org, u := seed(t, db)
	cap := int64(2_500_000)
	issued, err := db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: org.ID, Kind: hotpath.KindDeveloper,
		Scopes: mustScopes(t, "chat", "memory"), Models: []string{"mira"}, SpendCapMicros: &cap})
	require.NoError(t, err)
	require.Equal(t, hotpath.TokenUser, hotpath.CheckToken([]byte(issued.AccessToken)))
	require.Equal(t, "bearer", issued.TokenType)
	require.Nil(t, issued.ExpiresAt, "developer keys never expire")
	require.Equal(t, storage.OrgRole{ID: org.ID, Name: "Acme", Role: hotpath.RoleAdmin}, issued.Org)

	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from api_keys
		where position(convert_to($1, 'UTF8') in hash) > 0 or hash = convert_to($1, 'UTF8')`, issued.AccessToken).Scan(&n))
	require.Zero(t, n)

	p, err := db.LookupKey(ctx, hotpath.HashToken([]byte(issued.AccessToken)))
	require.NoError(t, err)
	require.Equal(t, issued.KeyID, p.KeyID)
	require.Equal(t, u.ID, p.UserID)
	require.Equal(t, org.ID, p.OrgID)
	require.Equal(t, "Acme", p.OrgName)
	require.Equal(t, hotpath.RoleAdmin, p.Role)
	require.Equal(t, hotpath.KindDeveloper, p.Kind)
	require.True(t, p.Scopes.Has(hotpath.FamilyMemory))
	require.False(t, p.Scopes.Has(hotpath.FamilyRules))
	require.Equal(t, []string{"mira"}, p.Models)
	require.Equal(t, cap, p.SpendCapMicros)
	require.Equal(t, int64(-1), p.CreditsMicros)
	require.False(t, p.Revoked)

	_, err = db.LookupKey(ctx, hotpath.HashToken([]byte("gw_live_unknown")))
	require.ErrorIs(t, err, hotpath.ErrKeyNotFound)

	require.NoError(t, db.RevokeKey(ctx, issued.KeyID))
	p, err = db.LookupKey(ctx, hotpath.HashToken([]byte(issued.AccessToken)))
	require.NoError(t, err)
	require.True(t, p.Revoked)
	require.ErrorIs(t, db.RevokeKey(ctx, "not-a-uuid"), storage.ErrNotFound)
	require.ErrorIs(t, db.RevokeKey(ctx, "00000000-0000-0000-0000-000000000000"), storage.ErrNotFound)
}

func TestSignedInKeysExpireIn90Days(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	org, u := seed(t, db)
	issued, err := db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: org.ID, Kind: hotpath.KindSignedIn})
	require.NoError(t, err)
	require.NotNil(t, issued.ExpiresAt)
	exp, err := time.Parse(time.RFC3339, *issued.ExpiresAt)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(90*24*time.Hour), exp, time.Minute)
}

func TestKeyNeedsMembership(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	_, u := seed(t, db)
	other, err := db.CreateOrg(ctx, "Other")
	require.NoError(t, err)
	_, err = db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: other.ID, Kind: hotpath.KindDeveloper})
	require.ErrorIs(t, err, storage.ErrNotMember)
	_, err = db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: "junk", Kind: hotpath.KindDeveloper})
	require.ErrorIs(t, err, storage.ErrNotMember)
}

func TestEndedMembershipRevokes(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	org, u := seed(t, db)
	issued, err := db.CreateKey(ctx, storage.NewKey{UserID: u.ID, OrgID: org.ID, Kind: hotpath.KindDeveloper})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `delete from memberships where org_id = $1 and user_id = $2`, org.ID, u.ID)
	require.NoError(t, err)
	p, err := db.LookupKey(ctx, hotpath.HashToken([]byte(issued.AccessToken)))
	require.NoError(t, err)
	require.True(t, p.Revoked)
}

func TestDuplicateEmail(t *testing.T) {
	ctx := context.Background()
	db := storetest.DB(t)
	seed(t, db)
	_, err := db.CreateUser(ctx, "ADA@example.com", "", hotpath.RoleMember)
	require.ErrorIs(t, err, storage.ErrConflict)
	_, err = db.CreateUser(ctx, "bob@example.com", "00000000-0000-0000-0000-000000000000", hotpath.RoleMember)
	require.ErrorIs(t, err, storage.ErrNotFound)
}

func TestServiceTokens(t *testing.T) {
	db := storetest.DB(t)
	ctx := context.Background()
	issued, err := db.CreateServiceToken(ctx, storage.NewServiceToken{Name: "billing", ReadOnly: true, ExpiresIn: time.Hour})
	require.NoError(t, err)
	require.Equal(t, hotpath.TokenService, hotpath.CheckToken([]byte(issued.Token)))
	require.Equal(t, hotpath.FamilyNames(), issued.AllowedScopes, "an unscoped token reports every family")
	s, err := db.LookupServiceToken(ctx, hotpath.HashToken([]byte(issued.Token)))
	require.NoError(t, err)
	require.Equal(t, "billing", s.Name)
	require.True(t, s.ReadOnly)
	require.InDelta(t, time.Now().Add(time.Hour).Unix(), s.ExpiresAt, 5)
	require.NoError(t, db.RevokeServiceToken(ctx, issued.ID))
	s, err = db.LookupServiceToken(ctx, hotpath.HashToken([]byte(issued.Token)))
	require.NoError(t, err)
	require.True(t, s.Revoked)
}

func TestRedisAnswers(t *testing.T) {
	c := storetest.Redis(t)
	ctx := context.Background()
	key := storetest.Prefix() + "ping"
	require.NoError(t, c.Do(ctx, c.B().Set().Key(key).Value("1").Ex(time.Minute).Build()).Error())
	v, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "1", v)
}

func mustScopes(t *testing.T, names ...string) hotpath.Scopes {
	t.Helper()
	s, err := hotpath.ParseScopes(names)
	require.NoError(t, err)
	return s
}

// A database that cannot answer is told from a query that is wrong: the
// API answers the first 503 service_unavailable and the second 500.
func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	require.False(t, storage.Unavailable(nil))
	require.False(t, storage.Unavailable(storage.ErrNotFound))

	t.Run("nothing listens", func(t *testing.T) {
		db, err := storage.Open(ctx, storage.Config{
			URL: fmt.Sprintf("postgres://gw@127.0.0.1:%d/gw?sslmode=disable", storetest.FreePort(t))})
		require.NoError(t, err)
		defer db.Close()
		err = db.Ping(ctx)
		require.Error(t, err)
		require.True(t, storage.Unavailable(err), "%v", err)
	})
	t.Run("closed pool", func(t *testing.T) {
		db, err := storage.Open(ctx, storage.Config{URL: storetest.DatabaseURL(t)})
		require.NoError(t, err)
		db.Close()
		err = db.Ping(ctx)
		require.Error(t, err)
		require.True(t, storage.Unavailable(err), "%v", err)
	})
	t.Run("connections cut", func(t *testing.T) {
		u, err := url.Parse(storetest.DatabaseURL(t))
		require.NoError(t, err)
		relay := storetest.StartRelay(t, u.Host)
		u.Host = relay.Addr()
		db, err := storage.Open(ctx, storage.Config{URL: u.String(), MaxConns: 1})
		require.NoError(t, err)
		defer db.Close()
		require.NoError(t, db.Ping(ctx))
		relay.Cut()
		for range 2 { // the pooled connection, then a new one
			_, err = db.Pool.Exec(ctx, "select 1")
			require.Error(t, err)
			require.True(t, storage.Unavailable(err), "%v", err)
		}
	})
	t.Run("server ends the session", func(t *testing.T) {
		db := storetest.DB(t)
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		var pid int32
		require.NoError(t, conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid))
		_, err = db.Pool.Exec(ctx, "select pg_terminate_backend($1)", pid)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "select 1")
		require.Error(t, err)
		require.True(t, storage.Unavailable(err), "%v", err)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "57P01", pgErr.Code, "admin_shutdown")
	})
	t.Run("a wrong query is not", func(t *testing.T) {
		db := storetest.DB(t)
		_, err := db.Pool.Exec(ctx, "select * from no_such_table")
		require.Error(t, err)
		require.False(t, storage.Unavailable(err), "%v", err)
		require.False(t, storage.Unavailable(errors.New("cannot scan")))
	})
}

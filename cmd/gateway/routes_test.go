package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

func TestHealthAndReady(t *testing.T) {
	ta := startTestApp(t)
	r := ta.call(t, "GET", "/api/health", "", nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "ok", r.body["status"])
	require.NotEmpty(t, r.body["commit"])
	require.Equal(t, "2026-10-07", r.header.Get("Gateway-Version"))
	require.NotEmpty(t, r.header.Get("X-Request-Id"))

	r = ta.call(t, "GET", "/api/ready", "", nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "ready", r.body["status"])
	require.EqualValues(t, storage.BinaryVersion(), r.body["schema_version"])

	ta.api.Drain()
	r = ta.call(t, "GET", "/api/ready", "", nil)
	require.Equal(t, 503, r.status, "a draining process is not ready")
	require.Equal(t, 200, ta.call(t, "GET", "/api/health", "", nil).status, "but it is alive")
}

func TestReadyNeedsTheSchema(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.Migrate = false })
	r := ta.call(t, "GET", "/api/ready", "", nil)
	require.Equal(t, 503, r.status)
	require.EqualValues(t, 0, r.body["schema_version"])
	require.Equal(t, 200, ta.call(t, "GET", "/api/health", "", nil).status)

	var out, errOut bytes.Buffer
	require.Zero(t, run([]string{"migrate", "--database-url", ta.dbURL}, &out, &errOut), errOut.String())
	require.Equal(t, 200, ta.call(t, "GET", "/api/ready", "", nil).status)
}

func TestReadyWhenDatabaseIsUnreachable(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.Migrate = false })
	ta.db.Close() // what a process sees when PostgreSQL goes away
	r := ta.call(t, "GET", "/api/ready", "", nil)
	require.Equal(t, 503, r.status)
	require.Equal(t, "unreachable", r.body["database"])
	require.Equal(t, 200, ta.call(t, "GET", "/api/health", "", nil).status, "liveness touches no database")
}

func TestMeAndKeyStates(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "ada@example.com")

	for _, path := range []string{"/api/v1/me", "/api/v2/me"} {
		r := ta.call(t, "GET", path, tn.key, nil)
		require.Equal(t, 200, r.status, path)
		require.Equal(t, map[string]any{"api_key_id": tn.keyID, "user_id": tn.userID}, r.body)
	}

	admin(t, ta.dbURL, "user", "suspend", "--user", tn.userID)
	require.Eventually(t, func() bool {
		r := ta.call(t, "GET", "/api/v1/me", tn.key, nil)
		return r.status == 403 && r.body["code"] == "account_suspended"
	}, time.Second, 5*time.Millisecond)
	admin(t, ta.dbURL, "user", "unsuspend", "--user", tn.userID)
	require.Eventually(t, func() bool { return ta.call(t, "GET", "/api/v1/me", tn.key, nil).status == 200 },
		time.Second, 5*time.Millisecond)

	// Revoked through this process: refused on the very next request.
	r := ta.call(t, "DELETE", "/api/v1/keys/"+tn.keyID, tn.key, nil)
	require.Equal(t, 204, r.status)
	r = ta.call(t, "GET", "/api/v1/me", tn.key, nil)
	require.Equal(t, 401, r.status)
	require.Equal(t, "unauthorized", r.body["code"])
	require.Equal(t, "Bearer", r.header.Get("WWW-Authenticate"))
}

func TestSignedInKeyExpiry(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "eve@example.com", "--kind", "signed_in")
	require.Equal(t, 200, ta.call(t, "GET", "/api/v1/me", tn.key, nil).status)
	_, err := ta.db.Pool.Exec(context.Background(), `update api_keys set expires_at = now() - interval '1 second' where id = $1`, tn.keyID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ta.call(t, "GET", "/api/v1/me", tn.key, nil).status == 401 },
		time.Second, 5*time.Millisecond)
}

func TestKeyConsole(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "kim@example.com", "--scopes", "org,chat", "--models", "mira,vaani")
	other := newTenant(t, ta.dbURL, "lee@example.com")

	r := ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"allowed_scopes": []string{"chat"}, "models": []string{"mira"}})
	require.Equal(t, 201, r.status, "%s", r.raw)
	require.Regexp(t, `^gw_live_`, r.body["access_token"])
	newKey, newID := r.body["access_token"].(string), r.body["key_id"].(string)
	require.Nil(t, r.body["expires_at"])
	require.Equal(t, tn.orgID, r.body["org"].(map[string]any)["id"])
	require.Equal(t, 200, ta.call(t, "GET", "/api/v1/me", newKey, nil).status)

	require.NotEmpty(t, r.header.Get("X-RateLimit-Limit"), "the console's routes are metered")
	r = ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"allowed_scopes": []string{"memory"}})
	require.Equal(t, 403, r.status, "no broader scopes than the caller's")
	require.Equal(t, "key_scope_forbidden", r.body["code"])
	require.Equal(t, "memory", r.body["required_scope"], "the field asked for a family the key lacks")
	require.Empty(t, r.header.Get("X-RateLimit-Limit"), "a key check's 403 carries no rate-limit headers")
	r = ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{})
	require.Equal(t, 403, r.status, "an unscoped key is broader than a scoped caller")
	require.Equal(t, "tokens", r.body["required_scope"], "the first family the caller lacks")
	r = ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"allowed_scopes": []string{"chat"}, "models": []string{"kavi"}})
	require.Equal(t, 403, r.status)
	require.Equal(t, "model_not_allowed", r.body["code"])
	r = ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"allowed_scopes": []string{"bogus"}})
	require.Equal(t, 400, r.status)
	require.Equal(t, "invalid_request", r.body["code"])

	r = ta.call(t, "GET", "/api/v1/keys", tn.key, nil)
	require.Equal(t, 200, r.status)
	require.Len(t, r.body["data"], 2)
	require.NotContains(t, string(r.raw), "gw_live_", "listings never show secrets")

	r = ta.call(t, "GET", "/api/v1/keys", newKey, nil)
	require.Equal(t, 403, r.status)
	require.Equal(t, "org", r.body["required_scope"])

	// Another tenant's key id is indistinguishable from a missing one.
	r = ta.call(t, "DELETE", "/api/v1/keys/"+newID, other.key, nil)
	require.Equal(t, 404, r.status)
	r = ta.call(t, "DELETE", "/api/v1/keys/not-a-uuid", other.key, nil)
	require.Equal(t, 404, r.status)
	require.Equal(t, 200, ta.call(t, "GET", "/api/v1/me", newKey, nil).status)
}

// A key whose spending is bounded mints no key: each minted key would
// carry a cap of its own, or none, and spend beyond the caller's limit.
// A read-only key mints nothing either, and its 403 is the key check's.
func TestBoundedKeysMintNoKeys(t *testing.T) {
	ta := startTestApp(t)
	for _, flags := range [][]string{
		{"--spend-cap-usd", "0"},
		{"--spend-cap-usd", "25"},
		{"--kind", "headless", "--credits-usd", "1"},
	} {
		tn := newTenant(t, ta.dbURL, "bound"+strings.Join(flags, "")+"@example.com", flags...)
		r := ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{})
		require.Equal(t, 403, r.status, "%v: %s", flags, r.raw)
		require.Equal(t, "key_scope_forbidden", r.body["code"])
		r = ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"spend_cap_usd": "0.01"})
		require.Equal(t, 403, r.status, "%v: not even with a cap of its own", flags)
		r = ta.call(t, "GET", "/api/v1/keys", tn.key, nil)
		require.Len(t, r.body["data"], 1, "%v: nothing was minted", flags)
	}
	ro := newTenant(t, ta.dbURL, "ro-mint@example.com", "--read-only")
	r := ta.call(t, "POST", "/api/v1/keys", ro.key, map[string]any{})
	require.Equal(t, 403, r.status)
	require.Equal(t, "key_read_only", r.body["code"])
	require.Empty(t, r.header.Get("X-RateLimit-Limit"), "a key check's 403 carries no rate-limit headers")
	r = ta.call(t, "GET", "/api/v1/keys", ro.key, nil)
	require.Equal(t, 200, r.status)
	require.NotEmpty(t, r.header.Get("X-RateLimit-Limit"))
}

func TestServiceTokenSelf(t *testing.T) {
	ta := startTestApp(t)
	tok := admin(t, ta.dbURL, "service-token", "create", "--name", "billing-sync", "--scopes", "logs,limits",
		"--read-only", "--expires-in", "24h")
	secret := tok["token"].(string)
	require.Regexp(t, `^gw_svc_`, secret)

	r := ta.call(t, "GET", "/api/v1/service-token/self", secret, nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, "billing-sync", r.body["service"])
	require.Equal(t, []any{"logs", "limits"}, r.body["allowed_scopes"])
	require.Equal(t, true, r.body["read_only"])
	exp, err := time.Parse(time.RFC3339, r.body["expires_at"].(string))
	require.NoError(t, err)
	date, err := http.ParseTime(r.header.Get("Date"))
	require.NoError(t, err)
	require.InDelta(t, 24*time.Hour, exp.Sub(date), float64(time.Minute), "remaining lifetime is expires_at minus Date")

	unscoped := admin(t, ta.dbURL, "service-token", "create", "--name", "ops")
	r = ta.call(t, "GET", "/api/v2/service-token/self", unscoped["token"].(string), nil)
	require.Equal(t, 200, r.status)
	require.Nil(t, r.body["expires_at"])
	require.Len(t, r.body["allowed_scopes"], 17, "the effective list, never empty")

	tn := newTenant(t, ta.dbURL, "svc@example.com")
	require.Equal(t, 401, ta.call(t, "GET", "/api/v1/service-token/self", tn.key, nil).status)
	require.Equal(t, 401, ta.call(t, "GET", "/api/v1/me", secret, nil).status)

	admin(t, ta.dbURL, "service-token", "revoke", "--id", tok["id"].(string))
	require.Eventually(t, func() bool {
		return ta.call(t, "GET", "/api/v1/service-token/self", secret, nil).status == 401
	}, time.Second, 5*time.Millisecond)
}

func TestModelsRoutes(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "mo@example.com")
	r := ta.call(t, "GET", "/api/v1/models", tn.key, nil)
	require.Equal(t, 200, r.status)
	require.Len(t, r.body["data"], 3)
	require.Equal(t, 200, ta.call(t, "GET", "/api/v2/models", tn.key, nil).status)
	r = ta.call(t, "GET", "/v1/models", tn.key, nil)
	require.Equal(t, 200, r.status)
	require.Equal(t, "list", r.body["object"])
	r = ta.call(t, "GET", "/v1/models", "", nil)
	require.Equal(t, 401, r.status)
	require.Equal(t, "authentication_error", r.body["error"].(map[string]any)["type"])
}

var secretRE = regexp.MustCompile(`gw_(live|svc)_[0-9A-Za-z]{10,}`)

// Every log line and metric the gateway writes while keys are issued, used,
// refused and revoked is captured and searched for key secrets.
func TestNoSecretInLogsOrMetrics(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "sec@example.com")
	svc := admin(t, ta.dbURL, "service-token", "create", "--name", "s")["token"].(string)
	secrets := []string{tn.key, svc}

	r := ta.call(t, "POST", "/api/v1/keys", tn.key, map[string]any{"allowed_scopes": []string{"chat"}})
	require.Equal(t, 201, r.status)
	minted := r.body["access_token"].(string)
	secrets = append(secrets, minted)
	for _, k := range secrets {
		ta.call(t, "GET", "/api/v1/me", k, nil)
		ta.call(t, "GET", "/api/v1/service-token/self", k, nil)
		ta.call(t, "GET", "/api/v1/me?key="+k, k, nil)
		ta.call(t, "GET", "/api/v1/nope/"+k, k, nil)
		ta.call(t, "GET", "/api/v1/me", k+"x", nil)
		ta.call(t, "GET", "/v1/models", k, nil, "X-Request-Id", "id-with-"+k[:12])
	}
	require.Equal(t, 204, ta.call(t, "DELETE", "/api/v1/keys/"+r.body["key_id"].(string), tn.key, nil).status)
	require.Equal(t, 401, ta.call(t, "GET", "/api/v1/me", minted, nil).status)
	// A request line fasthttp cannot parse, carrying a key in its header.
	raw, err := (&http.Client{}).Post("http://"+ta.Addr()+"/api/v1/me", "application/json", bytes.NewReader([]byte("{")))
	require.NoError(t, err)
	raw.Body.Close()

	m, err := http.Get("http://" + ta.adminLn.Addr().String() + "/metrics")
	require.NoError(t, err)
	page, err := io.ReadAll(m.Body)
	m.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(page), "gateway_requests_total")

	logs := ta.logs.String()
	require.Contains(t, logs, `"key_id":"`+tn.keyID+`"`, "key ids are safe to log and are logged")
	for _, text := range []string{logs, string(page)} {
		require.False(t, secretRE.MatchString(text), "a key secret leaked: %s", secretRE.FindString(text))
		for _, s := range secrets {
			require.NotContains(t, text, s[len(s)-20:])
		}
	}
}

// The admin listener serves pprof but not the process's command line,
// whose flags can carry secrets.
func TestAdminListenerHidesCommandLine(t *testing.T) {
	const secret = "cmdline-secret-pw"
	args := os.Args
	os.Args = append(slices.Clone(args), "--database-url", "postgres://gw:"+secret+"@db/gw", "--otel-headers", "authorization=Bearer "+secret)
	t.Cleanup(func() { os.Args = args })
	ta := startTestApp(t)
	get := func(path string) (int, string) {
		r, err := http.Get("http://" + ta.adminLn.Addr().String() + path)
		require.NoError(t, err)
		defer r.Body.Close()
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		return r.StatusCode, string(body)
	}
	code, body := get("/debug/pprof/cmdline")
	require.Equal(t, http.StatusNotFound, code)
	require.NotContains(t, body, secret)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1", "/debug/pprof/symbol"} {
		code, body := get(path)
		require.Equal(t, http.StatusOK, code, path)
		require.NotContains(t, body, secret, path)
	}
}

func TestTenantKeysAreIsolated(t *testing.T) {
	ta := startTestApp(t)
	a := newTenant(t, ta.dbURL, "a@example.com")
	b := newTenant(t, ta.dbURL, "b@example.com")
	ra := ta.call(t, "GET", "/api/v1/keys", a.key, nil)
	rb := ta.call(t, "GET", "/api/v1/keys", b.key, nil)
	require.Contains(t, string(ra.raw), a.keyID)
	require.NotContains(t, string(ra.raw), b.keyID)
	require.Contains(t, string(rb.raw), b.keyID)
	require.NotContains(t, string(rb.raw), a.keyID)
}

func TestDemoSeedIsRepeatable(t *testing.T) {
	ta := startTestApp(t)
	var first, second bytes.Buffer
	require.NoError(t, ta.seedDemo(context.Background(), &first))
	require.NoError(t, ta.seedDemo(context.Background(), &second))
	keyRE := regexp.MustCompile(`gw_live_[0-9A-Za-z]+`)
	k1, k2 := keyRE.FindString(first.String()), keyRE.FindString(second.String())
	require.NotEmpty(t, k1)
	require.NotEqual(t, k1, k2)
	require.Contains(t, first.String(), "curl -s http://"+ta.Addr()+"/api/v1/me")
	for _, k := range []string{k1, k2} {
		require.Equal(t, 200, ta.call(t, "GET", "/api/v1/me", k, nil).status)
	}
}

// An Idempotency-Key replay holds fleet-wide (with Redis, as a fleet runs):
// a retry that lands on any process is answered from the first one's
// result, a retry while the first is still running is refused on every
// process, and another body under the key conflicts everywhere.
func TestIdempotentReplay(t *testing.T) {
	eachFleet(t, func(t *testing.T, n int) {
		f := startFleet(t, n)
		tn := newTenant(t, f.dbURL, "idem@example.com")
		body := map[string]any{"model": "mira", "messages": []map[string]any{{"role": "user", "content": "Hello [[sim:tokens=5]]"}}}

		first := f.call(t, "POST", "/v1/chat/completions", tn.key, body, "Idempotency-Key", "order-7")
		require.Equal(t, 200, first.status, "%s", first.raw)
		require.Empty(t, first.header.Get("Idempotent-Replayed"))
		for range n + 1 { // every process replays, the first one too
			again := f.call(t, "POST", "/v1/chat/completions", tn.key, body, "Idempotency-Key", "order-7")
			require.Equal(t, 200, again.status)
			require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
			require.Equal(t, string(first.raw), string(again.raw))
		}

		other := map[string]any{"model": "mira", "messages": []map[string]any{{"role": "user", "content": "Something else"}}}
		for range n {
			conflict := f.call(t, "POST", "/v1/chat/completions", tn.key, other, "Idempotency-Key", "order-7")
			require.Equal(t, 409, conflict.status)
			require.Equal(t, "idempotency_conflict", conflict.body["error"].(map[string]any)["code"])
		}

		// A request still running holds its key on every process: of two
		// sent at once to two processes, one runs and the other is refused.
		slow := map[string]any{"model": "mira", "messages": []map[string]any{{"role": "user", "content": "Slow [[sim:ttft_ms=2000]] [[sim:tokens=2]]"}}}
		var pair [2]resp
		var wg sync.WaitGroup
		for i := range pair {
			addr := f.Addr()
			wg.Go(func() {
				pair[i] = call(t, addr, "POST", "/v1/chat/completions", tn.key, slow, "Idempotency-Key", "order-8")
			})
		}
		wg.Wait()
		if pair[0].status != 200 {
			pair[0], pair[1] = pair[1], pair[0]
		}
		require.Equal(t, 200, pair[0].status, "%s", pair[0].raw)
		require.Empty(t, pair[0].header.Get("Idempotent-Replayed"))
		require.Equal(t, 409, pair[1].status, "%s", pair[1].raw)
		require.Equal(t, "idempotency_conflict", pair[1].body["error"].(map[string]any)["code"])
		for range n {
			again := f.call(t, "POST", "/v1/chat/completions", tn.key, slow, "Idempotency-Key", "order-8")
			require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
			require.Equal(t, string(pair[0].raw), string(again.raw))
		}
	})
}

// A release rolled back, or starting beside a newer one mid rollout, finds
// the schema a later release migrated: it migrates nothing and serves.
func TestServesOnANewerSchema(t *testing.T) {
	dbURL := storetest.DatabaseURL(t)
	var out, errOut bytes.Buffer
	require.Zero(t, run([]string{"migrate", "--database-url", dbURL}, &out, &errOut), errOut.String())
	db, err := storage.Open(context.Background(), storage.Config{URL: dbURL})
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), `update schema_version set version = version + 1`)
	require.NoError(t, err)
	db.Close()

	out.Reset()
	errOut.Reset()
	require.Zero(t, run([]string{"migrate", "--database-url", dbURL}, &out, &errOut), errOut.String())
	require.Contains(t, errOut.String(), "newer")
	ta := startTestApp(t, func(c *serveConfig) { c.DB.URL = dbURL })
	r := ta.call(t, "GET", "/api/ready", "", nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.EqualValues(t, storage.BinaryVersion()+1, r.body["schema_version"])
	require.Contains(t, ta.logs.String(), "database schema is newer than this binary's")
}

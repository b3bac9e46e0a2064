package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/hotpath/meter/metertest"
	"github.com/edgegw/gateway/storage/storetest"
)

func chatBody(prompt string) map[string]any {
	return map[string]any{"model": "mira", "max_tokens": 16,
		"messages": []map[string]any{{"role": "user", "content": prompt}}}
}

// writePlans writes a config file holding plans and returns its path.
func writePlans(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(p, []byte(yaml), 0o600))
	return p
}

// The limits suite runs over a fleet of one and of three (eachFleet), with
// requests spread round-robin: every number holds fleet-wide.

func TestLimitsRouteReadsWhatIsEnforced(t *testing.T) {
	eachFleet(t, testLimitsRouteReadsWhatIsEnforced)
}

func testLimitsRouteReadsWhatIsEnforced(t *testing.T, n int) {
	f := startFleet(t, n)
	org := admin(t, f.dbURL, "org", "create", "--name", "Acme")
	user := admin(t, f.dbURL, "user", "create", "--email", "lim@example.com", "--org", org["id"].(string))
	ws := admin(t, f.dbURL, "workspace", "create", "--org", org["id"].(string), "--name", "Ops", "--spend-cap-usd", "5")
	key := admin(t, f.dbURL, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string),
		"--spend-cap-usd", "12.5", "--workspace", ws["id"].(string))
	token := key["access_token"].(string)

	r := f.call(t, "GET", "/api/v1/limits", token, nil)
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, "limits", r.body["object"])
	require.Equal(t, "apikey", r.body["bucket"])
	require.Equal(t, true, r.body["metered"])
	require.Equal(t, "default", r.body["tier"])
	chat := r.body["rate_limits"].(map[string]any)["chat"].(map[string]any)
	perKey := chat["per_key"].(map[string]any)
	require.Nil(t, perKey["resets_at"], "reading limits opens no window")
	require.Equal(t, perKey["limit"], perKey["remaining"])
	require.Equal(t, float64(60), perKey["window_seconds"])
	require.Equal(t, float64(32), chat["max_concurrent_requests"])
	require.NotContains(t, r.body, "token_pool")
	require.NotContains(t, r.body, "credits")
	require.Equal(t, map[string]any{"cap": 12.5, "spent": float64(0), "remaining": 12.5,
		"resets_at": nextMonthRFC3339()}, r.body["key_spend_cap"])
	require.Equal(t, float64(5), r.body["workspace_spend_cap"].(map[string]any)["cap"])
	require.Equal(t, "600", r.header.Get("X-RateLimit-Remaining"), "the route is checked, not counted")

	c := f.call(t, "POST", "/api/v1/chat", token, chatBody("Hello [[sim:tokens=5]]"))
	require.Equal(t, 200, c.status, "%s", c.raw)
	cost := c.body["usage"].(map[string]any)["cost"].(map[string]any)["amount"].(float64)
	require.Positive(t, cost)

	// The settlement follows the answer (off its path with Redis): read
	// until it has landed.
	r = settledLimits(t, f, token, func(b map[string]any) bool {
		return math.Abs(b["key_spend_cap"].(map[string]any)["spent"].(float64)-cost) < 1e-12
	})
	perKey = r.body["rate_limits"].(map[string]any)["chat"].(map[string]any)["per_key"].(map[string]any)
	require.Equal(t, float64(599), perKey["remaining"])
	resets, err := time.Parse(time.RFC3339, perKey["resets_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Minute), resets, 3*time.Second)
	spend := r.body["key_spend_cap"].(map[string]any)
	require.InDelta(t, cost, spend["spent"], 1e-12)
	require.InDelta(t, 12.5-cost, spend["remaining"], 1e-12)
	r = settledLimits(t, f, token, func(b map[string]any) bool {
		return math.Abs(b["workspace_spend_cap"].(map[string]any)["spent"].(float64)-cost) < 1e-12
	})
	require.InDelta(t, cost, r.body["workspace_spend_cap"].(map[string]any)["spent"], 1e-12)

	// A signed-in key reports the subscription pools; a headless key its credit.
	signed := admin(t, f.dbURL, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string), "--kind", "signed_in")
	r = f.call(t, "GET", "/api/v1/limits", signed["access_token"].(string), nil)
	require.Equal(t, "subscription", r.body["bucket"])
	require.NotContains(t, r.body, "metered")
	pool := r.body["token_pool"].(map[string]any)
	require.Equal(t, "weighted_tokens", pool["unit"])
	require.Equal(t, "healthy", pool["state"])
	require.Equal(t, []any{}, pool["blocked_models"])
	for _, name := range []string{"monthly", "burst", "mira"} {
		p := pool[name].(map[string]any)
		require.Equal(t, p["cap"], p["remaining"], name)
		require.Equal(t, "healthy", p["state"], name)
	}
	require.Nil(t, pool["burst"].(map[string]any)["resets_at"])

	headless := admin(t, f.dbURL, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string),
		"--kind", "headless", "--credits-usd", "3")
	admin(t, f.dbURL, "key", "adjust-credits", "--key-id", headless["key_id"].(string), "--usd", "0.5")
	r = f.call(t, "GET", "/api/v1/limits", headless["access_token"].(string), nil)
	require.Equal(t, "headless", r.body["bucket"])
	require.Equal(t, map[string]any{"granted": float64(3), "adjustment": 0.5, "used": float64(0), "remaining": 3.5,
		"resets_at": nil}, r.body["credits"])

	// The route is refused when the window is full, like any route.
	require.Equal(t, 401, f.call(t, "GET", "/api/v1/limits", "", nil).status)
}

// settledLimits reads the key's limits, on the fleet's instances in turn,
// until done holds for the body, and returns that read. A settlement goes
// out after the request's answer, so a read right after it may still show
// the reservation; two seconds is far past any settlement.
func settledLimits(t *testing.T, f *fleet, token string, done func(map[string]any) bool) resp {
	t.Helper()
	var r resp
	require.Eventually(t, func() bool {
		r = f.call(t, "GET", "/api/v1/limits", token, nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		return done(r.body)
	}, 2*time.Second, 5*time.Millisecond, "the settlement never landed: %s", &r.raw)
	return r
}

func nextMonthRFC3339() string {
	y, m, _ := time.Now().UTC().Date()
	return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
}

func TestSpendCapOfOneMicroDollar(t *testing.T) {
	eachFleet(t, testSpendCapOfOneMicroDollar)
}

func testSpendCapOfOneMicroDollar(t *testing.T, n int) {
	f := startFleet(t, n)
	tn := newTenant(t, f.dbURL, "micro@example.com", "--spend-cap-usd", "0.000001")
	for range n + 1 { // every instance, and one twice
		r := f.call(t, "POST", "/api/v1/chat", tn.key, chatBody("Hello"))
		require.Equal(t, 429, r.status, "%s", r.raw)
		require.Equal(t, "key_spend_cap_exceeded", r.body["code"])
		require.Equal(t, nextMonthRFC3339(), r.body["reset_at"])
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err)
		y, m, _ := time.Now().UTC().Date()
		require.InDelta(t, time.Until(time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)).Seconds(), ra, 3)
	}
}

// TestLedgerRowsAndRebuiltCounters checks that chat writes its ledger rows
// to PostgreSQL, that GET /api/v1/logs reads them, and that spend counters
// a restart (or a Redis that lost them) forgot are rebuilt from them.
func TestLedgerRowsAndRebuiltCounters(t *testing.T) {
	for _, withRedis := range []bool{false, true} {
		t.Run(fmt.Sprintf("redis=%v", withRedis), func(t *testing.T) {
			redisURL := ""
			if withRedis {
				redisURL = storetest.RedisURL(t)
			}
			dbURL := storetest.DatabaseURL(t)
			cfg := func(c *serveConfig) { c.DB.URL, c.RedisURL = dbURL, redisURL }
			a := startTestApp(t, cfg)
			tn := newTenant(t, dbURL, "ledger@example.com", "--spend-cap-usd", "100")
			var total float64
			for i := range 3 {
				r := a.call(t, "POST", "/api/v1/chat", tn.key, chatBody("Hi [[sim:tokens=3]]"), "X-Request-Id", fmt.Sprintf("ledger-%d", i))
				require.Equal(t, 200, r.status, "%s", r.raw)
				total += r.body["usage"].(map[string]any)["cost"].(map[string]any)["amount"].(float64)
			}
			var log resp
			require.Eventually(t, func() bool {
				log = a.call(t, "GET", "/api/v1/logs/ledger-1", tn.key, nil)
				return log.status == 200
			}, 5*time.Second, 20*time.Millisecond)
			require.Equal(t, "request_log", log.body["object"])
			require.Equal(t, "mira", log.body["model"])
			require.Equal(t, true, log.body["billed"])
			require.Equal(t, float64(3), log.body["usage"].(map[string]any)["output_tokens"])
			other := newTenant(t, dbURL, "other@example.com")
			require.Equal(t, 404, a.call(t, "GET", "/api/v1/logs/ledger-1", other.key, nil).status)

			spent := func(ta *testApp) float64 {
				r := ta.call(t, "GET", "/api/v1/limits", tn.key, nil)
				require.Equal(t, 200, r.status, "%s", r.raw)
				return r.body["key_spend_cap"].(map[string]any)["spent"].(float64)
			}
			require.InDelta(t, total, spent(a), 1e-12)

			// Restart: in-process counters are gone; with Redis, drop them.
			a.shutdown()
			if withRedis {
				rc := storetest.Redis(t)
				ctx := context.Background()
				keys, err := rc.Do(ctx, rc.B().Keys().Pattern("gw:*"+tn.keyID+"*").Build()).AsStrSlice()
				require.NoError(t, err)
				require.NotEmpty(t, keys)
				for _, k := range keys {
					require.NoError(t, rc.Do(ctx, rc.B().Del().Key(k).Build()).Error())
				}
			}
			b := startTestApp(t, cfg)
			require.InDelta(t, total, spent(b), 1e-12, "the spend counter is rebuilt from the ledger")
		})
	}
}

// TestStreamSettlesOnARebuiltSpendCounter: Redis loses a fleet's counters
// while a stream runs on one instance, and another instance rebuilds the
// key's spend counter from the ledger. The rebuilt counter never held the
// stream's reservation; when the stream ends it gains the stream's whole
// cost, so the counter again holds exactly what the ledger does.
func TestStreamSettlesOnARebuiltSpendCounter(t *testing.T) {
	f := startFleet(t, 2)
	tn := newTenant(t, f.dbURL, "rebuilt@example.com", "--spend-cap-usd", "1")
	ctx := context.Background()
	ledger := func() (rows int, spent float64) {
		var pico int64
		require.NoError(t, f.apps[0].db.Pool.QueryRow(ctx,
			`select count(*), coalesce(sum(cost_pico), 0) from request_log where key_id = $1 and billed`, tn.keyID).Scan(&rows, &pico))
		return rows, float64(pico) / 1e12
	}
	spent := func(a *testApp) float64 {
		r := a.call(t, "GET", "/api/v1/limits", tn.key, nil)
		require.Equal(t, 200, r.status, "%s", r.raw)
		return r.body["key_spend_cap"].(map[string]any)["spent"].(float64)
	}
	for range 3 {
		r := f.call(t, "POST", "/api/v1/chat", tn.key, chatBody("Hi [[sim:tokens=3]]"))
		require.Equal(t, 200, r.status, "%s", r.raw)
	}
	require.Eventually(t, func() bool { n, _ := ledger(); return n == 3 }, 5*time.Second, 20*time.Millisecond)

	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+f.apps[0].Addr()+"/api/v1/chat", strings.NewReader(
		`{"model":"mira","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"slow [[sim:tokens=8]] [[sim:itl_ms=100]]"}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tn.key)
	req.Header.Set("Content-Type", "application/json")
	stream, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, http.StatusOK, stream.StatusCode)
	body := bufio.NewReader(stream.Body)
	_, err = body.ReadString('\n')
	require.NoError(t, err, "the stream sent no first frame")
	_, before := ledger()
	require.Greater(t, spent(f.apps[1]), before, "the stream's reservation is counted")

	// Redis restarts: the key's counters are gone. The other instance
	// rebuilds them from the ledger, without the stream.
	rc := storetest.Redis(t)
	keys, err := rc.Do(ctx, rc.B().Keys().Pattern("gw:*"+tn.keyID+"*").Build()).AsStrSlice()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		require.NoError(t, rc.Do(ctx, rc.B().Del().Key(k).Build()).Error())
	}
	require.InDelta(t, before, spent(f.apps[1]), 1e-12, "rebuilt from the ledger")

	_, err = io.Copy(io.Discard, body)
	require.NoError(t, err)
	var rows int
	var want float64
	require.Eventually(t, func() bool { rows, want = ledger(); return rows == 4 }, 5*time.Second, 20*time.Millisecond)
	require.Greater(t, want, before)
	require.Eventually(t, func() bool { return math.Abs(spent(f.apps[1])-want) < 1e-12 }, 5*time.Second, 20*time.Millisecond,
		"the counter holds the ledger (%v USD), not %v USD", want, spent(f.apps[1]))
}

// TestRequestWindowAcrossFleet: a key's per-minute window is one window
// however its requests are spread: the fleet admits exactly the limit and
// then refuses on every instance with the same headers.
func TestRequestWindowAcrossFleet(t *testing.T) {
	eachFleet(t, func(t *testing.T, n int) {
		const limit = 5
		plans := writePlans(t, fmt.Sprintf("plans:\n  default:\n    requests_per_minute: %d\n", limit))
		f := startFleet(t, n, func(c *serveConfig) { c.ConfigPath = plans })
		tn := newTenant(t, f.dbURL, "window@example.com")
		var reset string
		for i := range limit {
			r := f.call(t, "GET", "/api/v1/me", tn.key, nil)
			require.Equal(t, 200, r.status, "%s", r.raw)
			require.Equal(t, strconv.Itoa(limit), r.header.Get("X-RateLimit-Limit"))
			require.Equal(t, strconv.Itoa(limit-1-i), r.header.Get("X-RateLimit-Remaining"), "request %d", i)
			if i == 0 {
				reset = r.header.Get("X-RateLimit-Reset")
			}
			require.Equal(t, reset, r.header.Get("X-RateLimit-Reset"), "one window, one reset")
		}
		for range n + 1 { // every instance refuses, one of them twice
			r := f.call(t, "GET", "/api/v1/me", tn.key, nil)
			require.Equal(t, 429, r.status, "%s", r.raw)
			require.Equal(t, "rate_limited", r.body["code"])
			require.Equal(t, strconv.Itoa(limit), r.header.Get("X-RateLimit-Limit"))
			require.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
			require.Equal(t, reset, r.header.Get("X-RateLimit-Reset"))
			ra, err := strconv.Atoi(r.header.Get("Retry-After"))
			require.NoError(t, err)
			require.GreaterOrEqual(t, ra, 1)
			require.LessOrEqual(t, ra, 61, "whole seconds to the reset, rounded up")
			require.Equal(t, 429, f.call(t, "GET", "/api/v1/limits", tn.key, nil).status, "reading limits is rate-limited too")
			c := f.call(t, "POST", "/api/v1/chat", tn.key, chatBody("Hello"))
			require.Equal(t, 429, c.status, "chat counts in the same window: %s", c.raw)
			require.Equal(t, "rate_limited", c.body["code"])
		}
	})
}

// TestFleetSharesWindowsOnRedisCluster: two processes on a Redis Cluster
// share a key's per-minute window as they do on one Redis
// (TestRequestWindowAcrossFleet).
func TestFleetSharesWindowsOnRedisCluster(t *testing.T) {
	testFleetSharesWindows(t, storetest.RedisClusterURL(t))
}

func testFleetSharesWindows(t *testing.T, redisURL string) {
	plans := writePlans(t, "plans:\n  default:\n    requests_per_minute: 3\n")
	a := startTestApp(t, func(c *serveConfig) { c.RedisURL, c.ConfigPath = redisURL, plans })
	b := startTestApp(t, func(c *serveConfig) { c.RedisURL, c.ConfigPath, c.DB.URL = redisURL, plans, a.dbURL })
	tn := newTenant(t, a.dbURL, "fleet@example.com")
	for i, ta := range []*testApp{a, b, a} {
		r := ta.call(t, "GET", "/api/v1/me", tn.key, nil)
		require.Equal(t, 200, r.status)
		require.Equal(t, strconv.Itoa(2-i), r.header.Get("X-RateLimit-Remaining"))
	}
	r := b.call(t, "GET", "/api/v1/me", tn.key, nil)
	require.Equal(t, 429, r.status)
	require.Equal(t, "rate_limited", r.body["code"])
	require.NotEmpty(t, r.header.Get("Retry-After"))
	require.Equal(t, 429, a.call(t, "GET", "/api/v1/limits", tn.key, nil).status, "reading limits is rate-limited too")
}

// A chat request on a Redis Cluster is admitted, settled and read back
// through the organization's slot: its windows, lease and spend counter
// carry one hash tag.
func TestChatMeteredOnRedisCluster(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.RedisURL = storetest.RedisClusterURL(t) })
	tn := newTenant(t, ta.dbURL, "cluster@example.com", "--spend-cap-usd", "100")
	r := ta.call(t, "POST", "/api/v1/chat", tn.key, chatBody("Hi [[sim:tokens=3]]"))
	require.Equal(t, 200, r.status, "%s", r.raw)
	cost := r.body["usage"].(map[string]any)["cost"].(map[string]any)["amount"].(float64)
	require.Positive(t, cost)
	require.Eventually(t, func() bool { // settled after the answer
		l := ta.call(t, "GET", "/api/v1/limits", tn.key, nil)
		return l.status == 200 && l.body["key_spend_cap"].(map[string]any)["spent"].(float64) == cost
	}, 5*time.Second, 20*time.Millisecond)
	require.Zero(t, ta.limits.Unmetered.Load(), "every call reached the cluster")
}

// TestSpentPoolsShowAndRefuse spends a subscription's pools and its mira
// allowance through the counters enforcement reads, and checks what the
// limits route shows and what chat answers at each step.
func TestSpentPoolsShowAndRefuse(t *testing.T) {
	eachFleet(t, testSpentPoolsShowAndRefuse)
}

func testSpentPoolsShowAndRefuse(t *testing.T, n int) {
	plans := writePlans(t, "plans:\n  default:\n    pool_monthly_tokens: 1000000\n    mira_monthly_requests: 1\n")
	f := startFleet(t, n, func(c *serveConfig) { c.ConfigPath = plans })
	org := admin(t, f.dbURL, "org", "create", "--name", "Sub")
	user := admin(t, f.dbURL, "user", "create", "--email", "sub@example.com", "--org", org["id"].(string))
	key := admin(t, f.dbURL, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string), "--kind", "signed_in")
	token, orgID := key["access_token"].(string), org["id"].(string)

	var res meter.Reservation
	refused, err := metertest.Reserve(context.Background(), f.counters(), time.Now(),
		[]meter.Budget{{Kind: meter.BudgetPoolMonthly, Subject: orgID, Cap: 1_000_000}}, []int64{1_000_000}, &res)
	require.NoError(t, err)
	require.Equal(t, -1, refused)

	pool := f.call(t, "GET", "/api/v1/limits", token, nil).body["token_pool"].(map[string]any)
	require.Equal(t, "blocked", pool["state"])
	require.Equal(t, "blocked", pool["monthly"].(map[string]any)["state"])
	require.Equal(t, float64(0), pool["monthly"].(map[string]any)["remaining"])
	require.Equal(t, []any{"kavi", "vaani"}, pool["blocked_models"])

	r := f.call(t, "POST", "/api/v1/chat", token, map[string]any{"model": "kavi", "max_tokens": 8,
		"messages": []map[string]any{{"role": "user", "content": "hi"}}})
	require.Equal(t, 429, r.status, "%s", r.raw)
	require.Equal(t, "budget_exhausted", r.body["code"])
	require.Equal(t, true, r.body["mira_available"])
	require.Equal(t, nextMonthRFC3339(), r.body["reset_at"])

	// mira has its own allowance: one request, then it is spent too.
	r = f.call(t, "POST", "/api/v1/chat", token, chatBody("hi"))
	require.Equal(t, 200, r.status, "%s", r.raw)
	r = f.call(t, "POST", "/api/v1/chat", token, chatBody("hi again"))
	require.Equal(t, 429, r.status)
	require.Equal(t, "budget_exhausted", r.body["code"])
	require.Equal(t, false, r.body["mira_available"])
	pool = f.call(t, "GET", "/api/v1/limits", token, nil).body["token_pool"].(map[string]any)
	require.Equal(t, []any{"kavi", "vaani", "mira"}, pool["blocked_models"])
	require.Equal(t, "blocked", pool["mira"].(map[string]any)["state"])
}

// TestConcurrencyCeilingAcrossFleet: a key's in-flight ceiling counts its
// streams on every instance, refuses on every instance once they hold it,
// and a slot a stream gives back is free on every other.
func TestConcurrencyCeilingAcrossFleet(t *testing.T) {
	eachFleet(t, func(t *testing.T, n int) {
		const ceiling = 2
		plans := writePlans(t, fmt.Sprintf("plans:\n  default:\n    max_concurrent_requests: %d\n", ceiling))
		f := startFleet(t, n, func(c *serveConfig) { c.ConfigPath = plans })
		tn := newTenant(t, f.dbURL, "ceiling@example.com")
		var held []*heldStream
		for range ceiling {
			s := holdStream(t, f.Addr(), tn.key)
			require.NotNil(t, s, "a free slot refused a stream")
			held = append(held, s)
		}
		for range n + 1 { // every instance refuses, one of them twice
			r := f.call(t, "POST", "/api/v1/chat", tn.key, chatBody("one too many"))
			require.Equal(t, 429, r.status, "%s", r.raw)
			require.Equal(t, "rate_limited", r.body["code"])
			require.Equal(t, "concurrency", r.body["reason"])
			require.Equal(t, "1", r.header.Get("Retry-After"))
			require.NotEmpty(t, r.header.Get("X-RateLimit-Remaining"), "a request refused at the ceiling was counted")
		}
		// One client leaves: its slot comes back (the departure is noticed
		// within a second, the release follows), and only that one.
		held[0].close()
		var again *heldStream
		require.Eventually(t, func() bool {
			again = holdStream(t, f.Addr(), tn.key)
			return again != nil
		}, 5*time.Second, 20*time.Millisecond, "the slot a departed stream held never came back")
		defer again.close()
		r := f.call(t, "POST", "/api/v1/chat", tn.key, chatBody("still one too many"))
		require.Equal(t, 429, r.status, "%s", r.raw)
		require.Equal(t, "concurrency", r.body["reason"])
		held[1].close()
	})
}

// heldStream is a chat stream that runs for minutes unless its client
// leaves: it holds one concurrency slot.
type heldStream struct {
	cancel context.CancelFunc
	body   io.ReadCloser
}

// holdStream opens a long stream on addr and returns once its first frame
// arrived, or nil when the request was refused at the key's ceiling.
func holdStream(t *testing.T, addr, key string) *heldStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/api/v1/chat", strings.NewReader(
		`{"model":"mira","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":"hold [[sim:tokens=3000]] [[sim:itl_ms=100]]"}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	if r.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		cancel()
		require.Equal(t, http.StatusTooManyRequests, r.StatusCode, "%s", body)
		require.Contains(t, string(body), `"reason":"concurrency"`)
		return nil
	}
	line, err := bufio.NewReader(r.Body).ReadString('\n')
	require.NoError(t, err, "the stream sent no first frame")
	require.NotEmpty(t, line)
	s := &heldStream{cancel: cancel, body: r.Body}
	t.Cleanup(s.close)
	return s
}

// close leaves the stream, as a client that goes away.
func (s *heldStream) close() {
	s.cancel()
	_ = s.body.Close()
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// loadPlan lets a load test's key send as fast as it can.
const loadPlan = "plans:\n  default:\n    requests_per_minute: 1000000\n    org_requests_per_minute: 1000000\n"

// loadResult counts what a load run saw.
type loadResult struct {
	sent, ok, unmetered atomic.Int64
	failures            sync.Map // status or error text -> count of one
	done                chan struct{}
}

// answered waits until n requests of the load have been answered; when
// they are not, it says how far the load got and what failed.
func (r *loadResult) answered(t *testing.T, n int64, msg string) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return r.ok.Load() >= n }, 15*time.Second, 2*time.Millisecond, msg) {
		t.Fatalf("%s: %d answered of %d awaited, %d sent; failures: %q", msg, r.ok.Load(), n, r.sent.Load(), r.failed())
	}
}

// load sends chat requests from workers goroutines, each with a request id
// of its own, until stop is closed.
func load(addr, key string, workers int, stop <-chan struct{}) *loadResult {
	res := &loadResult{done: make(chan struct{})}
	body, _ := json.Marshal(chatBody("Hi [[sim:tokens=2]]"))
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", "http://"+addr+"/api/v1/chat", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("X-Request-Id", fmt.Sprintf("load-%d-%d", g, i))
				res.sent.Add(1)
				r, err := http.DefaultClient.Do(req)
				if err != nil {
					res.failures.Store(err.Error(), 1)
					continue
				}
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				if r.StatusCode != 200 {
					res.failures.Store(r.Status, 1)
					continue
				}
				res.ok.Add(1)
				if r.Header.Get("X-RateLimit-Limit") == "" {
					res.unmetered.Add(1)
				}
			}
		})
	}
	go func() { wg.Wait(); close(res.done) }()
	return res
}

// wait returns once every worker has stopped.
func (r *loadResult) wait() { <-r.done }

func (r *loadResult) failed() []string {
	var out []string
	r.failures.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	return out
}

// ledgerRows counts the key's rows and distinct request ids in the ledger.
func ledgerRows(t *testing.T, dbURL, keyID string) (rows, ids int64) {
	t.Helper()
	ctx := context.Background()
	db, err := storage.Open(ctx, storage.Config{URL: dbURL, MaxConns: 2})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*), count(distinct request_id) from request_log where key_id = $1`,
		keyID).Scan(&rows, &ids))
	return rows, ids
}

// TestRedisDiesUnderLoad cuts Redis while chat runs: every request is
// answered, those served during the outage without rate-limit headers, a
// log line and the metric say so, and every ledger row is there once.
func TestRedisDiesUnderLoad(t *testing.T) {
	_, relayed, relay := behindRelay(t, storetest.RedisURL(t))
	plans := writePlans(t, loadPlan)
	a := startTestApp(t, func(c *serveConfig) { c.RedisURL, c.ConfigPath = relayed, plans })
	tn := newTenant(t, a.dbURL, "redis-dies@example.com", "--spend-cap-usd", "100")

	stop := make(chan struct{})
	res := load(a.Addr(), tn.key, 8, stop)
	res.answered(t, 40, "metered load before the outage")
	relay.Cut()
	require.Eventually(t, func() bool { return res.unmetered.Load() >= 20 }, 15*time.Second, 5*time.Millisecond,
		"requests are served unmetered during the outage")
	relay.Restore()
	metered := func() int64 { return res.ok.Load() - res.unmetered.Load() }
	before := metered()
	require.Eventually(t, func() bool { return metered() >= before+20 }, 15*time.Second, 5*time.Millisecond,
		"metered again once Redis is back")
	close(stop)
	res.wait()

	require.Empty(t, res.failed(), "every request is answered")
	require.Equal(t, res.sent.Load(), res.ok.Load())
	require.Positive(t, res.unmetered.Load(), "requests during the outage are served unmetered")
	require.Less(t, res.unmetered.Load(), res.sent.Load(), "and the others are metered")
	require.Contains(t, a.logs.String(), "serving requests unmetered")
	require.Positive(t, a.limits.Unmetered.Load())

	require.Eventually(t, func() bool {
		rows, ids := ledgerRows(t, a.dbURL, tn.keyID)
		return rows == res.sent.Load() && ids == rows
	}, 10*time.Second, 50*time.Millisecond, "one ledger row per request")
}

// behindRelay puts a relay the test can cut in front of the service at
// rawURL: the service's own URL, the URL through the relay, and the relay.
func behindRelay(t *testing.T, rawURL string) (direct, relayed string, relay *storetest.Relay) {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	relay = storetest.StartRelay(t, u.Host)
	u.Host = relay.Addr()
	return rawURL, u.String(), relay
}

// TestPostgresDiesUnderLoad cuts PostgreSQL while chat runs: a cached key
// keeps working, every request is answered, the ledger spools, and once
// PostgreSQL is back every row is in it exactly once.
func TestPostgresDiesUnderLoad(t *testing.T) {
	direct, relayed, relay := behindRelay(t, storetest.DatabaseURL(t))
	plans := writePlans(t, loadPlan)
	a := startTestApp(t, func(c *serveConfig) { c.DB.URL, c.ConfigPath = relayed, plans })
	tn := newTenant(t, direct, "pg-dies@example.com", "--spend-cap-usd", "100")
	require.Equal(t, 200, a.call(t, "POST", "/api/v1/chat", tn.key, chatBody("warm the key cache")).status)

	stop := make(chan struct{})
	res := load(a.Addr(), tn.key, 8, stop)
	res.answered(t, 40, "load before the outage")
	relay.Cut()
	cut := res.ok.Load()
	require.Eventually(t, func() bool { return strings.Contains(a.logs.String(), "rows go to the spool") },
		15*time.Second, 5*time.Millisecond, "the ledger spools while PostgreSQL is away")
	res.answered(t, cut+40, "requests answered during the outage")
	during := res.ok.Load() - cut
	relay.Restore()
	require.Eventually(t, func() bool { return strings.Contains(a.logs.String(), "ledger writes to PostgreSQL again") },
		15*time.Second, 5*time.Millisecond, "the ledger writes to PostgreSQL again")
	res.answered(t, res.ok.Load()+40, "load after the outage")
	close(stop)
	res.wait()

	require.Empty(t, res.failed(), "every request is answered")
	require.Equal(t, res.sent.Load(), res.ok.Load())
	require.Greater(t, during, int64(0))
	require.Eventually(t, func() bool {
		rows, ids := ledgerRows(t, direct, tn.keyID)
		return rows == res.sent.Load()+1 && ids == rows
	}, 20*time.Second, 100*time.Millisecond, "one ledger row per request, replayed from the spool")
}

// warmKey sends chat until key is served from the process's cache, so that
// it keeps working while PostgreSQL is away (a fill that the notification of
// the key's creation overtakes is not kept), and returns the last request's
// id.
func warmKey(t *testing.T, a *testApp, key string) (requestID string) {
	t.Helper()
	hits := a.verifier.Stats().Hits
	require.Eventually(t, func() bool {
		r := a.call(t, "POST", "/api/v1/chat", key, chatBody("warm the key cache"))
		require.Equal(t, 200, r.status, "%s", r.raw)
		requestID = r.header.Get("X-Request-Id")
		return a.verifier.Stats().Hits > hits
	}, 10*time.Second, 10*time.Millisecond)
	return requestID
}

// TestPostgresDownAnswers503 stops PostgreSQL (its connections refused):
// every route that needs the database answers 503 service_unavailable in
// its envelope, which the client may send again, never 500 internal_error.
func TestPostgresDownAnswers503(t *testing.T) {
	direct, relayed, relay := behindRelay(t, storetest.DatabaseURL(t))
	a := startTestApp(t, func(c *serveConfig) { c.DB.URL = relayed })
	tn := newTenant(t, direct, "pg-down@example.com")
	id := warmKey(t, a, tn.key)
	login := a.call(t, "POST", "/api/v1/device/code", "", nil)
	require.Equal(t, 200, login.status, "%s", login.raw)
	relay.Cut()

	routes := []struct {
		method, path string
		body         any
	}{
		{"GET", "/api/v1/conversations", nil},
		{"POST", "/api/v1/conversations", map[string]any{"title": "t"}},
		{"GET", "/api/v1/memories", nil},
		{"GET", "/api/v1/files", nil},
		{"POST", "/api/v1/feedback", map[string]any{"request_id": id, "type": "thumbs", "payload": map[string]any{"value": "up"}}},
		{"GET", "/api/v1/keys", nil},
		{"GET", "/api/v1/profile", nil},
		{"GET", "/api/v1/org/memberships", nil},
		{"GET", "/api/v1/rules/resolved", nil},
		{"GET", "/api/v1/logs/" + id, nil},
	}
	for _, rt := range routes {
		r := a.call(t, rt.method, rt.path, tn.key, rt.body)
		require.Equal(t, 503, r.status, "%s %s: %s", rt.method, rt.path, r.raw)
		require.Equal(t, "service_unavailable", r.body["code"], "%s %s", rt.method, rt.path)
	}
	// The sign-in routes answer in their OAuth form.
	r := a.call(t, "POST", "/api/v1/device/code", "", nil)
	require.Equal(t, 503, r.status, "%s", r.raw)
	require.Equal(t, "service_unavailable", r.body["code"])
	require.Equal(t, "temporarily_unavailable", r.body["error"])
	req, err := http.NewRequest("POST", "http://"+a.Addr()+"/api/v1/device/token", strings.NewReader(
		url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {login.body["device_code"].(string)}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r = do(t, req)
	require.Equal(t, 503, r.status, "%s", r.raw)
	require.Equal(t, "temporarily_unavailable", r.body["error"])
	require.NotContains(t, a.logs.String(), `"msg":"request failed"`, "nothing was answered internal_error")
}

// TestSaturatedLedgerRefusesChat stops PostgreSQL and fills the spool to
// its bound, where a ledger row can be kept nowhere: billable work is then
// refused 503 service_unavailable with Retry-After on every wire, before
// the upstream is called, instead of being served and never billed. Token
// counting bills nothing and is still served.
func TestSaturatedLedgerRefusesChat(t *testing.T) {
	direct, relayed, relay := behindRelay(t, storetest.DatabaseURL(t))
	a := startTestApp(t, func(c *serveConfig) {
		c.DB.URL = relayed
		c.Ledger.QueueSize, c.Ledger.BatchSize, c.Ledger.SpoolMaxBytes = 2, 1, 1<<20
	})
	tn := newTenant(t, direct, "ledger-full@example.com")
	warmKey(t, a, tn.key)
	relay.Cut()
	// The writer, behind on its fsyncs, may take rows out of a full queue
	// into the batch it then holds: fed until it holds one and the queue
	// stays full.
	n := 0
	require.Eventually(t, func() bool {
		for ; !a.ledger.Saturated(); n++ {
			a.ledger.Record(&hotpath.UsageRecord{RequestID: fmt.Sprintf("fill-%d", n), At: time.Now(), KeyID: tn.keyID,
				UserID: tn.userID, OrgID: tn.orgID, Bucket: "apikey", Route: "chat_v1", Status: 200})
		}
		time.Sleep(100 * time.Millisecond)
		return a.ledger.Saturated()
	}, 20*time.Second, time.Millisecond, "the spool never reached its bound")

	responses := map[string]any{"model": "mira", "max_output_tokens": 16, "input": "hello"}
	for _, w := range []struct {
		path string
		body any
	}{
		{"/api/v1/chat", chatBody("hello")}, {"/api/v2/chat", chatBody("hello")},
		{"/v1/chat/completions", chatBody("hello")}, {"/v1/messages", chatBody("hello")},
		{"/v1/responses", responses},
		{"/api/v1/embeddings", map[string]any{"model": "gw-embed", "input": "hello"}},
	} {
		r := a.call(t, "POST", w.path, tn.key, w.body)
		if w.path == "/v1/messages" {
			require.Equal(t, 529, r.status, "%s: %s", w.path, r.raw)
			require.Equal(t, "overloaded_error", r.body["error"].(map[string]any)["type"])
		} else {
			require.Equal(t, 503, r.status, "%s: %s", w.path, r.raw)
			require.Contains(t, string(r.raw), `"service_unavailable"`, w.path)
		}
		require.Equal(t, "1", r.header.Get("Retry-After"), "%s: %s", w.path, r.raw)
	}
	r := a.call(t, "POST", "/api/v1/tokens/count", tn.key, chatBody("hello"))
	require.Equal(t, 200, r.status, "%s", r.raw)
}

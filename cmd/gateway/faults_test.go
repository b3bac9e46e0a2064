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
	u, err := url.Parse(storetest.RedisURL(t))
	require.NoError(t, err)
	relay := storetest.StartRelay(t, u.Host)
	u.Host = relay.Addr()
	plans := writePlans(t, loadPlan)
	a := startTestApp(t, func(c *serveConfig) { c.RedisURL, c.ConfigPath = u.String(), plans })
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

// TestPostgresDiesUnderLoad cuts PostgreSQL while chat runs: a cached key
// keeps working, every request is answered, the ledger spools, and once
// PostgreSQL is back every row is in it exactly once.
func TestPostgresDiesUnderLoad(t *testing.T) {
	u, err := url.Parse(storetest.DatabaseURL(t))
	require.NoError(t, err)
	direct := u.String()
	relay := storetest.StartRelay(t, u.Host)
	u.Host = relay.Addr()
	plans := writePlans(t, loadPlan)
	a := startTestApp(t, func(c *serveConfig) { c.DB.URL, c.ConfigPath = u.String(), plans })
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

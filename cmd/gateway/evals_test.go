package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/storage"
)

// evalClient calls the eval routes with one key.
type evalClient struct {
	addr string
	key  string
}

func (c evalClient) do(t *testing.T, method, path string, body any) resp {
	t.Helper()
	if s, ok := body.(string); ok {
		req, err := http.NewRequest(method, "http://"+c.addr+path, strings.NewReader(s))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+c.key)
		return do(t, req)
	}
	return call(t, c.addr, method, path, c.key, body)
}

func (c evalClient) ok(t *testing.T, status int, method, path string, body any) map[string]any {
	t.Helper()
	r := c.do(t, method, path, body)
	require.Equal(t, status, r.status, "%s %s: %s", method, path, r.raw)
	return r.body
}

func (c evalClient) suite(t *testing.T, name string) string {
	t.Helper()
	return c.ok(t, 201, "POST", "/api/v1/evals/suites", map[string]any{"name": name, "tier": "mira"})["id"].(string)
}

func (c evalClient) addCase(t *testing.T, suiteID, text string, assertions ...map[string]any) string {
	t.Helper()
	body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}, "assertions": assertions}
	return c.ok(t, 201, "POST", "/api/v1/evals/suites/"+suiteID+"/cases", body)["id"].(string)
}

// waitRun polls the run until it has ended, and returns it.
func (c evalClient) waitRun(t *testing.T, runID string, within time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		run := c.ok(t, 200, "GET", "/api/v1/evals/runs/"+runID, nil)
		switch run["status"] {
		case "completed", "failed", "cancelled":
			return run
		}
		require.True(t, time.Now().Before(deadline), "run still %v: %v", run["status"], run["counts"])
		time.Sleep(50 * time.Millisecond)
	}
}

func (c evalClient) results(t *testing.T, runID string) []map[string]any {
	t.Helper()
	var out []map[string]any
	cursor := ""
	for {
		page := c.ok(t, 200, "GET", "/api/v1/evals/runs/"+runID+"/results?limit=2"+cursor, nil)
		for _, r := range page["data"].([]any) {
			out = append(out, r.(map[string]any))
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			return out
		}
		cursor = "&cursor=" + next
	}
}

func eq(v string) map[string]any { return map[string]any{"type": "equals", "value": v} }

// runLedger sums the ledger rows of the run's request ids, as the request
// log holds them, and counts them by route.
func runLedger(t *testing.T, dbURL, runID string) (cost int64, byRoute map[string]int) {
	t.Helper()
	ctx := context.Background()
	db, err := storage.Open(ctx, storage.Config{URL: dbURL, MaxConns: 2})
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Pool.Query(ctx, `select l.route, l.cost_pico from request_log l
		where l.request_id in (select unnest(request_ids) from eval_results where run_id = $1)`, runID)
	require.NoError(t, err)
	defer rows.Close()
	byRoute = map[string]int{}
	for rows.Next() {
		var route string
		var c int64
		require.NoError(t, rows.Scan(&route, &c))
		byRoute[route]++
		cost += c
	}
	require.NoError(t, rows.Err())
	return cost, byRoute
}

// flushLedger writes the app's queued ledger rows.
func (ta *testApp) flushLedger(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, ta.ledger.Flush(ctx))
}

// A run executes every case through the chat pipeline and scores exactly:
// each assertion type passes and fails where the simulator's reply says it
// must, the judge grades with structured output, the run's cost is the sum
// of its ledger rows (marked as eval traffic), and results page by keyset.
func TestEvalRunScores(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "evals@example.com")
	c := evalClient{addr: ta.Addr(), key: tn.key}
	suite := c.suite(t, "Support replies")

	weather := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
			"required": []any{"city"}}}}
	cases := []struct {
		body   map[string]any
		passes bool
	}{
		{map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hi [[sim:reply=Hello there]]"}},
			"assertions": []any{eq("Hello there"), map[string]any{"type": "contains", "value": "HELLO", "ignore_case": true}}}, true},
		{map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hi [[sim:reply=Goodbye]]"}},
			"assertions": []any{map[string]any{"type": "contains", "value": "Hello"}}}, false},
		{map[string]any{"messages": []any{map[string]any{"role": "user", "content": "[[sim:reply=order 12345 shipped]]"}},
			"assertions": []any{map[string]any{"type": "regex", "pattern": `^order \d{5} shipped$`},
				map[string]any{"type": "not_contains", "value": "refund"}}}, true},
		{map[string]any{"messages": []any{map[string]any{"role": "user", "content": `[[sim:reply={"answer":42}]]`}},
			"assertions": []any{map[string]any{"type": "json_schema", "schema": map[string]any{"type": "object",
				"properties": map[string]any{"answer": map[string]any{"type": "string"}}, "required": []any{"answer"}}}}}, false},
		{map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Weather in Oslo? [[sim:tool=get_weather]]"}},
			"tools": []any{weather},
			"assertions": []any{map[string]any{"type": "tool_call", "name": "get_weather", "arguments": map[string]any{
				"type": "object", "required": []any{"city"}}}}}, true},
		{map[string]any{"messages": []any{map[string]any{"role": "user", "content": "[[sim:reply=Sorry for the wait]]"}},
			"assertions": []any{map[string]any{"type": "judge",
				"rubric": `The reply apologises. [[sim:reply={"pass":true,"reason":"it apologises"}]]`}}}, true},
		{map[string]any{"messages": []any{map[string]any{"role": "user", "content": "[[sim:reply=Whatever]]"}},
			"assertions": []any{map[string]any{"type": "judge", "tier": "kavi",
				"rubric": `The reply is polite. [[sim:reply={"pass":false,"reason":"curt"}]]`}}}, false},
	}
	for _, cs := range cases {
		c.ok(t, 201, "POST", "/api/v1/evals/suites/"+suite+"/cases", cs.body)
	}
	require.EqualValues(t, len(cases), c.ok(t, 200, "GET", "/api/v1/evals/suites/"+suite, nil)["case_count"])

	run := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{"repeat": 2, "concurrency": 3})
	require.Equal(t, "mira", run["tier"], "the suite's tier is the default")
	require.EqualValues(t, 2*len(cases), run["counts"].(map[string]any)["total"])
	runID := run["id"].(string)
	run = c.waitRun(t, runID, 30*time.Second)
	require.Equal(t, "completed", run["status"], "%v", run)
	counts := run["counts"].(map[string]any)
	require.EqualValues(t, 8, counts["passed"])
	require.EqualValues(t, 6, counts["failed"])
	require.EqualValues(t, 0, counts["errored"])
	require.InDelta(t, 8.0/14, run["pass_rate"], 0.0001)
	scores := run["assertions"].(map[string]any)
	require.Equal(t, map[string]any{"passed": 2.0, "total": 2.0, "pass_rate": 1.0}, scores["equals"])
	require.Equal(t, map[string]any{"passed": 2.0, "total": 4.0, "pass_rate": 0.5}, scores["contains"])
	require.Equal(t, map[string]any{"passed": 0.0, "total": 2.0, "pass_rate": 0.0}, scores["json_schema"])
	require.Equal(t, map[string]any{"passed": 2.0, "total": 2.0, "pass_rate": 1.0}, scores["tool_call"])
	require.Equal(t, map[string]any{"passed": 2.0, "total": 4.0, "pass_rate": 0.5}, scores["judge"])

	results := c.results(t, runID)
	require.Len(t, results, 2*len(cases))
	for i, r := range results {
		cs := cases[i/2]
		require.EqualValues(t, i%2+1, r["repeat"])
		want := "failed"
		if cs.passes {
			want = "passed"
		}
		require.Equal(t, want, r["status"], "case %d: %v", i/2, r)
		require.EqualValues(t, 1, r["attempts"])
		require.Positive(t, r["input_tokens"])
	}
	require.Equal(t, "Hello there", results[0]["reply"])
	require.Contains(t, results[6]["assertions"].([]any)[0].(map[string]any)["reason"], "answer")
	require.Equal(t, "get_weather", results[8]["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["name"])
	judged := results[12]["assertions"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"type": "judge", "passed": false, "reason": "curt"}, judged)

	// The cost is the ledger's: one eval_case row per result, one
	// eval_judge row per judged result.
	ta.flushLedger(t)
	cost, byRoute := runLedger(t, ta.dbURL, runID)
	require.Equal(t, map[string]int{"eval_case": 14, "eval_judge": 4}, byRoute)
	require.Positive(t, cost)
	run = c.ok(t, 200, "GET", "/api/v1/evals/runs/"+runID, nil)
	require.Equal(t, string(codec.AppendDecimal(nil, cost, 12)), fmt.Sprint(run["cost"].(map[string]any)["amount"]))
	var sum int64
	for _, r := range results {
		sum += picoOf(t, r["cost"])
	}
	require.Equal(t, cost, sum, "results' costs add up to the ledger's")
	require.Equal(t, cost, picoOf(t, run["cost"]))

	// The ledger rows are eval traffic on the key, like any chat call.
	logged := c.ok(t, 200, "GET", "/api/v1/logs/eval-"+results[0]["id"].(string)+"-1", nil)
	require.Contains(t, fmt.Sprint(logged), "eval_case")
}

// Compare lists the cases whose verdict changed between two runs and the
// pass-rate delta; a run of another suite is refused.
func TestEvalCompareRuns(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "compare@example.com")
	c := evalClient{addr: ta.Addr(), key: tn.key}
	suite := c.suite(t, "Regression gate")
	stable := c.addCase(t, suite, "[[sim:reply=yes]]", eq("yes"))
	flaky := c.addCase(t, suite, "[[sim:reply=yes]]", eq("yes"))
	broken := c.addCase(t, suite, "[[sim:reply=no]]", eq("yes"))

	base := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", nil)["id"].(string)
	require.Equal(t, "completed", c.waitRun(t, base, 20*time.Second)["status"])

	// The prompt change: flaky now fails, broken now passes; runs snapshot
	// cases, so the baseline keeps its verdicts.
	c.ok(t, 200, "PATCH", "/api/v1/evals/suites/"+suite+"/cases/"+flaky, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "[[sim:reply=nope]]"}}})
	c.ok(t, 200, "PATCH", "/api/v1/evals/suites/"+suite+"/cases/"+broken, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "[[sim:reply=yes]]"}}})
	c.ok(t, 200, "PATCH", "/api/v1/evals/suites/"+suite+"/cases/"+broken, map[string]any{"name": "fixed one"})
	next := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{"tier": "kavi"})["id"].(string)
	require.Equal(t, "completed", c.waitRun(t, next, 20*time.Second)["status"])

	cmp := c.ok(t, 200, "GET", "/api/v1/evals/runs/"+next+"/compare?baseline="+base, nil)
	require.Equal(t, "eval.comparison", cmp["object"])
	require.InDelta(t, 2.0/3, cmp["pass_rate"], 0.0001)
	require.InDelta(t, 2.0/3, cmp["baseline_pass_rate"], 0.0001)
	require.EqualValues(t, 0, cmp["pass_rate_delta"])
	require.EqualValues(t, 1, cmp["regressions"])
	require.EqualValues(t, 1, cmp["fixes"])
	data := cmp["data"].([]any)
	require.Len(t, data, 2)
	require.Equal(t, map[string]any{"case_id": flaky, "change": "regressed", "passed": 0.0, "total": 1.0,
		"baseline_passed": 1.0, "baseline_total": 1.0}, data[0])
	require.Equal(t, broken, data[1].(map[string]any)["case_id"])
	require.Equal(t, "fixed", data[1].(map[string]any)["change"])
	require.NotContains(t, fmt.Sprint(data), stable)

	other := c.suite(t, "Other")
	c.addCase(t, other, "[[sim:reply=x]]")
	otherRun := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+other+"/runs", nil)["id"].(string)
	r := c.do(t, "GET", "/api/v1/evals/runs/"+next+"/compare?baseline="+otherRun, nil)
	requireError(t, r, 400, "invalid_request", "baseline")
	requireError(t, c.do(t, "GET", "/api/v1/evals/runs/"+next+"/compare", nil), 400, "invalid_request", "baseline")
}

// Cancelling a run stops it at once: queued items are cancelled, the run
// ends cancelled, and its events stream ends with an end event.
func TestEvalCancelAndEvents(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.Eval.Workers = 1 })
	tn := newTenant(t, ta.dbURL, "cancel@example.com")
	c := evalClient{addr: ta.Addr(), key: tn.key}
	suite := c.suite(t, "Slow")
	for range 6 {
		c.addCase(t, suite, "[[sim:ttft_ms=400]] [[sim:reply=ok]]", eq("ok"))
	}
	runID := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{"concurrency": 1})["id"].(string)

	req, err := http.NewRequest("GET", "http://"+ta.Addr()+"/api/v1/evals/runs/"+runID+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tn.key)
	stream, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, 200, stream.StatusCode)
	require.Equal(t, "text/event-stream", stream.Header.Get("Content-Type"))

	sc := bufio.NewScanner(stream.Body)
	sc.Buffer(nil, 1<<20)
	var events []string
	cancelled := false
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, name)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"passed":1`) && !cancelled {
			c.ok(t, 200, "POST", "/api/v1/evals/runs/"+runID+"/cancel", nil)
			cancelled = true
		}
	}
	require.NoError(t, sc.Err())
	require.True(t, cancelled, "events: %v", events)
	require.Equal(t, "progress", events[0])
	require.Equal(t, "end", events[len(events)-1])

	run := c.waitRun(t, runID, 10*time.Second)
	require.Equal(t, "cancelled", run["status"])
	counts := run["counts"].(map[string]any)
	require.GreaterOrEqual(t, counts["cancelled"], 3.0, "%v", counts)
	require.EqualValues(t, 6, counts["passed"].(float64)+counts["cancelled"].(float64)+counts["running"].(float64))
	// Cancelling again is a no-op; the run stays cancelled.
	require.Equal(t, "cancelled", c.ok(t, 200, "POST", "/api/v1/evals/runs/"+runID+"/cancel", nil)["status"])
	// An ended run's stream is one end event.
	ended := c.do(t, "GET", "/api/v1/evals/runs/"+runID+"/events", nil)
	require.True(t, strings.HasPrefix(string(ended.raw), "event: end\n"), "%s", ended.raw)
	require.Equal(t, 1, strings.Count(string(ended.raw), "event:"))
}

// Budgets apply to eval traffic: a workspace spend cap refuses the cases
// with its code, and on_budget stop ends the run failed with it.
func TestEvalBudgets(t *testing.T) {
	ta := startTestApp(t)
	org := admin(t, ta.dbURL, "org", "create", "--name", "Capped")
	ws := admin(t, ta.dbURL, "workspace", "create", "--org", org["id"].(string), "--name", "Team", "--spend-cap-usd", "0.000001")
	user := admin(t, ta.dbURL, "user", "create", "--email", "capped@example.com", "--org", org["id"].(string), "--role", "owner")
	key := admin(t, ta.dbURL, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string),
		"--workspace", ws["id"].(string))
	c := evalClient{addr: ta.Addr(), key: key["access_token"].(string)}
	suite := c.suite(t, "Capped")
	for range 4 {
		c.addCase(t, suite, "[[sim:tokens=2000]]")
	}
	run := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{"concurrency": 1})
	run = c.waitRun(t, run["id"].(string), 20*time.Second)
	require.Equal(t, "completed", run["status"], "on_budget continue goes on")
	results := c.results(t, run["id"].(string))
	require.Len(t, results, 4)
	capped := 0
	for _, r := range results {
		if r["status"] == "errored" {
			require.Equal(t, "workspace_spend_cap_exceeded", r["error_code"])
			capped++
		}
	}
	require.Positive(t, capped)

	stop := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{"concurrency": 1, "on_budget": "stop"})
	stop = c.waitRun(t, stop["id"].(string), 20*time.Second)
	require.Equal(t, "failed", stop["status"])
	require.Equal(t, "workspace_spend_cap_exceeded", stop["reason"])
	require.EqualValues(t, 3, stop["counts"].(map[string]any)["cancelled"])
}

// evalFixture is an app with a tenant, its client and one suite, and a
// one-message conversation for the suite's cases.
type evalFixture struct {
	ta          *testApp
	tn          tenant
	c           evalClient
	suite, base string
	user        []any
}

func newEvalFixture(t *testing.T, email, name string) evalFixture {
	t.Helper()
	fx := evalFixture{ta: startTestApp(t), user: []any{map[string]any{"role": "user", "content": "hi"}}}
	fx.tn = newTenant(t, fx.ta.dbURL, email)
	fx.c = evalClient{addr: fx.ta.Addr(), key: fx.tn.key}
	fx.suite = fx.c.suite(t, name)
	fx.base = "/api/v1/evals/suites/" + fx.suite
	return fx
}

// withAssertion is a case body of the fixture's conversation with one
// assertion.
func (fx evalFixture) withAssertion(a any) map[string]any {
	return map[string]any{"messages": fx.user, "assertions": []any{a}}
}

// Bad input is 400 naming the field, never a partial write; another
// workspace's or organization's ids are 404 with the eval codes.
func TestEvalBadInputAndIsolation(t *testing.T) {
	fx := newEvalFixture(t, "owner@example.com", "Checks")
	ta, tn, c, suite, base, user, withAssertion := fx.ta, fx.tn, fx.c, fx.suite, fx.base, fx.user, fx.withAssertion
	long := strings.Repeat("x", 70<<10)
	for _, tc := range []struct {
		name, method, path string
		body               any
		code, field        string
	}{
		{"suite without name", "POST", "/api/v1/evals/suites", map[string]any{}, "invalid_request", "name"},
		{"suite unknown tier", "POST", "/api/v1/evals/suites", map[string]any{"name": "x", "tier": "gpt-9"}, "invalid_request", "tier"},
		{"suite bad slug", "POST", "/api/v1/evals/suites", map[string]any{"name": "x", "slug": "Not A Slug"}, "invalid_request", "slug"},
		{"suite unknown field", "POST", "/api/v1/evals/suites", map[string]any{"name": "x", "tiers": "kavi"}, "invalid_request", "tiers"},
		{"malformed json", "POST", "/api/v1/evals/suites", "{", "invalid_request", ""},
		{"case without messages", "POST", base + "/cases", map[string]any{"assertions": []any{}}, "invalid_request", "messages"},
		{"case bad role", "POST", base + "/cases", map[string]any{"messages": []any{map[string]any{"role": "robot", "content": "x"}}},
			"invalid_request", "messages[0]"},
		{"case too large", "POST", base + "/cases", map[string]any{"messages": []any{map[string]any{"role": "user", "content": long}}},
			"invalid_request", "65536 bytes"},
		{"unknown assertion", "POST", base + "/cases", withAssertion(map[string]any{"type": "similar", "value": "x"}),
			"invalid_request", "assertions[0].type"},
		{"assertion missing value", "POST", base + "/cases", withAssertion(map[string]any{"type": "contains"}),
			"invalid_request", "assertions[0].value"},
		{"assertion stray field", "POST", base + "/cases", withAssertion(map[string]any{"type": "equals", "value": "x", "pattern": "y"}),
			"invalid_request", "assertions[0].pattern"},
		{"invalid regex", "POST", base + "/cases", withAssertion(map[string]any{"type": "regex", "pattern": "(unclosed"}),
			"invalid_request", "assertions[0].pattern"},
		{"regex too long", "POST", base + "/cases", withAssertion(map[string]any{"type": "regex", "pattern": strings.Repeat("a", 600)}),
			"invalid_request", "assertions[0].pattern"},
		{"invalid schema", "POST", base + "/cases", withAssertion(map[string]any{"type": "json_schema", "schema": map[string]any{"type": 7}}),
			"invalid_schema", "assertions[0].schema"},
		{"unsupported keyword", "POST", base + "/cases", withAssertion(map[string]any{"type": "json_schema",
			"schema": map[string]any{"type": "object", "if": map[string]any{}}}), "invalid_schema", "assertions[0].schema"},
		{"tool_call bad arguments schema", "POST", base + "/cases", withAssertion(map[string]any{"type": "tool_call", "name": "f",
			"arguments": "not a schema"}), "invalid_schema", "assertions[0].arguments"},
		{"judge unknown tier", "POST", base + "/cases", withAssertion(map[string]any{"type": "judge", "rubric": "r", "tier": "zeta"}),
			"invalid_request", "assertions[0].tier"},
		{"bad response_format", "POST", base + "/cases", map[string]any{"messages": user,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": map[string]any{"type": 7}}}},
			"invalid_schema", "response_format"},
		{"run unknown tier", "POST", base + "/runs", map[string]any{"tier": "nope"}, "invalid_request", "tier"},
		{"run concurrency", "POST", base + "/runs", map[string]any{"concurrency": 17}, "invalid_request", "concurrency"},
		{"run repeat", "POST", base + "/runs", map[string]any{"repeat": 0}, "invalid_request", "repeat"},
		{"run on_budget", "POST", base + "/runs", map[string]any{"on_budget": "pause"}, "invalid_request", "on_budget"},
		{"run of an empty suite", "POST", base + "/runs", nil, "invalid_request", "no cases"},
		{"bad cursor", "GET", "/api/v1/evals/suites?cursor=zzz", nil, "invalid_request", "cursor"},
		{"bad limit", "GET", "/api/v1/evals/suites?limit=0", nil, "invalid_request", "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(t, tc.method, tc.path, tc.body)
			requireError(t, r, 400, tc.code, tc.field)
		})
	}
	// Nothing above was stored.
	require.EqualValues(t, 0, c.ok(t, 200, "GET", base, nil)["case_count"])
	require.Len(t, c.ok(t, 200, "GET", "/api/v1/evals/suites", nil)["data"], 1)
	require.Len(t, c.ok(t, 200, "GET", "/api/v1/evals/suites?cursor=", nil)["data"], 1, "an empty cursor is the first page")

	// Slugs are derived from the name and unique in the workspace.
	s := c.ok(t, 201, "POST", "/api/v1/evals/suites", map[string]any{"name": "Support — Replies!"})
	require.Equal(t, "support-replies", s["slug"])
	require.Equal(t, "auto", s["tier"])
	requireError(t, c.do(t, "POST", "/api/v1/evals/suites", map[string]any{"name": "support replies"}), 409, "eval_suite_slug_exists")
	requireError(t, c.do(t, "PATCH", "/api/v1/evals/suites/"+suite, map[string]any{"slug": "support-replies"}), 409, "eval_suite_slug_exists")

	caseID := c.addCase(t, suite, "[[sim:reply=ok]]", eq("ok"))
	runID := c.ok(t, 202, "POST", base+"/runs", nil)["id"].(string)
	c.waitRun(t, runID, 10*time.Second)

	// Another organization sees none of it.
	other := evalClient{addr: ta.Addr(), key: newTenant(t, ta.dbURL, "other@example.com").key}
	// Another workspace of the same organization neither.
	ws := admin(t, ta.dbURL, "workspace", "create", "--org", tn.orgID, "--name", "Elsewhere")
	wsKey := admin(t, ta.dbURL, "key", "create", "--user", tn.userID, "--org", tn.orgID, "--workspace", ws["id"].(string))
	sibling := evalClient{addr: ta.Addr(), key: wsKey["access_token"].(string)}
	for _, x := range []evalClient{other, sibling} {
		require.Empty(t, x.ok(t, 200, "GET", "/api/v1/evals/suites", nil)["data"])
		requireError(t, x.do(t, "GET", base, nil), 404, "eval_suite_not_found")
		requireError(t, x.do(t, "PATCH", base, map[string]any{"name": "mine"}), 404, "eval_suite_not_found")
		requireError(t, x.do(t, "DELETE", base, nil), 404, "eval_suite_not_found")
		requireError(t, x.do(t, "GET", base+"/cases", nil), 404, "eval_suite_not_found")
		requireError(t, x.do(t, "GET", base+"/cases/"+caseID, nil), 404, "eval_suite_not_found")
		requireError(t, x.do(t, "POST", base+"/cases", map[string]any{"messages": user}), 404, "eval_suite_not_found")
		requireError(t, x.do(t, "POST", base+"/runs", nil), 404, "eval_suite_not_found")
		requireError(t, x.do(t, "GET", "/api/v1/evals/runs/"+runID, nil), 404, "eval_run_not_found")
		requireError(t, x.do(t, "GET", "/api/v1/evals/runs/"+runID+"/results", nil), 404, "eval_run_not_found")
		requireError(t, x.do(t, "POST", "/api/v1/evals/runs/"+runID+"/cancel", nil), 404, "eval_run_not_found")
		requireError(t, x.do(t, "GET", "/api/v1/evals/runs/"+runID+"/events", nil), 404, "eval_run_not_found")
		requireError(t, x.do(t, "GET", "/api/v1/evals/runs/"+runID+"/compare?baseline="+runID, nil), 404, "eval_run_not_found")
	}
	mine := c.ok(t, 202, "POST", base+"/runs", nil)["id"].(string)
	requireError(t, other.do(t, "GET", "/api/v1/evals/runs/"+runID+"/compare?baseline="+mine, nil), 404, "eval_run_not_found")
	requireError(t, c.do(t, "GET", base+"/cases/not-a-uuid", nil), 404, "eval_case_not_found")
	requireError(t, c.do(t, "GET", "/api/v1/evals/runs/not-a-uuid", nil), 404, "eval_run_not_found")
	requireError(t, c.do(t, "GET", "/api/v1/evals/suites/not-a-uuid", nil), 404, "eval_suite_not_found")

	// The routes need the evals scope, and are mirrored on /api/v2.
	scoped := admin(t, ta.dbURL, "key", "create", "--user", tn.userID, "--org", tn.orgID, "--scopes", "chat")
	r := call(t, ta.Addr(), "GET", "/api/v1/evals/suites", scoped["access_token"].(string), nil)
	requireError(t, r, 403, "key_scope_forbidden")
	require.Equal(t, "evals", r.body["required_scope"])
	require.Equal(t, suite, c.ok(t, 200, "GET", "/api/v2/evals/suites/"+suite, nil)["id"])
	// A read-only key reads but starts nothing: a run spends money.
	ro := admin(t, ta.dbURL, "key", "create", "--user", tn.userID, "--org", tn.orgID, "--read-only")
	reader := evalClient{addr: ta.Addr(), key: ro["access_token"].(string)}
	require.Equal(t, suite, reader.ok(t, 200, "GET", base, nil)["id"])
	requireError(t, reader.do(t, "POST", base+"/runs", nil), 403, "key_read_only")
	requireError(t, reader.do(t, "POST", "/api/v1/evals/suites", map[string]any{"name": "ro"}), 403, "key_read_only")
	// Case CRUD.
	require.Equal(t, "ok", c.ok(t, 200, "GET", base+"/cases/"+caseID, nil)["assertions"].([]any)[0].(map[string]any)["value"])
	c.ok(t, 204, "DELETE", base+"/cases/"+caseID, nil)
	requireError(t, c.do(t, "GET", base+"/cases/"+caseID, nil), 404, "eval_case_not_found")
	require.EqualValues(t, 0, c.ok(t, 200, "GET", base, nil)["case_count"])
	// Runs keep their snapshot of a deleted case.
	require.Len(t, c.results(t, runID), 1)
}

// Import adds JSON Lines of cases atomically: one bad line refuses all,
// naming the line.
func TestEvalImport(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "import@example.com")
	c := evalClient{addr: ta.Addr(), key: tn.key}
	suite := c.suite(t, "Imported")
	path := "/api/v1/evals/suites/" + suite + "/cases:import"
	line := func(text string) string {
		return `{"messages":[{"role":"user","content":"` + text + `"}],"assertions":[{"type":"equals","value":"ok"}]}`
	}
	bad := line("a") + "\n" + line("b") + "\n" + `{"messages":[{"role":"user","content":"c"}],"assertions":[{"type":"regex","pattern":"("}]}` + "\n"
	r := c.do(t, "POST", path, bad)
	requireError(t, r, 400, "invalid_request", "line 3: assertions[0].pattern")
	require.EqualValues(t, 0, c.ok(t, 200, "GET", "/api/v1/evals/suites/"+suite, nil)["case_count"])

	var b strings.Builder
	for i := range 30 {
		b.WriteString(line(fmt.Sprintf("[[sim:reply=%s]]", map[bool]string{true: "ok", false: "no"}[i%3 != 0])))
		b.WriteString("\n\n")
	}
	out := c.ok(t, 201, "POST", path, b.String())
	require.EqualValues(t, 30, out["imported"])
	require.EqualValues(t, 30, c.ok(t, 200, "GET", "/api/v1/evals/suites/"+suite, nil)["case_count"])

	var many strings.Builder
	for range 1001 {
		many.WriteString(line("x") + "\n")
	}
	requireError(t, c.do(t, "POST", path, many.String()), 400, "invalid_request", "1000")

	// The cases list pages by keyset, oldest first.
	seen := map[string]bool{}
	cursor := ""
	for {
		page := c.ok(t, 200, "GET", "/api/v1/evals/suites/"+suite+"/cases?limit=7"+cursor, nil)
		for _, x := range page["data"].([]any) {
			id := x.(map[string]any)["id"].(string)
			require.False(t, seen[id])
			seen[id] = true
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = "&cursor=" + next
	}
	require.Len(t, seen, 30)

	run := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{"concurrency": 16})
	run = c.waitRun(t, run["id"].(string), 30*time.Second)
	require.EqualValues(t, 20, run["counts"].(map[string]any)["passed"])
	require.InDelta(t, 20.0/30, run["pass_rate"], 0.0001)
}

// picoOf reads a cost object's amount in picoUSD.
func picoOf(t *testing.T, v any) int64 {
	t.Helper()
	r, ok := new(big.Rat).SetString(fmt.Sprint(v.(map[string]any)["amount"]))
	require.True(t, ok, "%v", v)
	r.Mul(r, new(big.Rat).SetInt64(1e12))
	require.True(t, r.IsInt(), "%v", v)
	return r.Num().Int64()
}

// The run is made under the key that started it, looked up for every
// item: once the key is revoked the run ends failed with key_revoked.
func TestEvalRevokedKeyEndsTheRun(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.Eval.Workers = 1 })
	tn := newTenant(t, ta.dbURL, "revoked@example.com")
	c := evalClient{addr: ta.Addr(), key: tn.key}
	suite := c.suite(t, "Revoked")
	for range 5 {
		c.addCase(t, suite, "[[sim:ttft_ms=300]] [[sim:reply=ok]]", eq("ok"))
	}
	runID := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{"concurrency": 1})["id"].(string)
	require.Eventually(t, func() bool {
		return c.ok(t, 200, "GET", "/api/v1/evals/runs/"+runID, nil)["counts"].(map[string]any)["running"] == 1.0
	}, 5*time.Second, 10*time.Millisecond)
	admin(t, ta.dbURL, "key", "revoke", "--key-id", tn.keyID)

	// Another key of the same user and organization reads the same space.
	other := admin(t, ta.dbURL, "key", "create", "--user", tn.userID, "--org", tn.orgID)
	reader := evalClient{addr: ta.Addr(), key: other["access_token"].(string)}
	run := reader.waitRun(t, runID, 10*time.Second)
	require.Equal(t, "failed", run["status"])
	require.Equal(t, "key_revoked", run["reason"])
	counts := run["counts"].(map[string]any)
	require.EqualValues(t, 1, counts["errored"])
	require.Positive(t, counts["cancelled"])
	var codes []any
	for _, r := range reader.results(t, runID) {
		if r["status"] == "errored" {
			codes = append(codes, r["error_code"])
		}
	}
	require.Equal(t, []any{"unauthorized"}, codes)
}

// PostgreSQL holds no NUL in jsonb: a case's raw JSON fields carrying the
// escape \u0000 are refused naming the field, on create, patch and import,
// while an escaped backslash before "u0000" is plain text and kept.
func TestEvalCaseRefusesNUL(t *testing.T) {
	fx := newEvalFixture(t, "nul@example.com", "Nul")
	c, base, user, withAssertion := fx.c, fx.base, fx.user, fx.withAssertion
	tool := func(desc string) []any {
		return []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "description": desc,
			"parameters": map[string]any{"type": "object"}}}}
	}
	for _, tc := range []struct {
		name  string
		body  any
		field string
	}{
		{"message content", `{"messages":[{"role":"user","content":"h\u0000i"}]}`, "messages:"},
		{"tool description", map[string]any{"messages": user, "tools": tool("a\x00b")}, "tools:"},
		{"response_format", map[string]any{"messages": user, "response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "schema": map[string]any{"type": "object", "description": "a\x00b"}}}},
			"response_format:"},
		{"json_schema assertion", withAssertion(map[string]any{"type": "json_schema",
			"schema": map[string]any{"type": "object", "description": "a\x00b"}}), "assertions[0].schema:"},
		{"json_schema assertion key", `{"messages":[{"role":"user","content":"hi"}],"assertions":[{"type":"json_schema",` +
			`"schema":{"type":"object","properties":{"a\u0000":{"type":"string"}}}}]}`, "assertions[0].schema:"},
		{"tool_call arguments", withAssertion(map[string]any{"type": "tool_call", "name": "f",
			"arguments": map[string]any{"type": "object", "description": "a\x00b"}}), "assertions[0].arguments:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireError(t, c.do(t, "POST", base+"/cases", tc.body), 400, "invalid_request", tc.field, "NUL")
		})
	}
	requireError(t, c.do(t, "POST", base+"/cases:import",
		`{"messages":[{"role":"user","content":"ok"}]}`+"\n"+`{"messages":[{"role":"user","content":"h\u0000i"}]}`+"\n"),
		400, "invalid_request", "line 2: messages:", "NUL")
	require.EqualValues(t, 0, c.ok(t, 200, "GET", base, nil)["case_count"], "nothing stored")

	// An escaped backslash followed by u0000 is text, not NUL.
	created := c.ok(t, 201, "POST", base+"/cases", `{"messages":[{"role":"user","content":"h\\u0000i"}],`+
		`"tools":[{"type":"function","function":{"name":"f","description":"\\\\u0000\\u0000","parameters":{"type":"object"}}}]}`)
	require.Equal(t, `h\u0000i`, created["messages"].([]any)[0].(map[string]any)["content"])
	caseID := created["id"].(string)
	requireError(t, c.do(t, "PATCH", base+"/cases/"+caseID, map[string]any{"tools": tool("a\x00b")}),
		400, "invalid_request", "tools:", "NUL")
	requireError(t, c.do(t, "PATCH", base+"/cases/"+caseID, withAssertion(map[string]any{"type": "json_schema",
		"schema": map[string]any{"enum": []any{"\x00"}}})), 400, "invalid_request", "assertions[0].schema:", "NUL")
	require.Equal(t, `h\u0000i`, c.ok(t, 200, "GET", base+"/cases/"+caseID, nil)["messages"].([]any)[0].(map[string]any)["content"])

	// jsonb refuses a half surrogate, and writes numbers out in full: both
	// are refused before the database, as NUL is.
	for _, tc := range []struct{ body, field, why string }{
		{`{"messages":[{"role":"user","content":"h\ud800i"}]}`, "messages:", "surrogate"},
		{`{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":` +
			`{"name":"x","schema":{"type":"number","maximum":1e200000}}}}`, "response_format:", "1e308"},
		{`{"messages":[{"role":"user","content":"hi"}],"assertions":[{"type":"json_schema",` +
			`"schema":{"type":"number","minimum":1e131071}}]}`, "assertions[0].schema:", "1e308"},
	} {
		requireError(t, c.do(t, "POST", base+"/cases", tc.body), 400, "invalid_request", tc.field, tc.why)
	}
	created = c.ok(t, 201, "POST", base+"/cases", `{"messages":[{"role":"user","content":"\ud83d\ude00"}],`+
		`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"number","maximum":1e300}}}}`)
	require.Equal(t, "\U0001F600", created["messages"].([]any)[0].(map[string]any)["content"], "a pair is one character")
}

// Eval timestamps are RFC 3339 UTC to the second, like every timestamp of
// the API (docs/ledger.md).
func TestEvalTimestampsToTheSecond(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "seconds@example.com")
	c := evalClient{addr: ta.Addr(), key: tn.key}
	suiteID := c.suite(t, "Seconds")
	base := "/api/v1/evals/suites/" + suiteID
	c.addCase(t, suiteID, "[[sim:reply=ok]]", eq("ok"))
	runID := c.ok(t, 202, "POST", base+"/runs", nil)["id"].(string)
	run := c.waitRun(t, runID, 10*time.Second)
	second := func(v any) {
		t.Helper()
		s, ok := v.(string)
		require.True(t, ok, "%v", v)
		at, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		require.Equal(t, at.UTC().Format(time.RFC3339), s, "UTC, whole seconds")
	}
	suite := c.ok(t, 200, "GET", base, nil)
	second(suite["created_at"])
	second(suite["updated_at"])
	cs := c.ok(t, 200, "GET", base+"/cases", nil)["data"].([]any)[0].(map[string]any)
	second(cs["created_at"])
	second(cs["updated_at"])
	second(run["created_at"])
	second(run["started_at"])
	second(run["finished_at"])
	second(c.results(t, runID)[0]["finished_at"])
}

// A case may attach files as a chat request does: under the
// 2026-10-05 pin, which its writer must send as the chat route demands,
// and the run then reads the files into the turn.
func TestEvalCaseAttachesFiles(t *testing.T) {
	ta := startTestApp(t)
	ada := convTenant(t, ta, "evalfiles@example.com")
	c := evalClient{addr: ta.Addr(), key: ada.key}
	file := ada.uploadText(t, "brief.txt", strings.Repeat("attached words ", 400))
	suite := c.suite(t, "With files")
	msg := func(text string, files ...string) map[string]any {
		m := map[string]any{"role": "user", "content": text}
		if files != nil {
			m["file_ids"] = files
		}
		return map[string]any{"messages": []any{m}, "assertions": []any{eq("ok")}}
	}
	path := "/api/v1/evals/suites/" + suite + "/cases"
	requireError(t, call(t, ta.Addr(), "POST", path, ada.key, msg("[[sim:reply=ok]]", file)), 400, "invalid_request")
	r := call(t, ta.Addr(), "POST", path, ada.key, msg("[[sim:reply=ok]]", file), "Gateway-Version", "2026-10-05")
	require.Equal(t, 201, r.status, "%s", r.raw)
	c.ok(t, 201, "POST", path, msg("[[sim:reply=ok]]"))

	run := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{})
	run = c.waitRun(t, run["id"].(string), 30*time.Second)
	require.Equal(t, "completed", run["status"], "%v", run)
	require.EqualValues(t, 2, run["counts"].(map[string]any)["passed"], "%v", run)
	results := c.results(t, run["id"].(string))
	require.Len(t, results, 2)
	with, without := results[0]["input_tokens"].(float64), results[1]["input_tokens"].(float64)
	require.Greater(t, with, without+400, "the file's words are the first case's input")
}

// A run's cost is whole from the moment it ends: its end event carries the
// sum of its ledger rows, judges included, though the ledger writes its
// batches only every few seconds here.
func TestEvalRunCostIsWholeWhenItEnds(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.Ledger.FlushInterval = 5 * time.Second })
	tn := newTenant(t, ta.dbURL, "evalcost@example.com")
	c := evalClient{addr: ta.Addr(), key: tn.key}
	suite := c.suite(t, "Costed")
	c.addCase(t, suite, "[[sim:reply=Sorry]]", map[string]any{"type": "judge",
		"rubric": `Apologises. [[sim:reply={"pass":true,"reason":"yes"}]]`})
	runID := c.ok(t, 202, "POST", "/api/v1/evals/suites/"+suite+"/runs", map[string]any{})["id"].(string)

	ended := c.do(t, "GET", "/api/v1/evals/runs/"+runID+"/events", nil)
	require.Equal(t, 200, ended.status)
	_, end, ok := strings.Cut(string(ended.raw), "event: end\ndata: ")
	require.True(t, ok, "%s", ended.raw)
	var run map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(end)), &run))
	require.Equal(t, "completed", run["status"])
	cost, _ := runLedger(t, ta.dbURL, runID)
	require.Positive(t, cost)
	require.Equal(t, cost, picoOf(t, run["cost"]), "the end event's cost is the ledger's")
}

package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/hotpath/meter/metertest"
	"github.com/edgegw/gateway/proxy"
)

// ledgerRow reads the request's row once the ledger has written it.
func ledgerRow(t *testing.T, ta *testApp, requestID string) (route, tier string, in, out, cost int64, billed bool, status int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, ta.ledger.Flush(ctx))
	var tierp *string
	require.NoError(t, ta.db.Pool.QueryRow(ctx, `select route, tier, input_tokens, output_tokens, cost_pico, billed, status
from request_log where request_id = $1`, requestID).Scan(&route, &tierp, &in, &out, &cost, &billed, &status))
	if tierp != nil {
		tier = *tierp
	}
	return
}

func TestEmbeddingsRoute(t *testing.T) {
	ta := startTestApp(t)
	ten := newTenant(t, ta.dbURL, "embed@example.com")
	for _, path := range []string{"/api/v1/embeddings", "/api/v2/embeddings"} {
		r := ta.call(t, "POST", path, ten.key, map[string]any{"model": "gw-embed", "input": []any{"first text", "second, longer text", "first text"}})
		require.Equal(t, 200, r.status, "%s", r.raw)
		require.Equal(t, "list", r.body["object"])
		require.Equal(t, "gw-embed", r.body["model"])
		data := r.body["data"].([]any)
		require.Len(t, data, 3)
		for i, d := range data {
			e := d.(map[string]any)
			require.Equal(t, "embedding", e["object"])
			require.EqualValues(t, i, e["index"], "in input order")
			require.NotEmpty(t, e["embedding"].([]any))
		}
		require.Equal(t, data[0].(map[string]any)["embedding"], data[2].(map[string]any)["embedding"], "same input, same vector")
		require.NotEqual(t, data[0].(map[string]any)["embedding"], data[1].(map[string]any)["embedding"])
		usage := r.body["usage"].(map[string]any)
		require.Greater(t, usage["prompt_tokens"], float64(0))
		require.Equal(t, usage["prompt_tokens"], usage["total_tokens"])
		gw := r.body["gw"].(map[string]any)
		require.Equal(t, r.header.Get("X-Request-Id"), gw["request_id"])
		cost := gw["cost"].(map[string]any)
		require.Equal(t, "USD", cost["currency"])
		require.Equal(t, "gw-embed", cost["tier"])
		tokens := int64(usage["prompt_tokens"].(float64))
		require.InDelta(t, float64(tokens)*0.02/1e6, cost["amount"].(float64), 1e-15)
		require.NotEmpty(t, r.header.Get("X-RateLimit-Limit"))

		route, tier, in, out, pico, billed, status := ledgerRow(t, ta, gw["request_id"].(string))
		require.Equal(t, "embeddings", route)
		require.Equal(t, "gw-embed", tier)
		require.Equal(t, tokens, in)
		require.Zero(t, out)
		require.Equal(t, meter.Cost(&proxyTierPrices(t, "gw-embed").Prices, tokens, 0, 0), pico)
		require.True(t, billed)
		require.Equal(t, 200, status)
	}

	// A single string, and base64 as the OpenAI SDKs ask for it.
	r := ta.call(t, "POST", "/api/v1/embeddings", ten.key, map[string]any{"model": "gw-embed", "input": "one", "encoding_format": "base64"})
	require.Equal(t, 200, r.status, "%s", r.raw)
	b64 := r.body["data"].([]any)[0].(map[string]any)["embedding"].(string)
	raw, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	require.Zero(t, len(raw)%4, "little-endian float32s")

	r = ta.call(t, "POST", "/api/v1/embeddings", ten.key, map[string]any{"model": "gw-embed", "input": "one", "encoding_format": "int8"})
	require.Equal(t, 400, r.status)
	r = ta.call(t, "POST", "/api/v1/embeddings", ten.key, map[string]any{"model": "gw-embed", "input": []any{"ok", ""}})
	require.Equal(t, 400, r.status)
	require.Contains(t, r.body["error"], "input[1]")
}

// aux.embed_max_dimensions bounds dimensions before the upstream call.
func TestEmbeddingsMaxDimensionsConfig(t *testing.T) {
	cfg := writeConfig(t, "aux:\n  embed_max_dimensions: 16\n")
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = cfg })
	ten := newTenant(t, ta.dbURL, "dims@example.com")
	r := ta.call(t, "POST", "/api/v1/embeddings", ten.key, map[string]any{"model": "gw-embed", "input": "one", "dimensions": 17})
	require.Equal(t, 400, r.status, "%s", r.raw)
	require.Equal(t, "invalid_request", r.body["code"])
	require.Equal(t, "dimensions: must be from 1 to 16.", r.body["error"])
	r = ta.call(t, "POST", "/api/v1/embeddings", ten.key, map[string]any{"model": "gw-embed", "input": "one", "dimensions": 16})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Len(t, r.body["data"].([]any)[0].(map[string]any)["embedding"], 16)
}

// proxyTierPrices returns the default auxiliary tier by name.
func proxyTierPrices(t *testing.T, name string) *struct{ Prices hotpath.Prices } {
	t.Helper()
	st, err := loadSettings("")
	require.NoError(t, err)
	for _, tier := range st.AuxTiers {
		if tier.Name == name {
			return &struct{ Prices hotpath.Prices }{tier.Prices}
		}
	}
	t.Fatalf("no tier %s", name)
	return nil
}

func TestRerankRoute(t *testing.T) {
	for _, shape := range []string{"cohere", "tei"} {
		t.Run(shape, func(t *testing.T) {
			cfg := writeConfig(t, "aux:\n  rerank_shape: "+shape+"\n")
			ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = cfg })
			ten := newTenant(t, ta.dbURL, "rerank@example.com")
			docs := []any{"dogs bark loudly", "a cat sleeps", "cats and a cat toy", "nothing here", "the cat"}
			r := ta.call(t, "POST", "/api/v1/rerank", ten.key, map[string]any{"model": "gw-rerank", "query": "cat", "documents": docs})
			require.Equal(t, 200, r.status, "%s", r.raw)
			require.Equal(t, "gw-rerank", r.body["model"])
			res := r.body["results"].([]any)
			require.Len(t, res, len(docs))
			seen := map[float64]bool{}
			for i, x := range res {
				m := x.(map[string]any)
				seen[m["index"].(float64)] = true
				if i > 0 {
					prev := res[i-1].(map[string]any)
					require.GreaterOrEqual(t, prev["relevance_score"], m["relevance_score"], "sorted by score descending")
				}
			}
			require.Len(t, seen, len(docs), "every document once")
			require.Greater(t, r.body["usage"].(map[string]any)["total_tokens"], float64(0))
			require.Equal(t, r.header.Get("X-Request-Id"), r.body["gw"].(map[string]any)["request_id"])

			// Ties fall by index, and top_n cuts after the sort.
			r = ta.call(t, "POST", "/api/v2/rerank", ten.key, map[string]any{"model": "gw-rerank", "query": "cat [[sim:tie]]", "documents": docs, "top_n": 3})
			require.Equal(t, 200, r.status, "%s", r.raw)
			res = r.body["results"].([]any)
			require.Len(t, res, 3)
			for i, x := range res {
				require.EqualValues(t, i, x.(map[string]any)["index"])
				require.EqualValues(t, 0.5, x.(map[string]any)["relevance_score"])
			}

			for _, n := range []any{0, len(docs) + 1, -1, 1.5, "2"} {
				r = ta.call(t, "POST", "/api/v1/rerank", ten.key, map[string]any{"model": "gw-rerank", "query": "cat", "documents": docs, "top_n": n})
				require.Equal(t, 400, r.status, "top_n %v", n)
				require.Equal(t, "invalid_request", r.body["code"])
			}
			r = ta.call(t, "POST", "/api/v1/rerank", ten.key, map[string]any{"model": "gw-rerank", "query": "cat", "documents": docs, "top_n": len(docs)})
			require.Equal(t, 200, r.status)
			for name, body := range map[string]map[string]any{
				"no query":         {"model": "gw-rerank", "documents": docs},
				"empty query":      {"model": "gw-rerank", "query": "", "documents": docs},
				"no documents":     {"model": "gw-rerank", "query": "cat"},
				"empty documents":  {"model": "gw-rerank", "query": "cat", "documents": []any{}},
				"object documents": {"model": "gw-rerank", "query": "cat", "documents": []any{map[string]any{"text": "x"}}},
			} {
				r = ta.call(t, "POST", "/api/v1/rerank", ten.key, body)
				require.Equal(t, 400, r.status, name)
			}
		})
	}
}

// TestModerationCodeByCode makes the guard flag each hazard code in turn
// and checks the result against the documented table.
func TestModerationCodeByCode(t *testing.T) {
	ta := startTestApp(t)
	ten := newTenant(t, ta.dbURL, "guard@example.com")
	want := map[string][]string{
		"S1": {"violence"}, "S2": {}, "S3": {"sexual"}, "S4": {"sexual", "sexual/minors"}, "S5": {"harassment"},
		"S6": {}, "S7": {}, "S8": {}, "S9": {"violence"}, "S10": {"hate"}, "S11": {"self-harm"}, "S12": {"sexual"},
		"S13": {}, "S14": {},
	}
	require.Len(t, want, len(proxy.HazardCategories))
	for code, cats := range want {
		t.Run(code, func(t *testing.T) {
			r := ta.call(t, "POST", "/api/v1/moderations", ten.key, map[string]any{"model": "gw-guard",
				"input": "an ordinary sentence [[sim:unsafe=" + code + "]]"})
			require.Equal(t, 200, r.status, "%s", r.raw)
			res := r.body["results"].([]any)[0].(map[string]any)
			require.Equal(t, true, res["flagged"])
			requireCategories(t, res, cats)
			require.Equal(t, map[string]any{"hazard_codes": []any{code}}, res["gw"])
		})
	}
}

func requireCategories(t *testing.T, res map[string]any, set []string) {
	t.Helper()
	categories := res["categories"].(map[string]any)
	scores := res["category_scores"].(map[string]any)
	require.Len(t, categories, len(proxy.ModerationCategories))
	require.Len(t, scores, len(proxy.ModerationCategories))
	for _, name := range proxy.ModerationCategories {
		on := false
		for _, s := range set {
			on = on || s == name
		}
		require.Equal(t, on, categories[name], name)
		score := 0.0
		if on {
			score = 1.0
		}
		require.Equal(t, score, scores[name], name)
	}
}

func TestModerationRoute(t *testing.T) {
	ta := startTestApp(t)
	ten := newTenant(t, ta.dbURL, "mod@example.com")
	r := ta.call(t, "POST", "/api/v2/moderations", ten.key, map[string]any{"model": "gw-guard",
		"input": []any{"have a nice day", "I will murder and steal [[sim:unsafe=S10]]", "[[sim:unsafe]]"}})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, "modr-"+r.header.Get("X-Request-Id"), r.body["id"])
	require.Equal(t, "gw-guard", r.body["model"])
	require.NotContains(t, r.body, "usage")
	require.NotContains(t, r.body, "gw")
	res := r.body["results"].([]any)
	require.Len(t, res, 3)
	safe := res[0].(map[string]any)
	require.Equal(t, false, safe["flagged"])
	require.NotContains(t, safe, "gw", "absent gw means not flagged")
	requireCategories(t, safe, nil)
	many := res[1].(map[string]any)
	require.Equal(t, []any{"S1", "S2", "S10"}, many["gw"].(map[string]any)["hazard_codes"])
	requireCategories(t, many, []string{"violence", "hate"})
	bare := res[2].(map[string]any)
	require.Equal(t, true, bare["flagged"])
	require.Equal(t, []any{}, bare["gw"].(map[string]any)["hazard_codes"], "flagged with no code: empty, never null")
	requireCategories(t, bare, nil)
	require.Contains(t, string(r.raw), `"hazard_codes":[]`)

	route, tier, in, out, pico, billed, _ := ledgerRow(t, ta, r.header.Get("X-Request-Id"))
	require.Equal(t, "moderations", route)
	require.Equal(t, "gw-guard", tier)
	require.Positive(t, in)
	require.Positive(t, out)
	require.Positive(t, pico)
	require.True(t, billed)

	// A reply that is not a verdict is retried, then answered as an
	// upstream failure: never a guess.
	r = ta.call(t, "POST", "/api/v1/moderations", ten.key, map[string]any{"model": "gw-guard", "input": []any{"fine", "[[sim:garbled]]"}})
	require.Equal(t, 503, r.status, "%s", r.raw)
	require.Equal(t, "upstream_overloaded", r.body["code"])
	require.NotEmpty(t, r.header.Get("Retry-After"))
	_, _, _, _, _, billed, status := ledgerRow(t, ta, r.header.Get("X-Request-Id"))
	require.False(t, billed)
	require.Equal(t, 503, status)
	require.NotContains(t, ta.logs.String(), "cannot classify", "the guard's text is never logged")
}

// TestModerationExemptFromPools spends a subscription's token pools:
// embeddings is refused budget_exhausted, moderation still answers; a
// spend cap still applies to moderation.
func TestModerationExemptFromPools(t *testing.T) {
	plans := writePlans(t, "plans:\n  default:\n    pool_monthly_tokens: 1000000\n")
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = plans })
	org := admin(t, ta.dbURL, "org", "create", "--name", "Sub")
	user := admin(t, ta.dbURL, "user", "create", "--email", "sub@example.com", "--org", org["id"].(string))
	key := admin(t, ta.dbURL, "key", "create", "--user", user["id"].(string), "--org", org["id"].(string), "--kind", "signed_in")
	token := key["access_token"].(string)
	var res meter.Reservation
	refused, err := metertest.Reserve(context.Background(), ta.limits.Counters(), time.Now(),
		[]meter.Budget{{Kind: meter.BudgetPoolMonthly, Subject: org["id"].(string), Cap: 1_000_000}}, []int64{1_000_000}, &res)
	require.NoError(t, err)
	require.Equal(t, -1, refused)

	r := ta.call(t, "POST", "/api/v1/embeddings", token, map[string]any{"model": "gw-embed", "input": "hello"})
	require.Equal(t, 429, r.status, "%s", r.raw)
	require.Equal(t, "budget_exhausted", r.body["code"])
	r = ta.call(t, "POST", "/api/v1/rerank", token, map[string]any{"model": "gw-rerank", "query": "a", "documents": []any{"a"}})
	require.Equal(t, 429, r.status, "%s", r.raw)
	r = ta.call(t, "POST", "/api/v1/moderations", token, map[string]any{"model": "gw-guard", "input": "hello"})
	require.Equal(t, 200, r.status, "moderation is exempt from the pools: %s", r.raw)

	capped := newTenant(t, ta.dbURL, "capped@example.com", "--spend-cap-usd", "0.000001")
	r = ta.call(t, "POST", "/api/v1/moderations", capped.key, map[string]any{"model": "gw-guard", "input": strings.Repeat("word ", 200)})
	require.Equal(t, 429, r.status, "%s", r.raw)
	require.Equal(t, "key_spend_cap_exceeded", r.body["code"])
}

// TestAuxCommonRules checks the rules the three routes share.
func TestAuxCommonRules(t *testing.T) {
	ta := startTestApp(t)
	ten := newTenant(t, ta.dbURL, "common@example.com")
	readOnly := newTenant(t, ta.dbURL, "ro@example.com", "--read-only")
	chatOnly := newTenant(t, ta.dbURL, "chatonly@example.com", "--scopes", "chat")
	many := make([]any, 513)
	for i := range many {
		many[i] = "x"
	}
	routes := []struct {
		path, model, scope string
		body               func(inputs []any) map[string]any
	}{
		{"/api/v1/embeddings", "gw-embed", "embeddings", func(in []any) map[string]any { return map[string]any{"model": "gw-embed", "input": in} }},
		{"/api/v1/rerank", "gw-rerank", "rerank", func(in []any) map[string]any {
			return map[string]any{"model": "gw-rerank", "query": "q", "documents": in}
		}},
		{"/api/v1/moderations", "gw-guard", "moderation", func(in []any) map[string]any { return map[string]any{"model": "gw-guard", "input": in} }},
	}
	for _, rt := range routes {
		t.Run(rt.scope, func(t *testing.T) {
			r := ta.call(t, "POST", rt.path, ten.key, rt.body(many))
			require.Equal(t, 400, r.status, "%s", r.raw)
			require.Equal(t, "invalid_request", r.body["code"])
			require.Equal(t, "inputs", r.body["bound"])
			require.Contains(t, r.body["error"], "512")
			require.NotEmpty(t, r.header.Get("X-RateLimit-Limit"), "a metered route's refusal shows the window")

			r = ta.call(t, "POST", rt.path, ten.key, rt.body([]any{strings.Repeat("long text ", 7000)}))
			require.Equal(t, 400, r.status)
			require.Equal(t, "body_bytes", r.body["bound"])
			require.Contains(t, r.body["error"], "65536")

			body := rt.body([]any{"x"})
			for _, m := range []string{"kavi", "gw-embed", "gw-rerank", "gw-guard", ""} {
				if m == rt.model {
					continue
				}
				body["model"] = m
				r = ta.call(t, "POST", rt.path, ten.key, body)
				require.Equal(t, 400, r.status, m)
				require.Contains(t, r.body["error"], rt.model, "names the expected model")
			}
			body["model"] = rt.model

			r = ta.call(t, "POST", rt.path, readOnly.key, body)
			require.Equal(t, 403, r.status)
			require.Equal(t, "key_read_only", r.body["code"])
			r = ta.call(t, "POST", rt.path, chatOnly.key, body)
			require.Equal(t, 403, r.status)
			require.Equal(t, rt.scope, r.body["required_scope"])

			// Upstream failures: retried before the answer, then 503.
			fail := rt.body([]any{"[[sim:fail_first=1]] x"})
			if rt.scope == "rerank" {
				fail = map[string]any{"model": rt.model, "query": "q [[sim:fail_first=1]]", "documents": []any{"x"}}
			}
			r = ta.call(t, "POST", rt.path, ten.key, fail)
			require.Equal(t, 200, r.status, "one failed attempt is retried: %s", r.raw)
			down := rt.body([]any{"[[sim:status=500]] x"})
			if rt.scope == "rerank" {
				down = map[string]any{"model": rt.model, "query": "q [[sim:status=500]]", "documents": []any{"x"}}
			}
			r = ta.call(t, "POST", rt.path, ten.key, down)
			require.Equal(t, 503, r.status)
			require.Equal(t, "upstream_overloaded", r.body["code"])
			_, tier, _, _, _, billed, _ := ledgerRow(t, ta, r.header.Get("X-Request-Id"))
			require.Equal(t, rt.model, tier)
			require.False(t, billed, "a failure is not billed")
		})
	}
}

// TestOpenAISDKEmbeddingsAndModerations drives /v1/embeddings and
// /v1/moderations with the OpenAI Go SDK, unmodified.
func TestOpenAISDKEmbeddingsAndModerations(t *testing.T) {
	ta := startTestApp(t)
	ten := newTenant(t, ta.dbURL, "sdk@example.com")
	client := openai.NewClient(option.WithBaseURL("http://"+ta.Addr()+"/v1/"), option.WithAPIKey(ten.key), option.WithMaxRetries(0))
	ctx := context.Background()

	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "gw-embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"alpha", "beta"}}})
	require.NoError(t, err)
	require.Len(t, emb.Data, 2)
	require.EqualValues(t, 1, emb.Data[1].Index)
	require.NotEmpty(t, emb.Data[0].Embedding)
	norm := 0.0
	for _, v := range emb.Data[0].Embedding {
		norm += v * v
	}
	require.InDelta(t, 1, math.Sqrt(norm), 1e-3, "a unit vector")
	require.Positive(t, emb.Usage.PromptTokens)
	require.NotContains(t, emb.RawJSON(), `"gw"`, "no gw block on the OpenAI route")

	b64, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "gw-embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("alpha")}, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64})
	require.NoError(t, err)
	require.NotEmpty(t, b64.Data)

	mod, err := client.Moderations.New(ctx, openai.ModerationNewParams{Model: "gw-guard",
		Input: openai.ModerationNewParamsInputUnion{OfStringArray: []string{"hello", "how to build a bomb"}}})
	require.NoError(t, err)
	require.Len(t, mod.Results, 2)
	require.False(t, mod.Results[0].Flagged)
	require.True(t, mod.Results[1].Flagged)
	require.True(t, mod.Results[1].Categories.Violence)
	require.Equal(t, 1.0, mod.Results[1].CategoryScores.Violence)
	require.NotContains(t, mod.RawJSON(), `"gw"`)
	require.True(t, strings.HasPrefix(mod.ID, "modr-"))

	_, err = client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "kavi",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("alpha")}})
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 400, apiErr.StatusCode)
	require.Equal(t, "invalid_request", apiErr.Code)
	require.Contains(t, apiErr.Message, "gw-embed")
	require.Contains(t, fmt.Sprint(string(apiErr.RawJSON())), `"type":"invalid_request_error"`)
}

// TestChatModerationGate gates mira (violence, hate; fail closed) and
// vaani (sexual; fail open) and leaves kavi ungated.
func TestChatModerationGate(t *testing.T) {
	cfg := writeConfig(t, `tiers:
  mira:
    moderation_gate: {categories: [violence, hate]}
  vaani:
    moderation_gate: {categories: [sexual], on_guard_failure: open}
`)
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = cfg })
	ten := newTenant(t, ta.dbURL, "gate@example.com")
	chat := func(path, model string, texts ...string) resp {
		var msgs []any
		for i, text := range texts {
			if i > 0 {
				msgs = append(msgs, map[string]any{"role": "assistant", "content": "ok"})
			}
			msgs = append(msgs, map[string]any{"role": "user", "content": text})
		}
		return ta.call(t, "POST", path, ten.key, map[string]any{"model": model, "max_tokens": 8, "messages": msgs})
	}

	r := chat("/api/v1/chat", "mira", "a quiet walk in the park")
	require.Equal(t, 200, r.status, "%s", r.raw)

	r = chat("/api/v1/chat", "mira", "I will murder the witness")
	require.Equal(t, 400, r.status, "%s", r.raw)
	require.Equal(t, "moderation_rejected", r.body["code"])
	require.Equal(t, []any{"violence"}, r.body["categories"])
	require.Contains(t, r.body["error"], "violence")
	require.NotContains(t, string(r.raw), "murder", "never the text")
	require.NotContains(t, ta.logs.String(), "witness")
	_, tier, in, out, pico, billed, status := ledgerRow(t, ta, r.header.Get("X-Request-Id"))
	require.Equal(t, "mira", tier)
	require.False(t, billed, "not billed")
	require.Zero(t, in+out+pico)
	require.Equal(t, 400, status)

	// Earlier user turns are checked too; both blocked categories named.
	r = chat("/api/v2/chat", "mira", "a [[sim:unsafe=S10]] remark", "now something harmless")
	require.Equal(t, 400, r.status, "%s", r.raw)
	require.Equal(t, []any{"hate"}, r.body["categories"])

	// Flagged, but in no category this tier blocks: served.
	r = chat("/api/v1/chat", "mira", "where does [[sim:unsafe=S7]] she live")
	require.Equal(t, 200, r.status, "%s", r.raw)
	r = chat("/api/v1/chat", "vaani", "I will murder the witness")
	require.Equal(t, 200, r.status, "vaani blocks sexual content only: %s", r.raw)
	r = chat("/api/v1/chat", "kavi", "I will murder the witness")
	require.Equal(t, 200, r.status, "kavi is not gated: %s", r.raw)

	// The OpenAI route answers in its envelope.
	r = chat("/v1/chat/completions", "mira", "how to build a bomb")
	require.Equal(t, 400, r.status)
	require.Equal(t, "moderation_rejected", r.body["error"].(map[string]any)["code"])

	// A guard that cannot answer: mira fails closed with the guard's 503,
	// vaani fails open, counted and logged.
	r = chat("/api/v1/chat", "mira", "hello [[sim:garbled]]")
	require.Equal(t, 503, r.status, "%s", r.raw)
	require.Equal(t, "upstream_overloaded", r.body["code"])
	r = chat("/api/v1/chat", "vaani", "hello [[sim:garbled]]")
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Contains(t, ta.logs.String(), "moderation gate failed open")
}

func TestModerationGateConfigErrors(t *testing.T) {
	for name, body := range map[string]string{
		"unknown category": "tiers:\n  mira:\n    moderation_gate: {categories: [violent]}\n",
		"no category":      "tiers:\n  mira:\n    moderation_gate: {categories: []}\n",
		"bad policy":       "tiers:\n  mira:\n    moderation_gate: {categories: [hate], on_guard_failure: maybe}\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadSettings(writeConfig(t, body))
			require.ErrorContains(t, err, "tiers.mira.moderation_gate")
		})
	}
}

// TestAuxDeadlineAndBreaker: a hung upstream is cut at the tier's deadline
// (504, not retried, not billed), and repeated failures open the tier's
// breaker, which then refuses at once with model_unavailable.
func TestAuxDeadlineAndBreaker(t *testing.T) {
	cfg := writeConfig(t, "aux_tiers:\n  gw-embed: {deadline: 300ms, retries: 0}\n")
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = cfg })
	ten := newTenant(t, ta.dbURL, "deadline@example.com")
	began := time.Now()
	r := ta.call(t, "POST", "/api/v1/embeddings", ten.key, map[string]any{"model": "gw-embed", "input": "x [[sim:fault=hang]]"})
	require.Equal(t, 504, r.status, "%s", r.raw)
	require.Equal(t, "upstream_timeout", r.body["code"])
	require.Less(t, time.Since(began), 3*time.Second)
	_, _, _, _, _, billed, _ := ledgerRow(t, ta, r.header.Get("X-Request-Id"))
	require.False(t, billed)

	var last resp
	for i := range 30 {
		last = ta.call(t, "POST", "/api/v1/embeddings", ten.key, map[string]any{"model": "gw-embed", "input": fmt.Sprintf("x%d [[sim:status=500]]", i)})
		if last.body["code"] == "model_unavailable" {
			break
		}
	}
	require.Equal(t, "model_unavailable", last.body["code"], "the breaker opened: %s", last.raw)
	require.NotEmpty(t, last.header.Get("Retry-After"))
	r = ta.call(t, "POST", "/api/v1/embeddings", ten.key, map[string]any{"model": "gw-embed", "input": "healthy"})
	require.Equal(t, 503, r.status, "refused at once while the tier cools down")
	require.Equal(t, 200, ta.call(t, "POST", "/api/v1/rerank", ten.key, map[string]any{"model": "gw-rerank", "query": "a", "documents": []any{"a"}}).status,
		"each tier has its own breaker")
}

// Memory asks the embed tier for its vectors, so it may not ask for longer
// ones than the tier makes.
func TestMemoryEmbedDimensionsWithinTheEmbedBound(t *testing.T) {
	_, err := loadSettings(writeConfig(t, "memory:\n  embed_dimensions: 8192\n"))
	require.ErrorContains(t, err, "memory.embed_dimensions: 8192 is more than aux.embed_max_dimensions (4096)")
	_, err = loadSettings(writeConfig(t, "aux:\n  embed_max_dimensions: 256\nmemory:\n  embed_dimensions: 512\n"))
	require.ErrorContains(t, err, "aux.embed_max_dimensions (256)")
	_, err = loadSettings(writeConfig(t, "aux:\n  embed_max_dimensions: 8192\nmemory:\n  embed_dimensions: 8192\n"))
	require.NoError(t, err)
}

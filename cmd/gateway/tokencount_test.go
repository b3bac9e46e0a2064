package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// genConversation makes a valid chat request body from r: optional system
// and named messages, string and multi-part content, assistant tool calls
// with their results, and declared tools.
func genConversation(r *rand.Rand, model string) map[string]any {
	words := []string{"hello", "world", "naïve", "café", "1234", "x=y+2;", "日本語", "emoji 🚀", "  spaced  ", "line\nbreak",
		"JSON {\"a\":1}", "tab\there", "quote\"d", "<|im_start|>", "über", "ok."}
	text := func() string {
		n := 1 + r.IntN(12)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = words[r.IntN(len(words))]
		}
		return strings.Join(parts, " ")
	}
	content := func() any {
		if r.IntN(3) == 0 {
			parts := []any{}
			for range 1 + r.IntN(3) {
				parts = append(parts, map[string]any{"type": "text", "text": text()})
			}
			return parts
		}
		return text()
	}
	var tools []any
	var names []string
	for i := range r.IntN(3) {
		name := fmt.Sprintf("tool_%d", i)
		names = append(names, name)
		tool := map[string]any{"name": name, "parameters": map[string]any{"type": "object",
			"properties": map[string]any{"q": map[string]any{"type": "string", "description": text()}}, "required": []any{"q"}}}
		if r.IntN(2) == 0 {
			tool["description"] = text()
		}
		tools = append(tools, map[string]any{"type": "function", "function": tool})
	}
	var msgs []any
	if r.IntN(2) == 0 {
		msgs = append(msgs, map[string]any{"role": "system", "content": text()})
	}
	turns := 1 + r.IntN(4)
	for i := range turns {
		user := map[string]any{"role": "user", "content": content()}
		if r.IntN(4) == 0 {
			user["name"] = "ada"
		}
		msgs = append(msgs, user)
		if i == turns-1 {
			break
		}
		if len(names) > 0 && r.IntN(2) == 0 {
			var calls []any
			for j := range 1 + r.IntN(2) {
				calls = append(calls, map[string]any{"id": fmt.Sprintf("c%d_%d", i, j), "type": "function",
					"function": map[string]any{"name": names[r.IntN(len(names))], "arguments": `{"q":"` + words[r.IntN(4)] + `"}`}})
			}
			asst := map[string]any{"role": "assistant", "tool_calls": calls}
			if r.IntN(2) == 0 {
				asst["content"] = text()
			}
			msgs = append(msgs, asst)
			for _, c := range calls {
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": c.(map[string]any)["id"], "content": text()})
			}
			continue
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": text()})
	}
	body := map[string]any{"model": model, "messages": msgs, "max_tokens": 8}
	if len(tools) > 0 {
		body["tools"] = tools
		body["tool_choice"] = "none"
	}
	return body
}

// TestTokenCountEqualsChatBilling is the property the route exists for: on
// the simulator, the count equals the input_tokens /api/v1/chat bills for
// the same body, on every tier, with a tier's injected system prompt.
func TestTokenCountEqualsChatBilling(t *testing.T) {
	cfg := writeConfig(t, "tiers:\n  vaani:\n    system_prompt: \"You are Vaani, a careful assistant. Answer briefly.\"\n")
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath = cfg })
	ten := newTenant(t, ta.dbURL, "count@example.com")
	r := rand.New(rand.NewPCG(19, 2026))
	for i := range 60 {
		model := []string{"kavi", "vaani", "mira"}[i%3]
		body := genConversation(r, model)
		count := ta.call(t, "POST", "/api/v1/tokens/count", ten.key, body)
		require.Equal(t, 200, count.status, "%s", count.raw)
		chat := ta.call(t, "POST", "/api/v1/chat", ten.key, body)
		require.Equal(t, 200, chat.status, "%s", chat.raw)
		usage := chat.body["usage"].(map[string]any)
		require.Equal(t, usage["input_tokens"], count.body["input_tokens"], "case %d (%s): %v", i, model, body)
		require.Equal(t, model, count.body["model"])
	}
}

func TestTokenCountRules(t *testing.T) {
	ta := startTestApp(t)
	ten := newTenant(t, ta.dbURL, "rules@example.com")
	msgs := []any{map[string]any{"role": "user", "content": "hello there"}}

	for _, model := range []string{"auto", "gpt-4o", "sim-mira", ""} {
		r := ta.call(t, "POST", "/api/v1/tokens/count", ten.key, map[string]any{"model": model, "messages": msgs})
		require.Equal(t, 400, r.status, model)
		require.Equal(t, "invalid_request", r.body["code"], model)
	}

	// Rate headers from its own bucket, no ledger row, Idempotency-Key ignored.
	r := ta.call(t, "POST", "/api/v2/tokens/count", ten.key, map[string]any{"model": "mira", "messages": msgs}, "Idempotency-Key", "k1")
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.NotEmpty(t, r.header.Get("X-RateLimit-Limit"))
	require.Equal(t, "1200", r.header.Get("X-RateLimit-Limit"), "token_counts_per_minute of the default plan")
	require.NotEmpty(t, r.header.Get("X-RateLimit-Remaining"))
	require.NotEmpty(t, r.header.Get("Gateway-Version"))
	first := r.body["input_tokens"]
	r = ta.call(t, "POST", "/api/v1/tokens/count", ten.key, map[string]any{"model": "mira",
		"messages": append(msgs, map[string]any{"role": "user", "content": "more"})}, "Idempotency-Key", "k1")
	require.Equal(t, 200, r.status)
	require.NotEqual(t, first, r.body["input_tokens"], "a reused Idempotency-Key replays nothing")

	// file_ids are not counted and need no version pin here; tool_choice is not read.
	withFile := []any{map[string]any{"role": "user", "content": "hello there", "file_ids": []any{"file_1"}}}
	r = ta.call(t, "POST", "/api/v1/tokens/count", ten.key, map[string]any{"model": "mira", "messages": withFile,
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "missing"}}})
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Equal(t, first, r.body["input_tokens"])

	// Refusals: one unbroken run over 1024 bytes, or over 262144 bytes of text.
	r = ta.call(t, "POST", "/api/v1/tokens/count", ten.key, map[string]any{"model": "mira",
		"messages": []any{map[string]any{"role": "user", "content": strings.Repeat("a", 1024)}}})
	require.Equal(t, 200, r.status, "a run of exactly 1024 bytes is counted")
	for name, content := range map[string]string{
		"run":       "ok " + strings.Repeat("a", 1025),
		"utf-8 run": strings.Repeat("é", 513),
		"text":      strings.Repeat("word ", 262144/5+1),
	} {
		r = ta.call(t, "POST", "/api/v1/tokens/count", ten.key, map[string]any{"model": "mira",
			"messages": []any{map[string]any{"role": "user", "content": content}}})
		require.Equal(t, 400, r.status, name)
		require.Equal(t, "input_not_countable", r.body["code"], name)
		require.Nil(t, r.body["input_tokens"], "no count with a refusal")
	}
	r = ta.call(t, "POST", "/api/v1/tokens/count", ten.key, map[string]any{"model": "mira",
		"messages": []any{map[string]any{"role": "user", "content": strings.Repeat("ab1", 1000)}}})
	require.Equal(t, 200, r.status, "digits break a run")
	// The bound is the client's text: content parts are measured each on
	// its own (not with the line that joins them), a tool's schema as the
	// template renders it (compact).
	first, second := strings.Repeat("word ", 26214)+"abcd", strings.Repeat("word ", 26214) // 262144 bytes in all
	for _, extra := range []string{"", "x"} {
		r = ta.call(t, "POST", "/api/v1/tokens/count", ten.key, map[string]any{"model": "mira",
			"messages": []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": first}, map[string]any{"type": "text", "text": second + extra}}}}})
		if extra == "" {
			require.Equal(t, 200, r.status, "262144 bytes in two parts: %s", r.raw)
		} else {
			require.Equal(t, 400, r.status, "262145 bytes in two parts")
		}
	}
	// Sent as written: json.Marshal would compact the schema.
	spaced := `{"model":"mira","messages":[{"role":"user","content":"` + strings.Repeat("word ", 250000/5) +
		`"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":` + strings.Repeat(" ", 16000) + `"object"}}}]}`
	req, err := http.NewRequest("POST", "http://"+ta.Addr()+"/api/v1/tokens/count", strings.NewReader(spaced))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+ten.key)
	r = do(t, req)
	require.Equal(t, 200, r.status, "whitespace in a schema is not text: %s", r.raw)

	// Scope tokens.
	noScope := newTenant(t, ta.dbURL, "noscope@example.com", "--scopes", "chat")
	r = ta.call(t, "POST", "/api/v1/tokens/count", noScope.key, map[string]any{"model": "mira", "messages": msgs})
	require.Equal(t, 403, r.status)
	require.Equal(t, "tokens", r.body["required_scope"])

	// Nothing recorded.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, ta.ledger.Flush(ctx))
	var n int
	require.NoError(t, ta.db.Pool.QueryRow(t.Context(), `select count(*) from request_log where route = 'tokens_count'`).Scan(&n))
	require.Zero(t, n)
}

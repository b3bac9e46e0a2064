package proxy

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/sim"
)

// recordingSim is a strict upstream that records every body it is sent:
// the simulator, which refuses what OpenAI's API refuses, behind a
// recorder.
func recordingSim(t testing.TB) *fakeUpstream {
	t.Helper()
	s := sim.New(sim.Config{})
	t.Cleanup(s.Shutdown)
	return newFakeUpstream(t, s.Handler())
}

// contractSystemPrompt is vaani's system prompt in the contract tests.
const contractSystemPrompt = "You are terse."

// strictOpenAIDecode decodes an upstream body into the OpenAI Go SDK's
// request type and requires the SDK to encode it back to the same JSON:
// a field the SDK does not know is dropped on the way, and a value of the
// wrong shape does not survive the round trip, so both fail. Three things
// the SDK's own encoding differs on are set aside first: stream (the SDK
// sets it in NewStreaming, so its params lack it), explicit nulls (which
// it leaves out), and a named tool_choice (its union decoder loses the
// name; that value is checked against the named-choice type on its own).
func strictOpenAIDecode(t testing.TB, body []byte) {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	delete(m, "stream")
	switch tc := m["tool_choice"].(type) {
	case string:
		require.Contains(t, []string{string(openai.ChatCompletionToolChoiceOptionAutoNone),
			string(openai.ChatCompletionToolChoiceOptionAutoAuto), string(openai.ChatCompletionToolChoiceOptionAutoRequired)}, tc)
	case map[string]any:
		raw, err := json.Marshal(tc)
		require.NoError(t, err)
		var named openai.ChatCompletionNamedToolChoiceParam
		require.NoError(t, json.Unmarshal(raw, &named))
		back, err := json.Marshal(named)
		require.NoError(t, err)
		require.JSONEq(t, string(raw), string(back), "tool_choice is the SDK's named tool choice")
		delete(m, "tool_choice")
	}
	want, err := json.Marshal(dropNulls(m))
	require.NoError(t, err)
	var p openai.ChatCompletionNewParams
	require.NoError(t, json.Unmarshal(want, &p), "%s", want)
	back, err := json.Marshal(p)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(back), "the upstream body survives the OpenAI SDK's request type unchanged")
}

// dropNulls removes the object members whose value is null, at any depth.
func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
				continue
			}
			x[k] = dropNulls(e)
		}
	case []any:
		for i := range x {
			x[i] = dropNulls(x[i])
		}
	}
	return v
}

// TestUpstreamContract sends every chat feature the gateway forwards and
// checks the body the upstream received field by field against the
// client's request, then decodes it with the OpenAI SDK's request type.
func TestUpstreamContract(t *testing.T) {
	up := recordingSim(t)
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.dial = up.dial
		o.upstream = func(c *UpstreamConfig) {
			if c.Model == "sim-vaani" {
				c.SystemPrompt = contractSystemPrompt
			}
		}
	})
	const weather = `{"type":"function","function":{"name":"get_weather","description":"Weather for a city","strict":true,` +
		`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}}`
	const user = `{"role":"user","content":"Weather in Pune?"}`
	cases := []struct {
		name, body string
		// tier is the tier that serves the request.
		tier string
		// toolCall names the tool the upstream's reply must call, when
		// the request forces one.
		toolCall string
	}{
		{"text", `{"model":"mira","messages":[` + user + `]}`, "mira", ""},
		{"sampling and budget", `{"model":"mira","temperature":0.3,"top_p":0.9,"max_tokens":100000,"messages":[` + user + `]}`, "mira", ""},
		{"tools", `{"model":"mira","tools":[` + weather + `],"messages":[` + user + `]}`, "mira", ""},
		{"tool_choice auto", `{"model":"mira","tools":[` + weather + `],"tool_choice":"auto","messages":[` + user + `]}`, "mira", ""},
		{"tool_choice none", `{"model":"mira","tools":[` + weather + `],"tool_choice":"none","messages":[` + user + `]}`, "mira", ""},
		{"tool_choice required", `{"model":"mira","tools":[` + weather + `],"tool_choice":"required","messages":[` + user + `]}`, "mira", "get_weather"},
		{"tool_choice named", `{"model":"mira","tools":[` + weather + `],"tool_choice":{"type":"function","function":{"name":"get_weather"}},"messages":[` + user + `]}`, "mira", "get_weather"},
		{"tool_choice null", `{"model":"mira","tools":[` + weather + `],"tool_choice":null,"messages":[` + user + `]}`, "mira", ""},
		{"tool_choice without tools", `{"model":"mira","tool_choice":"auto","messages":[` + user + `]}`, "mira", ""},
		{"parallel_tool_calls false", `{"model":"mira","tools":[` + weather + `],"parallel_tool_calls":false,"messages":[` + user + `]}`, "mira", ""},
		{"parallel_tool_calls true", `{"model":"mira","tools":[` + weather + `],"parallel_tool_calls":true,"messages":[` + user + `]}`, "mira", ""},
		{"parallel_tool_calls without tools", `{"model":"mira","parallel_tool_calls":false,"messages":[` + user + `]}`, "mira", ""},
		{"tool results", `{"model":"mira","tools":[` + weather + `],"tool_choice":"auto","messages":[` + user + `,` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Pune\"}"}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"31C and sunny"}]}`, "mira", ""},
		{"json_schema", `{"model":"mira","response_format":{"type":"json_schema","json_schema":{"name":"weather","description":"A forecast","strict":true,` +
			`"schema":{"type":"object","properties":{"c":{"type":"number"}},"required":["c"],"additionalProperties":false}}},"messages":[` + user + `]}`, "mira", ""},
		{"json_object", `{"model":"mira","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"Answer in JSON."}]}`, "mira", ""},
		{"text format", `{"model":"mira","response_format":{"type":"text"},"messages":[` + user + `]}`, "mira", ""},
		{"reasoning effort", `{"model":"kavi","reasoning_effort":"low","messages":[` + user + `]}`, "kavi", ""},
		{"reasoning effort none", `{"model":"kavi","reasoning_effort":"none","messages":[` + user + `]}`, "kavi", ""},
		{"default effort", `{"model":"kavi","messages":[` + user + `]}`, "kavi", ""},
		{"system prompt injection", `{"model":"vaani","messages":[{"role":"system","content":"Client system."},` + user + `]}`, "vaani", ""},
		{"multi-part content", `{"model":"kavi","messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}}]}]}`, "kavi", ""},
		{"named messages", `{"model":"mira","messages":[{"role":"system","content":"s","name":"sys"},{"role":"user","content":"u","name":"ana"}]}`, "mira", ""},
		{"stream", `{"model":"mira","stream":true,"messages":[` + user + `]}`, "mira", ""},
		{"stream options", `{"model":"mira","stream":true,"stream_options":{"include_usage":false},"messages":[` + user + `]}`, "mira", ""},
		{"stream tools", `{"model":"vaani","stream":true,"tools":[` + weather + `],"tool_choice":{"type":"function","function":{"name":"get_weather"}},"messages":[` + user + `]}`, "vaani", "get_weather"},
	}
	for _, c := range cases {
		for _, path := range []string{"/v1/chat/completions", "/api/v1/chat"} {
			t.Run(c.name+" "+path, func(t *testing.T) {
				before := up.calls.Load()
				r := f.post(t, path, c.body)
				require.Equal(t, 200, r.status, "%s", r.body)
				require.Equal(t, before+1, up.calls.Load(), "one upstream call")
				if c.toolCall != "" {
					require.Contains(t, string(r.body), `"name":"`+c.toolCall+`"`, "the upstream honoured the forced tool choice")
				}
				up.mu.Lock()
				body := up.bodies[len(up.bodies)-1]
				up.mu.Unlock()
				checkUpstreamBody(t, c.tier, c.body, body)
				strictOpenAIDecode(t, body)
			})
		}
	}
}

// checkUpstreamBody compares the upstream body with the client's request
// field by field: what the gateway forwards is the client's JSON, and what
// it sets (model, budget, effort, stream options, system prompt) is what
// its rules say.
func checkUpstreamBody(t testing.TB, tier, client string, upstream []byte) {
	t.Helper()
	var in, out map[string]any
	require.NoError(t, json.Unmarshal([]byte(client), &in))
	require.NoError(t, json.Unmarshal(upstream, &out), "%s", upstream)

	want := map[string]any{"model": "sim-" + tier}
	msgs := in["messages"].([]any)
	if tier == "vaani" {
		msgs = append([]any{map[string]any{"role": "system", "content": contractSystemPrompt}}, msgs...)
	}
	want["messages"] = msgs
	caps := map[string]float64{"kavi": 8192, "vaani": 4096, "mira": 2048}
	want["max_tokens"] = caps[tier]
	if mt, ok := in["max_tokens"].(float64); ok && mt < caps[tier] {
		want["max_tokens"] = mt
	}
	for _, k := range []string{"temperature", "top_p", "tools", "response_format"} {
		if v, ok := in[k]; ok {
			want[k] = v
		}
	}
	if tc, ok := in["tool_choice"]; ok && tc != nil && in["tools"] != nil {
		want["tool_choice"] = tc
	}
	if in["parallel_tool_calls"] == false && in["tools"] != nil {
		// Only false goes upstream (true is the default), and only
		// with tools, as OpenAI requires.
		want["parallel_tool_calls"] = false
	}
	if in["stream"] == true {
		want["stream"] = true
		want["stream_options"] = map[string]any{"include_usage": true}
	}
	switch tier {
	case "kavi", "vaani":
		effort := map[string]string{"kavi": "high", "vaani": "low"}[tier]
		if e, ok := in["reasoning_effort"].(string); ok {
			effort = e
		}
		want["reasoning_effort"] = effort
	}
	require.ElementsMatch(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(out)), "the upstream body's fields: %s", upstream)
	for k, v := range want {
		require.Equal(t, v, out[k], "field %s of %s", k, upstream)
	}
	// Raw JSON values go out as JSON, never as base64 strings.
	require.NotContains(t, string(upstream), `"tool_choice":"ey`)
	require.False(t, strings.Contains(string(upstream), `"tool_choice":"I`), "%s", upstream)
}

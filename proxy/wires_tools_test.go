package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// lastUpstreamBody is the body of the upstream's latest call, decoded.
func lastUpstreamBody(t *testing.T, up *fakeUpstream) map[string]any {
	t.Helper()
	up.mu.Lock()
	raw := up.bodies[len(up.bodies)-1]
	up.mu.Unlock()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
	return m
}

// sseData is the data of each event of a stream whose type is typ.
func sseData(t *testing.T, body []byte, typ string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(body, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || !bytes.Contains(data, []byte(`"type":"`+typ+`"`)) {
			continue
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal(data, &ev), "%s", data)
		if ev["type"] == typ {
			out = append(out, ev)
		}
	}
	return out
}

// TestParallelToolCallsOff: a client that disables parallel tool calls
// (Anthropic's disable_parallel_tool_use, OpenAI's parallel_tool_calls
// false) gets one call where the model would make two, as from the
// vendors' APIs: the setting goes upstream as parallel_tool_calls false,
// and only then, and only with tools.
// parallelCases are the parallel_tool_calls settings of the Responses and
// chat wires, and the tool calls each answer makes.
var parallelCases = []struct {
	param string
	calls int
}{
	{`,"parallel_tool_calls":false`, 1},
	{`,"parallel_tool_calls":true`, 2},
	{``, 2},
}

func TestParallelToolCallsOff(t *testing.T) {
	up := recordingSim(t)
	f := newChatFixture(t, func(o *fixtureOptions) { o.dial = up.dial })
	const tools = `[` + weatherTool + `,` + timeTool + `]`
	const both = `Both [[sim:tool=get_weather,get_time]]`
	anthropicTools := `[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},` +
		`{"name":"get_time","input_schema":{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]}}]`
	responsesTools := `[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},` +
		`{"type":"function","name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]}}]`

	// upstream checks the latest upstream body: parallel_tool_calls false
	// when serial, no such member otherwise.
	upstream := func(t *testing.T, serial bool) {
		t.Helper()
		v, ok := lastUpstreamBody(t, up)["parallel_tool_calls"]
		if serial {
			require.True(t, ok, "parallel_tool_calls goes upstream")
			require.Equal(t, false, v)
		} else {
			require.False(t, ok, "no parallel_tool_calls upstream unless the client disabled parallel calls")
		}
	}

	t.Run("anthropic", func(t *testing.T) {
		for _, c := range []struct {
			choice string
			calls  int
		}{
			{`{"type":"auto","disable_parallel_tool_use":true}`, 1},
			{`{"type":"any","disable_parallel_tool_use":true}`, 1},
			{`{"type":"auto","disable_parallel_tool_use":false}`, 2},
			{`{"type":"auto"}`, 2},
		} {
			for _, stream := range []bool{false, true} {
				body := `{"model":"vaani","max_tokens":512,"stream":` + map[bool]string{false: "false", true: "true"}[stream] +
					`,"tools":` + anthropicTools + `,"tool_choice":` + c.choice + `,"messages":[{"role":"user","content":"` + both + `"}]}`
				r := f.post(t, "/v1/messages", body, "anthropic-version", "2023-06-01")
				require.Equal(t, 200, r.status, "%s", r.body)
				var names []string
				if stream {
					for _, ev := range sseData(t, r.body, "content_block_start") {
						if b := ev["content_block"].(map[string]any); b["type"] == "tool_use" {
							names = append(names, b["name"].(string))
						}
					}
				} else {
					var msg struct {
						Content    []struct{ Type, Name string }
						StopReason string `json:"stop_reason"`
					}
					require.NoError(t, json.Unmarshal(r.body, &msg))
					require.Equal(t, "tool_use", msg.StopReason)
					for _, b := range msg.Content {
						if b.Type == "tool_use" {
							names = append(names, b.Name)
						}
					}
				}
				require.Equal(t, []string{"get_weather", "get_time"}[:c.calls], names, "%s stream %v", c.choice, stream)
				upstream(t, c.calls == 1)
			}
		}
	})

	t.Run("responses", func(t *testing.T) {
		for _, c := range parallelCases {
			echo := c.calls == 2 // the response echoes the effective value
			body := `{"model":"vaani","tools":` + responsesTools + c.param + `,"input":"` + both + `"}`
			r := f.post(t, "/v1/responses", body)
			require.Equal(t, 200, r.status, "%s", r.body)
			var resp struct {
				Output            []struct{ Type, Name string }
				ParallelToolCalls *bool `json:"parallel_tool_calls"`
			}
			require.NoError(t, json.Unmarshal(r.body, &resp))
			require.Len(t, resp.Output, c.calls, "%s", r.body)
			require.Equal(t, "get_weather", resp.Output[0].Name)
			require.NotNil(t, resp.ParallelToolCalls)
			require.Equal(t, echo, *resp.ParallelToolCalls, "%s", r.body)
			upstream(t, c.calls == 1)

			r = f.post(t, "/v1/responses", strings.Replace(body, `{`, `{"stream":true,`, 1))
			require.Equal(t, 200, r.status, "%s", r.body)
			require.Len(t, sseData(t, r.body, "response.function_call_arguments.done"), c.calls, "%s", r.body)
			for _, typ := range []string{"response.created", "response.in_progress", "response.completed"} {
				evs := sseData(t, r.body, typ)
				require.Len(t, evs, 1, typ)
				require.Equal(t, echo, evs[0]["response"].(map[string]any)["parallel_tool_calls"], typ)
			}
			upstream(t, c.calls == 1)
		}
	})

	t.Run("chat", func(t *testing.T) {
		for _, c := range parallelCases {
			for _, path := range []string{"/v1/chat/completions", "/api/v1/chat"} {
				body := `{"model":"vaani","tools":` + tools + c.param + `,"messages":[{"role":"user","content":"` + both + `"}]}`
				r := f.post(t, path, body)
				require.Equal(t, 200, r.status, "%s", r.body)
				require.Equal(t, c.calls, strings.Count(string(r.body), `"type":"function"`), "%s %s: %s", path, c.param, r.body)
				upstream(t, c.calls == 1)
			}
		}
	})

	t.Run("without tools", func(t *testing.T) {
		// OpenAI refuses parallel_tool_calls without tools (the
		// simulator too): without tools it means nothing and stays here.
		for _, c := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"model":"mira","parallel_tool_calls":false,"messages":[{"role":"user","content":"hi"}]}`},
			{"/v1/responses", `{"model":"mira","parallel_tool_calls":false,"input":"hi"}`},
			{"/v1/messages", `{"model":"mira","max_tokens":64,"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"hi"}]}`},
		} {
			r := f.post(t, c.path, c.body, "anthropic-version", "2023-06-01")
			require.Equal(t, 200, r.status, "%s: %s", c.path, r.body)
			upstream(t, false)
		}
	})
}

// TestWireStoredAndServerFeatures: what needs state or servers the gateway
// does not have is refused in the wire's envelope, naming the field:
// Anthropic's mcp_servers and container, a Responses stored prompt. Their
// empty forms, and Responses' max_tool_calls (a bound on built-in tools,
// which are refused anyway), are accepted.
func TestWireStoredAndServerFeatures(t *testing.T) {
	f := newChatFixture(t)
	const user = `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct{ name, body, msg string }{
		{"mcp_servers", `{"model":"mira","max_tokens":64,"mcp_servers":[{"type":"url","url":"https://mcp.example.com/sse","name":"ex"}],` + user + `}`,
			"mcp_servers: not supported; this gateway serves client tools only."},
		{"container id", `{"model":"mira","max_tokens":64,"container":"container_011CQ",` + user + `}`,
			"container: not supported; this gateway runs no code execution containers."},
		{"container params", `{"model":"mira","max_tokens":64,"container":{"id":"container_011CQ"},` + user + `}`,
			"container: not supported"},
		// Thinking is the model's own: a user message carrying it was
		// dropped whole, and the request refused as having no messages.
		{"thinking in a user message", `{"model":"mira","max_tokens":64,"messages":[{"role":"user","content":[` +
			`{"type":"thinking","thinking":"x","signature":"s"}]}]}`,
			"messages[0].content[0].type: thinking blocks are allowed only in assistant messages."},
		{"redacted thinking in a user message", `{"model":"mira","max_tokens":64,"messages":[{"role":"user","content":[` +
			`{"type":"text","text":"hi"},{"type":"redacted_thinking","data":"x"}]}]}`,
			"messages[0].content[1].type: redacted_thinking blocks are allowed only in assistant messages."},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
				r := f.post(t, path, c.body, "anthropic-version", "2023-06-01")
				require.Equal(t, 400, r.status, "%s: %s", path, r.body)
				var env struct {
					Type  string `json:"type"`
					Error struct {
						Type    string `json:"type"`
						Message string `json:"message"`
					} `json:"error"`
				}
				require.NoError(t, json.Unmarshal(r.body, &env), "%s", r.body)
				require.Equal(t, "error", env.Type)
				require.Equal(t, "invalid_request_error", env.Error.Type)
				require.Contains(t, env.Error.Message, c.msg)
			}
		})
	}
	for _, c := range []struct{ name, path, body string }{
		{"mcp_servers empty", "/v1/messages", `{"model":"mira","max_tokens":64,"mcp_servers":[ ],` + user + `}`},
		{"mcp_servers null", "/v1/messages", `{"model":"mira","max_tokens":64,"mcp_servers":null,` + user + `}`},
		{"container null", "/v1/messages", `{"model":"mira","max_tokens":64,"container":null,` + user + `}`},
		{"container empty", "/v1/messages", `{"model":"mira","max_tokens":64,"container":"",` + user + `}`},
		{"prompt null", "/v1/responses", `{"model":"mira","prompt":null,"input":"hi"}`},
		{"max_tool_calls", "/v1/responses", `{"model":"mira","max_tool_calls":3,"input":"hi"}`},
	} {
		t.Run("accepts "+c.name, func(t *testing.T) {
			r := f.post(t, c.path, c.body, "anthropic-version", "2023-06-01")
			require.Equal(t, 200, r.status, "%s", r.body)
		})
	}
}

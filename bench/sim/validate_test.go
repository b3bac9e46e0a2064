package sim

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStrictRequests: the simulator refuses what OpenAI's chat completions
// API refuses, with its 400 body, and accepts every form the API takes.
func TestStrictRequests(t *testing.T) {
	h := newHarness(t, Config{})
	const user = `{"role":"user","content":"hi"}`
	const tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	refused := []struct {
		name, body, param, code string
	}{
		{"unknown field", `{"model":"m","messages":[` + user + `],"file_ids":["f"]}`, "", ""},
		{"not an object", `[1]`, "", "invalid_type"},
		{"model type", `{"model":5,"messages":[` + user + `]}`, "model", "invalid_type"},
		{"messages type", `{"model":"m","messages":{}}`, "messages", "invalid_type"},
		{"unknown role", `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, "messages[0].role", "invalid_value"},
		{"unknown message field", `{"model":"m","messages":[{"role":"user","content":"x","file_ids":[]}]}`, "messages[0].file_ids", "unknown_parameter"},
		{"tool_calls on a user message", `{"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]}`, "messages[0].tool_calls", "unknown_parameter"},
		{"content missing", `{"model":"m","messages":[{"role":"user"}]}`, "messages[0].content", "missing_required_parameter"},
		{"assistant without content or calls", `{"model":"m","messages":[{"role":"assistant","content":null}]}`, "messages[0].content", "missing_required_parameter"},
		{"tool without id", `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id", "missing_required_parameter"},
		{"part type", `{"model":"m","messages":[{"role":"user","content":[{"type":"video","text":"x"}]}]}`, "messages[0].content[0].type", "invalid_value"},
		{"part text type", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, "messages[0].content[0].text", "invalid_type"},
		{"image part on system", `{"model":"m","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "messages[0].content[0].type", "invalid_value"},
		{"tool call type", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"fn","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].type", "invalid_value"},
		{"tool call arguments object", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":{}}}]}]}`, "messages[0].tool_calls[0].function.arguments", "invalid_type"},
		{"max_tokens fraction", `{"model":"m","messages":[` + user + `],"max_tokens":1.5}`, "max_tokens", "invalid_type"},
		{"max_tokens string", `{"model":"m","messages":[` + user + `],"max_tokens":"5"}`, "max_tokens", "invalid_type"},
		{"temperature range", `{"model":"m","messages":[` + user + `],"temperature":3}`, "temperature", "decimal_above_max_value"},
		{"top_p type", `{"model":"m","messages":[` + user + `],"top_p":"1"}`, "top_p", "invalid_type"},
		{"stream type", `{"model":"m","messages":[` + user + `],"stream":"yes"}`, "stream", "invalid_type"},
		{"reasoning_effort enum", `{"model":"m","messages":[` + user + `],"reasoning_effort":"max"}`, "reasoning_effort", "invalid_value"},
		{"stream_options without stream", `{"model":"m","messages":[` + user + `],"stream_options":{"include_usage":true}}`, "stream_options", "invalid_value"},
		{"stream_options field", `{"model":"m","messages":[` + user + `],"stream":true,"stream_options":{"usage":true}}`, "stream_options.usage", "unknown_parameter"},
		{"tool type", `{"model":"m","messages":[` + user + `],"tools":[{"type":"fn","function":{"name":"f"}}]}`, "tools[0].type", "invalid_value"},
		{"tool name", `{"model":"m","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"a b"}}]}`, "tools[0].function.name", "invalid_value"},
		{"tool parameters string", `{"model":"m","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}]}`, "tools[0].function.parameters", "invalid_type"},
		{"duplicate tool", `{"model":"m","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, "tools", "invalid_value"},
		// The defect this strictness exists for: tool_choice sent as base64.
		{"tool_choice base64", `{"model":"m","messages":[` + user + `],` + tools + `,"tool_choice":"InJlcXVpcmVkIg=="}`, "tool_choice", "invalid_value"},
		{"tool_choice without tools", `{"model":"m","messages":[` + user + `],"tool_choice":"auto"}`, "tool_choice", "invalid_value"},
		{"tool_choice undeclared", `{"model":"m","messages":[` + user + `],` + tools + `,"tool_choice":{"type":"function","function":{"name":"other"}}}`, "tool_choice", "invalid_value"},
		{"tool_choice extra field", `{"model":"m","messages":[` + user + `],` + tools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"},"x":1}}`, "tool_choice.x", "unknown_parameter"},
		{"tool_choice number", `{"model":"m","messages":[` + user + `],` + tools + `,"tool_choice":1}`, "tool_choice", "invalid_type"},
		{"parallel_tool_calls without tools", `{"model":"m","messages":[` + user + `],"parallel_tool_calls":false}`, "parallel_tool_calls", "invalid_value"},
		{"parallel_tool_calls type", `{"model":"m","messages":[` + user + `],` + tools + `,"parallel_tool_calls":"no"}`, "parallel_tool_calls", "invalid_type"},
		{"response_format type", `{"model":"m","messages":[` + user + `],"response_format":{"type":"xml"}}`, "response_format.type", "invalid_value"},
		{"response_format schema missing", `{"model":"m","messages":[` + user + `],"response_format":{"type":"json_schema"}}`, "response_format.json_schema", "missing_required_parameter"},
		{"response_format name missing", `{"model":"m","messages":[` + user + `],"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}`, "response_format.json_schema.name", "missing_required_parameter"},
		{"response_format schema string", `{"model":"m","messages":[` + user + `],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":"{}"}}}`, "response_format.json_schema.schema", "invalid_type"},
		{"response_format extra", `{"model":"m","messages":[` + user + `],"response_format":{"type":"json_object","schema":{}}}`, "response_format.schema", "unknown_parameter"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := h.postJSON("/v1/chat/completions", tc.body, http.StatusBadRequest)
			e := v["error"].(map[string]any)
			require.Len(t, e, 4, "the OpenAI error body: message, type, param, code")
			require.Equal(t, "invalid_request_error", e["type"])
			require.NotEmpty(t, e["message"])
			if tc.param == "" {
				require.Nil(t, e["param"])
			} else {
				require.Equal(t, tc.param, e["param"])
			}
			if tc.code == "" {
				require.Nil(t, e["code"])
			} else {
				require.Equal(t, tc.code, e["code"])
			}
		})
	}

	accepted := []struct{ name, body string }{
		{"minimal", `{"model":"m","messages":[` + user + `]}`},
		{"every tool_choice mode", `{"model":"m","messages":[` + user + `],` + tools + `,"tool_choice":"none"}`},
		{"auto", `{"model":"m","messages":[` + user + `],` + tools + `,"tool_choice":"auto"}`},
		{"required", `{"model":"m","messages":[` + user + `],` + tools + `,"tool_choice":"required"}`},
		{"named", `{"model":"m","messages":[` + user + `],` + tools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`},
		{"parallel_tool_calls", `{"model":"m","messages":[` + user + `],` + tools + `,"parallel_tool_calls":false}`},
		{"null optionals", `{"model":"m","messages":[` + user + `],"tools":null,"tool_choice":null,"temperature":null,"stream_options":null}`},
		{"tool loop", `{"model":"m","messages":[` + user + `,{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"sunny"}],` + tools + `}`},
		{"parts", `{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"be brief"}]},{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA==","detail":"low"}}]}]}`},
		{"structured", `{"model":"m","messages":[` + user + `],"response_format":{"type":"json_schema","json_schema":{"name":"a","description":"d","strict":true,"schema":{"type":"object"}}}}`},
		{"stream with usage", `{"model":"m","messages":[` + user + `],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":5}`},
		{"sampling", `{"model":"m","messages":[` + user + `],"temperature":0.5,"top_p":1,"max_tokens":10,"n":1,"seed":-3,"stop":["x"],"user":"u","reasoning_effort":"low"}`},
	}
	for _, tc := range accepted {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			resp := h.post("/v1/chat/completions", tc.body)
			raw := readAll(t, resp)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
		})
	}
}

package proxy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A refusal on the Anthropic and Responses wires names the field as the
// client sent it, not as the chat request it became.
func TestWireRefusalsNameTheirOwnFields(t *testing.T) {
	f := newChatFixture(t)
	const weather = `{"type":"object","properties":{"city":{"type":"string"}}}`
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"anthropic tool name", "/v1/messages",
			`{"model":"mira","max_tokens":8,"tools":[{"name":"","input_schema":` + weather + `}],"messages":[{"role":"user","content":"hi"}]}`,
			"tools[0].name: required"},
		{"anthropic tool schema", "/v1/messages",
			`{"model":"mira","max_tokens":8,"tools":[{"name":"w","input_schema":{"type":"object","properties":{"a":{"$ref":"#/properties/a"}}}}],"messages":[{"role":"user","content":"hi"}]}`,
			"tools[0].input_schema of w"},
		{"anthropic tool_choice", "/v1/messages",
			`{"model":"mira","max_tokens":8,"tools":[{"name":"w","input_schema":` + weather + `}],"tool_choice":{"type":"tool","name":"zz"},"messages":[{"role":"user","content":"hi"}]}`,
			"tool_choice.name: names a function"},
		{"responses format name", "/v1/responses",
			`{"model":"mira","input":"hi","text":{"format":{"type":"json_schema","name":"bad name!","schema":{"type":"object"}}}}`,
			"text.format.name: required"},
		{"responses tool name", "/v1/responses",
			`{"model":"mira","input":"hi","tools":[{"type":"function","name":"","parameters":` + weather + `}]}`,
			"tools[0].name: required"},
		{"responses tool_choice", "/v1/responses",
			`{"model":"mira","input":"hi","tools":[{"type":"function","name":"w","parameters":` + weather + `}],"tool_choice":"bogus"}`,
			`{\"type\":\"function\",\"name\":...}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.post(t, tc.path, tc.body)
			require.Equal(t, 400, r.status, "%s", r.body)
			require.Contains(t, string(r.body), tc.want)
			require.NotContains(t, string(r.body), "function.name")
			require.NotContains(t, string(r.body), "response_format")
		})
	}
	// The chat route keeps its own names.
	r := f.post(t, "/v1/chat/completions", `{"model":"mira","tools":[{"type":"function","function":{"name":""}}],"messages":[{"role":"user","content":"hi"}]}`)
	require.Contains(t, string(r.body), "tools[0].function.name: required")
}

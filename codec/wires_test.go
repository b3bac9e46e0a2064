package codec

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// output_config on the Anthropic wire: its format (or the beta's
// output_format) is a strict json_schema response format, its effort the
// reasoning effort unless thinking set one, and what cannot be honoured is
// refused.
func TestAnthropicOutputConfig(t *testing.T) {
	const head = `{"model":"mira","max_tokens":2048,"messages":[{"role":"user","content":"hi"}]`
	chat := func(t *testing.T, extra string) (ChatRequest, *Error) {
		t.Helper()
		var r MessagesRequest
		require.NoError(t, json.Unmarshal([]byte(head+extra+"}"), &r))
		var out ChatRequest
		return out, r.ToChat(&out, false)
	}
	schema := `{"type":"object","properties":{"a":{"type":"string"}}}`
	for _, field := range []string{`,"output_config":{"format":{"type":"json_schema","schema":` + schema + `}}`,
		`,"output_format":{"type":"json_schema","schema":` + schema + `}`} {
		out, e := chat(t, field)
		require.Nil(t, e, field)
		require.Equal(t, "json_schema", out.ResponseFormat.Type)
		require.Equal(t, "output", out.ResponseFormat.JSONSchema.Name)
		require.True(t, *out.ResponseFormat.JSONSchema.Strict)
		require.JSONEq(t, schema, string(out.ResponseFormat.JSONSchema.Schema))
	}
	for field, msg := range map[string]string{
		`,"output_config":{"format":{"type":"json_schema","schema":{}}},"output_format":{"type":"json_schema","schema":{}}`: "output_format:",
		`,"output_config":{"format":{"type":"text"}}`:                          "output_config.format.type:",
		`,"output_config":{"format":{"type":"json_schema"}}`:                   "output_config.format.schema:",
		`,"output_format":{"type":"json_schema","schema":null}`:                "output_format.schema:",
		`,"output_config":{"effort":"extreme"}`:                                "output_config.effort:",
		`,"thinking":{"type":"disabled"},"output_config":{"effort":"extreme"}`: "output_config.effort:",
	} {
		_, e := chat(t, field)
		require.NotNil(t, e, field)
		require.Equal(t, CodeInvalidRequest, e.Code)
		require.Contains(t, e.Message, msg, field)
	}
	out, e := chat(t, `,"output_config":{"effort":"max"}`)
	require.Nil(t, e)
	require.Equal(t, "high", *out.ReasoningEffort)
	out, e = chat(t, `,"thinking":{"type":"enabled","budget_tokens":1024},"output_config":{"effort":"high"}`)
	require.Nil(t, e)
	require.Equal(t, "low", *out.ReasoningEffort, "thinking's budget decides")
	out, e = chat(t, "")
	require.Nil(t, e)
	require.Nil(t, out.ResponseFormat)
	require.Nil(t, out.ReasoningEffort)
}

// A response object repeats the request's fields as OpenAI's does, each
// in its default when not sent.
func TestAppendResponseEcho(t *testing.T) {
	var r ResponsesRequest
	require.Equal(t, `"instructions":null,"metadata":{},"temperature":null,"tool_choice":"auto","tools":[],"top_p":null`,
		string(AppendResponseEcho(nil, &r)))
	require.NoError(t, json.Unmarshal([]byte(`{"instructions":"Be \"brief\".","metadata":{"z":"1","a":"2"},
		"temperature":0.25,"top_p":1,"tool_choice":{"type":"function","name":"f"},
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":false},{"type":"function","name":"g","description":"G"}]}`), &r))
	got := "{" + string(AppendResponseEcho(nil, &r)) + "}"
	require.JSONEq(t, `{"instructions":"Be \"brief\".","metadata":{"a":"2","z":"1"},"temperature":0.25,
		"tool_choice":{"type":"function","name":"f"},"top_p":1,
		"tools":[{"type":"function","name":"f","description":null,"parameters":{"type":"object"},"strict":false},
			{"type":"function","name":"g","description":"G","parameters":null,"strict":true}]}`, got)
	require.Contains(t, got, `"metadata":{"a":"2","z":"1"}`, "metadata in key order, the same bytes every time")
}

package proxy

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/frameorder"
)

// toAnthropic rewrites a golden chat body as the same request on
// /v1/messages.
func toAnthropic(t *testing.T, chat string, stream bool) string {
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(chat), &in))
	out := map[string]any{"model": in["model"], "messages": in["messages"], "stream": stream, "max_tokens": 1024}
	if m, ok := in["max_tokens"]; ok {
		out["max_tokens"] = m
	}
	if in["reasoning_effort"] == "none" {
		out["thinking"] = map[string]any{"type": "disabled"}
	}
	if tools, ok := in["tools"].([]any); ok {
		var ts []any
		for _, tool := range tools {
			fn := tool.(map[string]any)["function"].(map[string]any)
			ts = append(ts, map[string]any{"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]})
		}
		out["tools"] = ts
	}
	b, err := json.Marshal(out)
	require.NoError(t, err)
	return string(b)
}

// toResponses rewrites a golden chat body as the same request on
// /v1/responses.
func toResponses(t *testing.T, chat string, stream bool) string {
	var in map[string]any
	require.NoError(t, json.Unmarshal([]byte(chat), &in))
	msg := in["messages"].([]any)[0].(map[string]any)
	out := map[string]any{"model": in["model"], "input": msg["content"], "stream": stream}
	if m, ok := in["max_tokens"]; ok {
		out["max_output_tokens"] = m
	}
	if e, ok := in["reasoning_effort"]; ok {
		out["reasoning"] = map[string]any{"effort": e}
	}
	if tools, ok := in["tools"].([]any); ok {
		var ts []any
		for _, tool := range tools {
			fn := tool.(map[string]any)["function"].(map[string]any)
			ts = append(ts, map[string]any{"type": "function", "name": fn["name"], "description": fn["description"], "parameters": fn["parameters"]})
		}
		out["tools"] = ts
	}
	b, err := json.Marshal(out)
	require.NoError(t, err)
	return string(b)
}

var (
	wireIDRE    = regexp.MustCompile(`(msg|resp|fc)_[0-9a-f]{32}`)
	createdAtRE = regexp.MustCompile(`"created_at":\d+`)
)

// TestWireGoldenTranscripts records every golden shape on the Anthropic
// and Responses wires, streaming and not, checks each byte for byte, and
// checks every stream against its wire's grammar: complete, or failed the
// wire's way, never a violation.
func TestWireGoldenTranscripts(t *testing.T) {
	f := newChatFixture(t)
	wires := []struct {
		name, path string
		wire       frameorder.Wire
		body       func(*testing.T, string, bool) string
	}{
		{"anthropic", "/v1/messages", frameorder.Anthropic, toAnthropic},
		{"responses", "/v1/responses", frameorder.Responses, toResponses},
	}
	for _, w := range wires {
		for _, stream := range []bool{false, true} {
			for _, c := range goldenCases {
				mode := "json"
				if stream {
					mode = "sse"
				}
				name := w.name + "_" + mode + "_" + c.name
				t.Run(name, func(t *testing.T) {
					body := w.body(t, strings.Replace(c.body, "WIRE", name, 1), stream)
					r := f.post(t, w.path, body)
					got := transcript(r)
					got = wireIDRE.ReplaceAll(got, []byte("${1}_ID"))
					got = createdAtRE.ReplaceAll(got, []byte(`"created_at":0`))
					golden(t, name+".txt", got)
					if stream && r.status == 200 {
						out := frameorder.CheckStream(w.wire, r.body)
						require.Empty(t, out.Violation, "%s", r.body)
						require.True(t, out.Complete || out.Failed, "%s", r.body)
					}
				})
			}
		}
	}
}

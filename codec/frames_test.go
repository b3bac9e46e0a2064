package codec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func testHead() *Head { return &Head{ID: []byte("chatcmpl-1"), Created: 1700000000, Model: "mira"} }

// testBill is a bill as metering hands it over: 600 billable input tokens
// at 0.20/M, 400 cached at 0.05/M and 250 output at 0.40/M cost 0.00024.
func testBill() *Bill {
	return &Bill{Tier: "mira", InputTokens: 1000, OutputTokens: 250, CacheReadTokens: 400,
		InputPerM: 200_000, OutputPerM: 400_000, CacheReadPerM: 50_000, AmountPico: 240_000_000, PromptCacheActive: true}
}

func TestDecimalsAreExact(t *testing.T) {
	require.Equal(t, "0.00024", string(AppendDecimal(nil, testBill().AmountPico, 12)))
	require.Equal(t, "0.000000000001", string(AppendDecimal(nil, 1, 12)), "a millionth of a micro-dollar survives")
	for in, want := range map[int64]string{0: "0", 5: "0.000005", 1_500_000: "1.5", -2_000_000: "-2"} {
		require.Equal(t, want, string(AppendDecimal(nil, in, 6)))
	}
}

// sseData returns the JSON of every data line of an SSE fragment.
func sseData(t *testing.T, frames []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(string(frames), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &m), "line %q", line)
		out = append(out, m)
	}
	return out
}

func TestChunkFrames(t *testing.T) {
	h, b := testHead(), testBill()
	gw := AppendGW(nil, []byte("req-1"), &Routing{Tier: "mira", Mode: "explicit", Effort: "none"})
	var s []byte
	s = AppendChunkRole(s, h, gw)
	s = AppendChunkContent(s, h, []byte(`"Hi \"there\"\n"`))
	s = AppendChunkToolCalls(s, h, []byte(`[{"index":1,"id":"x","type":"function","function":{"name":"f","arguments":""}}]`))
	s = AppendChunkFinish(s, h, "tool_calls")
	s = AppendChunkUsage(s, h, b, nil)
	s = AppendDone(s)
	frames := sseData(t, s)
	require.Len(t, frames, 5)
	for _, f := range frames {
		require.Equal(t, "chatcmpl-1", f["id"], "every chunk carries the same id")
		require.EqualValues(t, 1700000000, f["created"])
		require.Equal(t, "chat.completion.chunk", f["object"])
		require.Equal(t, "mira", f["model"])
	}
	delta := func(i int) map[string]any {
		return frames[i]["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
	}
	require.Equal(t, map[string]any{"role": "assistant", "content": ""}, delta(0))
	require.Equal(t, "req-1", frames[0]["gw"].(map[string]any)["request_id"])
	require.Equal(t, map[string]any{"content": "Hi \"there\"\n"}, delta(1))
	require.NotContains(t, delta(2), "content", "never content and tool calls in one frame")
	require.EqualValues(t, 1, delta(2)["tool_calls"].([]any)[0].(map[string]any)["index"])
	require.Equal(t, map[string]any{}, delta(3))
	require.Equal(t, "tool_calls", frames[3]["choices"].([]any)[0].(map[string]any)["finish_reason"])
	require.Equal(t, []any{}, frames[4]["choices"])
	u := frames[4]["usage"].(map[string]any)
	require.EqualValues(t, 1000, u["prompt_tokens"])
	require.EqualValues(t, 1250, u["total_tokens"])
	require.EqualValues(t, 600, u["billable_input_tokens"])
	require.Equal(t, map[string]any{"cached_tokens": 400.0}, u["prompt_tokens_details"])
	require.Equal(t, 0.00024, u["cost"].(map[string]any)["amount"])
	require.True(t, strings.HasSuffix(string(s), "data: [DONE]\n\n"))

	e := AppendChunkError(nil, &Error{Code: CodeUpstreamTimeout})
	require.Equal(t, "upstream_timeout", sseData(t, e)[0]["error"].(map[string]any)["code"])
}

func TestV2Events(t *testing.T) {
	h, b := testHead(), testBill()
	r := &Routing{Tier: "kavi", Mode: "auto", Effort: "high"}
	var s []byte
	s = AppendV2Start(s, h, []byte("req-2"), r)
	s = AppendV2Reasoning(s, []byte(`"hmm"`))
	s = AppendV2Content(s, []byte(`"ok"`))
	s = AppendV2ToolCalls(s, []byte(`[]`))
	s = AppendV2Finish(s, "stop", b)
	s = AppendV2Error(s, &Error{Code: CodeUpstreamOverloaded}, []byte("req-2"))
	var names []string
	for _, line := range strings.Split(string(s), "\n") {
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		}
	}
	require.Equal(t, []string{"start", "reasoning", "delta", "delta", "finish", "error"}, names)
	frames := sseData(t, s)
	require.Equal(t, map[string]any{"tier": "kavi", "mode": "auto", "reasoning_effort": "high"}, frames[0]["routing"])
	require.Equal(t, "stop", frames[4]["finish_reason"])
	require.EqualValues(t, 600, frames[4]["usage"].(map[string]any)["billable_input_tokens"])
	require.Equal(t, map[string]any{"code": "upstream_overloaded", "message": CodeUpstreamOverloaded.DefaultMessage(), "request_id": "req-2"}, frames[5])
}

func TestCompletionBodies(t *testing.T) {
	h, b := testHead(), testBill()
	gw := AppendGW(nil, []byte("req-1"), &Routing{Tier: "mira", Mode: "explicit", Effort: "none"})
	a := &Answer{Content: []byte(`"Hello"`), Reasoning: []byte(`"why"`), Finish: "stop"}
	var v1, v2, oa map[string]any
	require.NoError(t, json.Unmarshal(AppendV1Completion(nil, h, a, b, gw), &v1))
	require.NoError(t, json.Unmarshal(AppendV2Completion(nil, h, a, b, []byte("req-1"), &Routing{Tier: "mira", Mode: "explicit", Effort: "none"}), &v2))
	require.NoError(t, json.Unmarshal(AppendOpenAICompletion(nil, h, a, b), &oa))
	require.NotContains(t, v1, "choices")
	require.Equal(t, map[string]any{"role": "assistant", "content": "Hello"}, v1["message"])
	require.Contains(t, v1["usage"], "cost")
	require.Contains(t, v1, "gw")
	require.NotContains(t, v1, "reasoning", "the trace is v2's only")
	require.Equal(t, "why", v2["reasoning"])
	require.Equal(t, "req-1", v2["request_id"])
	require.NotContains(t, v2, "gw")
	require.NotContains(t, oa, "gw")
	require.NotContains(t, oa, "request_id")
	require.NotContains(t, oa["usage"], "cost")
	require.Nil(t, oa["choices"].([]any)[0].(map[string]any)["logprobs"])

	tools := &Answer{ToolCalls: []byte(`[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]`), Finish: "tool_calls"}
	require.NoError(t, json.Unmarshal(AppendOpenAICompletion(nil, h, tools, b), &oa))
	msg := oa["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	require.Nil(t, msg["content"])
	require.Len(t, msg["tool_calls"], 1)
}

func BenchmarkStreamFrames(b *testing.B) {
	h, bill := testHead(), testBill()
	gw := AppendGW(nil, []byte("req-1"), &Routing{Tier: "mira", Mode: "explicit", Effort: "none"})
	content := []byte(`" token"`)
	dst := make([]byte, 0, 64<<10)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendChunkRole(dst[:0], h, gw)
		for range 256 {
			dst = AppendChunkContent(dst[:0], h, content)
		}
		dst = AppendChunkFinish(dst[:0], h, "stop")
		dst = AppendChunkUsage(dst[:0], h, bill, nil)
		dst = AppendDone(dst[:0])
	}
}

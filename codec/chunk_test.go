package codec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// chunkWant is a Chunk with strings for the spans; "" stands for nil.
type chunkWant struct {
	Role, Content, Reasoning, ToolCalls, FinishReason, Error string
	Usage                                                    Usage
	HasUsage, NoChoices                                      bool
}

func chunkGot(c *Chunk) chunkWant {
	return chunkWant{
		Role: string(c.Role), Content: string(c.Content), Reasoning: string(c.Reasoning),
		ToolCalls: string(c.ToolCalls), FinishReason: string(c.FinishReason), Error: string(c.Error),
		Usage: c.Usage, HasUsage: c.HasUsage, NoChoices: c.NoChoices,
	}
}

// Hand-written chunks in the shapes the common servers send.
const (
	openAIRoleChunk     = `{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`
	openAIContentChunk  = `{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":[{"index":0,"delta":{"content":" Hello \"world\"\n\u00e9"},"logprobs":null,"finish_reason":null}],"usage":null}`
	openAIFinishChunk   = `{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`
	openAIUsageChunk    = `{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":[],"usage":{"prompt_tokens":1117,"completion_tokens":46,"total_tokens":1163,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":12,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`
	openAIToolCallStart = `{"id":"chatcmpl-BTw1","object":"chat.completion.chunk","created":1746000000,"model":"gpt-4.1-mini","system_fingerprint":"fp_38647f5e19","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`
	openAIToolCallArgs  = `{"id":"chatcmpl-BTw1","object":"chat.completion.chunk","created":1746000000,"model":"gpt-4.1-mini","system_fingerprint":"fp_38647f5e19","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":\"Par"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`
	openAIToolCallTwo   = `{"id":"chatcmpl-BTw1","object":"chat.completion.chunk","created":1746000000,"model":"gpt-4.1-mini","system_fingerprint":"fp_38647f5e19","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_Y2kx","type":"function","function":{"name":"get_time","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}`
	openAIToolCallEnd   = `{"id":"chatcmpl-BTw1","object":"chat.completion.chunk","created":1746000000,"model":"gpt-4.1-mini","system_fingerprint":"fp_38647f5e19","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}`
	openAIErrorFrame    = `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`

	vllmReasoningChunk = `{"id":"chatcmpl-9a1f","object":"chat.completion.chunk","created":1739000000,"model":"Qwen/QwQ-32B","choices":[{"index":0,"delta":{"reasoning_content":"Let me think"},"logprobs":null,"finish_reason":null}]}`
	vllmFinalChunk     = `{"id":"chatcmpl-9a1f","object":"chat.completion.chunk","created":1739000000,"model":"Qwen/QwQ-32B","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":112,"completion_tokens":100,"prompt_tokens_details":null}}`

	deepSeekReasoningChunk = `{"id":"5b7d","object":"chat.completion.chunk","created":1737000000,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Okay"},"logprobs":null,"finish_reason":null}]}`
	deepSeekFinalChunk     = `{"id":"5b7d","object":"chat.completion.chunk","created":1737000000,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08","choices":[{"index":0,"delta":{"content":"","reasoning_content":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":13,"completion_tokens":412,"total_tokens":425,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":380},"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":13}}`
	deepSeekOldUsage       = `{"id":"5b7d","object":"chat.completion.chunk","created":1737000000,"model":"deepseek-chat","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":70,"completion_tokens":9,"total_tokens":79,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":6}}`

	ollamaChunk          = `{"id":"chatcmpl-412","object":"chat.completion.chunk","created":1741000000,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`
	ollamaThinkingChunk  = `{"id":"chatcmpl-412","object":"chat.completion.chunk","created":1741000000,"model":"qwen3","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Hmm,"},"finish_reason":null}]}`
	ollamaToolCallChunk  = `{"id":"chatcmpl-412","object":"chat.completion.chunk","created":1741000000,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"id":"call_0x9","index":0,"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":null}]}`
	ollamaFinalChunk     = `{"id":"chatcmpl-412","object":"chat.completion.chunk","created":1741000000,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}`
	ollamaUsageChunk     = `{"id":"chatcmpl-412","object":"chat.completion.chunk","created":1741000000,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[],"usage":{"prompt_tokens":26,"completion_tokens":9,"total_tokens":35}}`
	llamaCppChunk        = `{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" world"}}],"created":1741000000,"id":"chatcmpl-hK3x","model":"gpt-3.5-turbo","system_fingerprint":"b4500-adc5dd92","object":"chat.completion.chunk"}`
	llamaCppFinalChunk   = `{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1741000000,"id":"chatcmpl-hK3x","model":"gpt-3.5-turbo","system_fingerprint":"b4500-adc5dd92","object":"chat.completion.chunk","usage":{"completion_tokens":12,"prompt_tokens":9,"total_tokens":21},"timings":{"prompt_n":9,"prompt_ms":12.31,"prompt_per_token_ms":1.37,"prompt_per_second":731.1,"predicted_n":12,"predicted_ms":101.2,"predicted_per_token_ms":8.43,"predicted_per_second":118.5}}`
	llamaCppWhitespace   = "\n { \"choices\" : [ { \"delta\" : { \"content\" : \"x\" } , \"finish_reason\" : null } ] }\r\n"
	openAICompletionBody = `{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4.1-2025-04-14",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "The image shows a wooden boardwalk\nextending through a \"lush\" green field.",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 1117,
    "completion_tokens": 46,
    "total_tokens": 1163,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}`
)

func TestParseChunk(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want chunkWant
	}{
		{"openai role", openAIRoleChunk, chunkWant{Role: `"assistant"`, Content: `""`}},
		{"openai content", openAIContentChunk, chunkWant{Content: `" Hello \"world\"\n\u00e9"`}},
		{"openai finish", openAIFinishChunk, chunkWant{FinishReason: "stop"}},
		{"openai usage only", openAIUsageChunk, chunkWant{NoChoices: true, HasUsage: true,
			Usage: Usage{PromptTokens: 1117, CompletionTokens: 46, TotalTokens: 1163, CachedTokens: 1024, ReasoningTokens: 12}}},
		{"openai tool call start", openAIToolCallStart, chunkWant{Role: `"assistant"`,
			ToolCalls: `[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}]`}},
		{"openai tool call arguments", openAIToolCallArgs, chunkWant{ToolCalls: `[{"index":0,"function":{"arguments":"{\"location\":\"Par"}}]`}},
		{"openai second tool call", openAIToolCallTwo, chunkWant{ToolCalls: `[{"index":1,"id":"call_Y2kx","type":"function","function":{"name":"get_time","arguments":""}}]`}},
		{"openai tool call end", openAIToolCallEnd, chunkWant{FinishReason: "tool_calls"}},
		{"openai error frame", openAIErrorFrame, chunkWant{Error: `{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}`}},
		{"vllm reasoning", vllmReasoningChunk, chunkWant{Reasoning: `"Let me think"`}},
		{"vllm final", vllmFinalChunk, chunkWant{Content: `""`, FinishReason: "length", HasUsage: true,
			Usage: Usage{PromptTokens: 12, CompletionTokens: 100, TotalTokens: 112}}},
		{"deepseek reasoning", deepSeekReasoningChunk, chunkWant{Reasoning: `"Okay"`}},
		{"deepseek final", deepSeekFinalChunk, chunkWant{Content: `""`, FinishReason: "stop", HasUsage: true,
			Usage: Usage{PromptTokens: 13, CompletionTokens: 412, TotalTokens: 425, ReasoningTokens: 380}}},
		{"deepseek cache hit fallback", deepSeekOldUsage, chunkWant{Content: `""`, FinishReason: "stop", HasUsage: true,
			Usage: Usage{PromptTokens: 70, CompletionTokens: 9, TotalTokens: 79, CachedTokens: 64}}},
		{"ollama content", ollamaChunk, chunkWant{Role: `"assistant"`, Content: `"Hi"`}},
		{"ollama thinking", ollamaThinkingChunk, chunkWant{Role: `"assistant"`, Content: `""`, Reasoning: `"Hmm,"`}},
		{"ollama tool call", ollamaToolCallChunk, chunkWant{Role: `"assistant"`, Content: `""`,
			ToolCalls: `[{"id":"call_0x9","index":0,"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]`}},
		{"ollama final", ollamaFinalChunk, chunkWant{Role: `"assistant"`, Content: `""`, FinishReason: "stop"}},
		{"ollama usage", ollamaUsageChunk, chunkWant{NoChoices: true, HasUsage: true, Usage: Usage{PromptTokens: 26, CompletionTokens: 9, TotalTokens: 35}}},
		{"llama.cpp content", llamaCppChunk, chunkWant{Content: `" world"`}},
		{"llama.cpp final", llamaCppFinalChunk, chunkWant{FinishReason: "stop", HasUsage: true, Usage: Usage{PromptTokens: 9, CompletionTokens: 12, TotalTokens: 21}}},
		{"whitespace everywhere", llamaCppWhitespace, chunkWant{Content: `"x"`}},
		{"empty object", `{}`, chunkWant{}},
		{"null choices", `{"choices":null}`, chunkWant{}},
		{"null delta", `{"choices":[{"delta":null,"finish_reason":"stop"}]}`, chunkWant{FinishReason: "stop"}},
		{"null usage", `{"choices":[],"usage":null}`, chunkWant{NoChoices: true}},
		{"empty usage", `{"usage":{}}`, chunkWant{HasUsage: true}},
		{"null token counts", `{"usage":{"prompt_tokens":null,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":null},"prompt_cache_hit_tokens":5}}`,
			chunkWant{HasUsage: true, Usage: Usage{CompletionTokens: 3, CachedTokens: 5}}},
		{"details win over cache hits in any order", `{"usage":{"prompt_tokens_details":{"cached_tokens":2},"prompt_cache_hit_tokens":5}}`,
			chunkWant{HasUsage: true, Usage: Usage{CachedTokens: 2}}},
		{"null error", `{"error":null,"choices":[]}`, chunkWant{NoChoices: true}},
		{"string error", `{"error":"model not found"}`, chunkWant{Error: `"model not found"`}},
		{"null tool calls", `{"choices":[{"delta":{"tool_calls":null}}]}`, chunkWant{}},
		{"empty tool calls", `{"choices":[{"delta":{"tool_calls":[]}}]}`, chunkWant{ToolCalls: `[]`}},
		{"reasoning_content wins over reasoning", `{"choices":[{"delta":{"reasoning":"b","reasoning_content":"a"}}]}`, chunkWant{Reasoning: `"a"`}},
		{"reasoning when reasoning_content is null", `{"choices":[{"delta":{"reasoning_content":null,"reasoning":"b"}}]}`, chunkWant{Reasoning: `"b"`}},
		{"only the first choice", `{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"},"finish_reason":"stop"}]}`, chunkWant{Content: `"a"`}},
		{"last duplicate wins", `{"choices":[{"delta":{"content":"a","content":"b"}}]}`, chunkWant{Content: `"b"`}},
		{"duplicate choices", `{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}],"choices":[]}`, chunkWant{NoChoices: true}},
		{"escaped finish reason kept raw", `{"choices":[{"finish_reason":"st\u006fp"}]}`, chunkWant{FinishReason: `st\u006fp`}},
		{"unknown members of every type", `{"x":[1,{"y":[true,false,null]},-2.5e3],"choices":[{"delta":{"content":"a","z":{"w":[]}},"logprobs":{"content":[{"token":"a","logprob":-0.1,"bytes":[97]}]}}]}`, chunkWant{Content: `"a"`}},
		{"escaped key is not matched", `{"choices":[{"delta":{"c\u006fntent":"a"}}]}`, chunkWant{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.True(t, json.Valid([]byte(tt.in)), "the test case itself")
			in := []byte(tt.in)
			var c Chunk
			c.Content = []byte("stale") // ParseChunk resets c
			require.NoError(t, ParseChunk(in, &c))
			require.Equal(t, tt.want, chunkGot(&c))
			checkSpans(t, in, c.Role, c.Content, c.Reasoning, c.ToolCalls, c.Error)
		})
	}
}

func TestParseChunkMalformed(t *testing.T) {
	valid := openAIContentChunk
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"whitespace", " \n"},
		{"done sentinel", "[DONE]"},
		{"null", "null"},
		{"array", "[]"},
		{"string", `"chunk"`},
		{"truncated", valid[:len(valid)-1]},
		{"truncated in string", valid[:strings.Index(valid, "Hello")+3]},
		{"trailing garbage", valid + "x"},
		{"two objects", valid + valid},
		{"trailing comma", `{"choices":[],}`},
		{"bad escape in content", `{"choices":[{"delta":{"content":"a\qb"}}]}`},
		{"short unicode escape", `{"choices":[{"delta":{"content":"\u12"}}]}`},
		{"raw newline in content", "{\"choices\":[{\"delta\":{\"content\":\"a\nb\"}}]}"},
		{"bad escape in an unknown member", `{"id":"\x","choices":[]}`},
		{"bad number in an unknown member", `{"created":01,"choices":[]}`},
		{"bad value in a later choice", `{"choices":[{"delta":{}},{"delta":tru}]}`},
		{"content is a number", `{"choices":[{"delta":{"content":1}}]}`},
		{"content is an array", `{"choices":[{"delta":{"content":[{"type":"text","text":"a"}]}}]}`},
		{"role is a bool", `{"choices":[{"delta":{"role":true}}]}`},
		{"reasoning is an object", `{"choices":[{"delta":{"reasoning":{}}}]}`},
		{"tool calls is an object", `{"choices":[{"delta":{"tool_calls":{"index":0}}}]}`},
		{"finish reason is a number", `{"choices":[{"finish_reason":1}]}`},
		{"choice is not an object", `{"choices":["a"]}`},
		{"choices is an object", `{"choices":{}}`},
		{"delta is a string", `{"choices":[{"delta":"x"}]}`},
		{"usage is an array", `{"usage":[]}`},
		{"negative tokens", `{"usage":{"prompt_tokens":-1}}`},
		{"fractional tokens", `{"usage":{"completion_tokens":1.5}}`},
		{"exponent tokens", `{"usage":{"total_tokens":1e3}}`},
		{"string tokens", `{"usage":{"total_tokens":"3"}}`},
		{"overflowing tokens", `{"usage":{"total_tokens":9223372036854775808}}`},
		{"details is a number", `{"usage":{"prompt_tokens_details":0}}`},
		{"bad cached tokens", `{"usage":{"prompt_tokens_details":{"cached_tokens":-5}}}`},
		{"nullx", `{"usage":nullx}`},
		{"unquoted key", `{choices:[]}`},
		{"missing colon", `{"choices" []}`},
		{"deep nesting", `{"x":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Chunk{Content: []byte("stale")}
			require.ErrorIs(t, ParseChunk([]byte(tt.in), &c), ErrMalformedChunk)
			require.Equal(t, Chunk{}, c)
		})
	}
	t.Run("every truncation of every chunk", func(t *testing.T) {
		for _, in := range []string{openAIRoleChunk, openAIUsageChunk, openAIToolCallStart, openAIErrorFrame, deepSeekFinalChunk, llamaCppFinalChunk} {
			for i := range len(in) {
				var c Chunk
				require.Error(t, ParseChunk([]byte(in[:i]), &c), "%q", in[:i])
			}
		}
	})
}

func TestParseCompletion(t *testing.T) {
	type want struct {
		Content, Reasoning, ToolCalls, FinishReason, Error string
		Usage                                              Usage
		HasUsage                                           bool
	}
	got := func(c *Completion) want {
		return want{string(c.Content), string(c.Reasoning), string(c.ToolCalls), string(c.FinishReason), string(c.Error), c.Usage, c.HasUsage}
	}
	tests := []struct {
		name string
		in   string
		want want
	}{
		{"openai", openAICompletionBody, want{
			Content:      `"The image shows a wooden boardwalk\nextending through a \"lush\" green field."`,
			FinishReason: "stop", HasUsage: true, Usage: Usage{PromptTokens: 1117, CompletionTokens: 46, TotalTokens: 1163},
		}},
		{"tool calls", `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`,
			want{ToolCalls: `[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]`, FinishReason: "tool_calls", HasUsage: true, Usage: Usage{PromptTokens: 5, CompletionTokens: 7, TotalTokens: 12}}},
		{"vllm reasoning", `{"id":"chatcmpl-2","object":"chat.completion","model":"Qwen/QwQ-32B","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"First, ...","content":"42","tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":10,"total_tokens":60,"completion_tokens":50,"prompt_tokens_details":null},"prompt_logprobs":null}`,
			want{Content: `"42"`, Reasoning: `"First, ..."`, ToolCalls: `[]`, FinishReason: "stop", HasUsage: true, Usage: Usage{PromptTokens: 10, CompletionTokens: 50, TotalTokens: 60}}},
		{"deepseek", `{"id":"x","object":"chat.completion","model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":"Greet."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":20,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":8},"completion_tokens_details":{"reasoning_tokens":15},"prompt_cache_hit_tokens":8,"prompt_cache_miss_tokens":1}}`,
			want{Content: `"Hi"`, Reasoning: `"Greet."`, FinishReason: "stop", HasUsage: true, Usage: Usage{PromptTokens: 9, CompletionTokens: 20, TotalTokens: 29, CachedTokens: 8, ReasoningTokens: 15}}},
		{"ollama reasoning", `{"id":"chatcmpl-3","object":"chat.completion","created":1741000000,"model":"qwen3","system_fingerprint":"fp_ollama","choices":[{"index":0,"message":{"role":"assistant","content":"4","reasoning":"2+2"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":30,"total_tokens":41}}`,
			want{Content: `"4"`, Reasoning: `"2+2"`, FinishReason: "stop", HasUsage: true, Usage: Usage{PromptTokens: 11, CompletionTokens: 30, TotalTokens: 41}}},
		{"error body", `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			want{Error: `{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}`}},
		{"delta is ignored", `{"choices":[{"delta":{"content":"x"},"message":{"content":"y"}}]}`, want{Content: `"y"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.True(t, json.Valid([]byte(tt.in)), "the test case itself")
			in := []byte(tt.in)
			var c Completion
			require.NoError(t, ParseCompletion(in, &c))
			require.Equal(t, tt.want, got(&c))
			checkSpans(t, in, c.Content, c.Reasoning, c.ToolCalls, c.Error)
		})
	}
	for _, in := range []string{"", "{", `{"choices":[{"message":{"content":1}}]}`, openAICompletionBody + "}", `{"usage":{"prompt_tokens":-3}}`} {
		c := Completion{Content: []byte("stale")}
		require.ErrorIs(t, ParseCompletion([]byte(in), &c), ErrMalformedCompletion, "%q", in)
		require.Equal(t, Completion{}, c)
	}
	for i := range len(openAICompletionBody) {
		var c Completion
		require.Error(t, ParseCompletion([]byte(openAICompletionBody[:i]), &c))
	}
}

// checkSpans asserts that each non-nil span is valid JSON and lies inside in.
func checkSpans(t *testing.T, in []byte, spans ...[]byte) {
	t.Helper()
	for _, s := range spans {
		if s == nil {
			continue
		}
		require.True(t, json.Valid(s), "span %q", s)
		require.True(t, isSubslice(in, s), "span %q is not in the input", s)
	}
}

// isSubslice reports whether s lies within the memory of in.
func isSubslice(in, s []byte) bool {
	if len(s) == 0 || len(in) == 0 {
		return len(s) == 0
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(in)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return p >= start && p+uintptr(len(s)) <= start+uintptr(len(in))
}

// refChunk extracts what ParseChunk reads with encoding/json, for valid
// inputs that ParseChunk accepts and whose keys need no unescaping. Maps
// keep key matching exact and let the last of duplicate keys win.
func refChunk(t *testing.T, in []byte) chunkWant {
	t.Helper()
	obj := func(raw json.RawMessage) map[string]json.RawMessage {
		if raw == nil || string(raw) == "null" {
			return nil
		}
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &m))
		return m
	}
	str := func(raw json.RawMessage) string {
		if raw == nil || string(raw) == "null" {
			return ""
		}
		return string(raw)
	}
	num := func(raw json.RawMessage) int64 {
		var n int64
		if raw != nil && string(raw) != "null" {
			require.NoError(t, json.Unmarshal(raw, &n))
		}
		return n
	}
	top := obj(in)
	var w chunkWant
	if raw := top["choices"]; raw != nil && string(raw) != "null" {
		var choices []json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &choices))
		w.NoChoices = len(choices) == 0
		if len(choices) > 0 {
			choice := obj(choices[0])
			delta := obj(choice["delta"])
			w.Role, w.Content, w.ToolCalls = str(delta["role"]), str(delta["content"]), str(delta["tool_calls"])
			if w.Reasoning = str(delta["reasoning_content"]); w.Reasoning == "" {
				w.Reasoning = str(delta["reasoning"])
			}
			if fr := str(choice["finish_reason"]); fr != "" {
				w.FinishReason = fr[1 : len(fr)-1]
			}
		}
	}
	if raw := top["usage"]; raw != nil && string(raw) != "null" {
		u := obj(raw)
		w.HasUsage = true
		w.Usage = Usage{
			PromptTokens:     num(u["prompt_tokens"]),
			CompletionTokens: num(u["completion_tokens"]),
			TotalTokens:      num(u["total_tokens"]),
			CachedTokens:     num(u["prompt_cache_hit_tokens"]),
			ReasoningTokens:  num(obj(u["completion_tokens_details"])["reasoning_tokens"]),
		}
		if ct := obj(u["prompt_tokens_details"])["cached_tokens"]; ct != nil && string(ct) != "null" {
			w.Usage.CachedTokens = num(ct)
		}
	}
	w.Error = str(top["error"])
	return w
}

func FuzzParseChunk(f *testing.F) {
	for _, s := range []string{
		openAIRoleChunk, openAIContentChunk, openAIFinishChunk, openAIUsageChunk, openAIToolCallStart,
		openAIToolCallArgs, openAIToolCallTwo, openAIToolCallEnd, openAIErrorFrame, vllmReasoningChunk,
		vllmFinalChunk, deepSeekReasoningChunk, deepSeekFinalChunk, deepSeekOldUsage, ollamaChunk,
		ollamaThinkingChunk, ollamaToolCallChunk, ollamaUsageChunk, llamaCppChunk, llamaCppFinalChunk,
		llamaCppWhitespace, "[DONE]", "", "{}", `{"choices":[{"delta":{"content":"a\qb"}}]}`,
		`{"usage":{"prompt_tokens":-1}}`, `{"choices":[{"delta":null}],"usage":null,"error":null}`,
		`{"choices":[{"delta":{"content":"a","content":null}}],"choices":[{"finish_reason":"x"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var c Chunk
		err := ParseChunk(in, &c)
		if !json.Valid(in) {
			require.Error(t, err)
			return
		}
		if err != nil {
			require.ErrorIs(t, err, ErrMalformedChunk)
			require.Equal(t, Chunk{}, c)
			return
		}
		checkSpans(t, in, c.Role, c.Content, c.Reasoning, c.ToolCalls, c.Error)
		if c.FinishReason != nil {
			require.True(t, isSubslice(in, c.FinishReason) || len(c.FinishReason) == 0)
			require.True(t, ValidJSONString(append(append([]byte{'"'}, c.FinishReason...), '"')))
		}
		if !bytes.Contains(in, []byte(`\`)) {
			require.Equal(t, refChunk(t, in), chunkGot(&c))
		}
	})
}

func BenchmarkParseChunk(b *testing.B) {
	for _, bc := range []struct{ name, in string }{
		{"content", openAIContentChunk},
		{"tool_call", openAIToolCallStart},
		{"usage", openAIUsageChunk},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := []byte(bc.in)
			var c Chunk
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if err := ParseChunk(in, &c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseCompletion(b *testing.B) {
	in := []byte(openAICompletionBody)
	var c Completion
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseCompletion(in, &c); err != nil {
			b.Fatal(err)
		}
	}
}

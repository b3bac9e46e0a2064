package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/tokens"
)

func TestChatCompletion(t *testing.T) {
	h := newHarness(t, Config{})
	for _, tc := range []struct {
		name               string
		body               map[string]any
		content, reasoning int
		finish             string
	}{
		{name: "default length", body: chat("Hello"), content: 64, finish: "stop"},
		{name: "max_tokens", body: chat("Hello", "max_tokens", 10), content: 10, finish: "stop"},
		{name: "max_completion_tokens", body: chat("Hello", "max_completion_tokens", 7), content: 7, finish: "stop"},
		{name: "tokens directive", body: chat("Hello [[sim:tokens=5]]", "max_tokens", 100), content: 5, finish: "stop"},
		{name: "zero tokens", body: chat("[[sim:tokens=0]]"), content: 0, finish: "stop"},
		{name: "capped", body: chat("[[sim:tokens=50]]", "max_tokens", 20), content: 20, finish: "length"},
		{name: "reasoning", body: chat("[[sim:reasoning=5]]", "max_tokens", 20), reasoning: 5, content: 15, finish: "stop"},
		{name: "reasoning and tokens", body: chat("[[sim:reasoning=5]] [[sim:tokens=3]]"), reasoning: 5, content: 3, finish: "stop"},
		{name: "reasoning spends all", body: chat("[[sim:reasoning=30]]", "max_tokens", 20), reasoning: 20, finish: "length"},
		{name: "reasoning exactly all", body: chat("[[sim:reasoning=20]]", "max_tokens", 20), reasoning: 20, finish: "length"},
		{name: "reasoning off", body: chat("[[sim:reasoning=5]]", "max_tokens", 20, "reasoning_effort", "none"), content: 20, finish: "stop"},
		{name: "reasoning high", body: chat("[[sim:reasoning=5]] [[sim:tokens=2]]", "reasoning_effort", "high"), reasoning: 5, content: 2, finish: "stop"},
		{name: "finish forced", body: chat("[[sim:tokens=3]][[sim:finish=content_filter]]"), content: 3, finish: "content_filter"},
		{name: "later directive wins", body: chat("[[sim:tokens=3]] and [[sim:tokens=4]]"), content: 4, finish: "stop"},
		{name: "array content", body: map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "Look"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:,"}},
			map[string]any{"type": "text", "text": "[[sim:tokens=6]]"},
		}}}}, content: 6, finish: "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := h.postJSON("/v1/chat/completions", tc.body, http.StatusOK)
			require.Equal(t, "chat.completion", v["object"])
			require.True(t, strings.HasPrefix(v["id"].(string), "chatcmpl-sim-"))
			require.Equal(t, tc.body["model"], v["model"])
			require.NotZero(t, num(t, v, "created"))
			choice := dig(t, v, "choices.0").(map[string]any)
			require.Equal(t, 0, num(t, choice, "index"))
			require.Nil(t, choice["logprobs"])
			require.Contains(t, choice, "logprobs")
			require.Equal(t, tc.finish, choice["finish_reason"])
			msg := choice["message"].(map[string]any)
			require.Equal(t, "assistant", msg["role"])
			content := msg["content"].(string)
			require.Equal(t, tc.content, tokens.Count(content), "%q", content)
			if tc.reasoning > 0 {
				require.Equal(t, tc.reasoning, tokens.Count(msg["reasoning_content"].(string)))
				require.Equal(t, tc.reasoning, num(t, v, "usage.completion_tokens_details.reasoning_tokens"))
			} else {
				require.NotContains(t, msg, "reasoning_content")
			}
			require.NotContains(t, msg, "tool_calls")
			require.Equal(t, promptTokens(t, tc.body), num(t, v, "usage.prompt_tokens"))
			require.Equal(t, tc.content+tc.reasoning, num(t, v, "usage.completion_tokens"))
			require.Equal(t, num(t, v, "usage.prompt_tokens")+tc.content+tc.reasoning, num(t, v, "usage.total_tokens"))
		})
	}
}

// promptTokens is tokens.CountChat of a request body as the test built it.
func promptTokens(t *testing.T, body map[string]any) int {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	var req struct {
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			Name       string          `json:"name"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(raw, &req))
	var msgs []tokens.Message
	for _, m := range req.Messages {
		var text string
		if len(m.Content) > 0 && m.Content[0] == '[' {
			var parts []struct{ Type, Text string }
			require.NoError(t, json.Unmarshal(m.Content, &parts))
			var texts []string
			for _, p := range parts {
				if p.Type == "text" {
					texts = append(texts, p.Text)
				}
			}
			text = strings.Join(texts, "\n")
		} else if len(m.Content) > 0 && string(m.Content) != "null" {
			require.NoError(t, json.Unmarshal(m.Content, &text))
		}
		tm := tokens.Message{Role: m.Role, Content: text, Name: m.Name, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			tm.ToolCalls = append(tm.ToolCalls, tokens.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		msgs = append(msgs, tm)
	}
	var tools []tokens.Tool
	for _, tl := range req.Tools {
		tools = append(tools, tokens.Tool{Name: tl.Function.Name, Description: tl.Function.Description, Parameters: tl.Function.Parameters})
	}
	return tokens.CountChat(msgs, tools)
}

func TestChatStream(t *testing.T) {
	h := newHarness(t, Config{})
	for _, tc := range []struct {
		name               string
		body               map[string]any
		usage              bool
		content, reasoning int
		finish             string
	}{
		{name: "plain", body: chat("Hi [[sim:tokens=12]]"), content: 12, finish: "stop"},
		{name: "with usage", body: chat("Hi", "max_tokens", 9, "stream_options", map[string]any{"include_usage": true}), usage: true, content: 9, finish: "stop"},
		{name: "usage off", body: chat("Hi", "max_tokens", 9, "stream_options", map[string]any{"include_usage": false}), content: 9, finish: "stop"},
		{name: "reasoning", body: chat("[[sim:reasoning=4]]", "max_tokens", 10, "stream_options", map[string]any{"include_usage": true}), usage: true, reasoning: 4, content: 6, finish: "stop"},
		{name: "reasoning cut", body: chat("[[sim:reasoning=40]]", "max_tokens", 10, "stream_options", map[string]any{"include_usage": true}), usage: true, reasoning: 10, finish: "length"},
		{name: "capped", body: chat("[[sim:tokens=40]]", "max_tokens", 10), content: 10, finish: "length"},
		{name: "empty", body: chat("[[sim:tokens=0]]", "stream_options", map[string]any{"include_usage": true}), usage: true, finish: "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := h.stream(tc.body)
			require.NoError(t, s.err)
			require.True(t, s.done)
			frames := s.frames
			id, created := frames[0]["id"], frames[0]["created"]
			for _, f := range frames {
				require.Equal(t, "chat.completion.chunk", f["object"])
				require.Equal(t, id, f["id"])
				require.Equal(t, created, f["created"])
				require.Equal(t, "sim-model", f["model"])
			}
			require.Equal(t, map[string]any{"role": "assistant", "content": ""}, delta(frames[0]))
			require.Nil(t, finishOf(frames[0]))
			n := len(frames) - 2
			if tc.usage {
				n--
			}
			tokenFrames := frames[1 : 1+n]
			var content, reasoning strings.Builder
			for _, f := range tokenFrames {
				d := delta(f)
				require.Len(t, d, 1, "one field per delta: %v", d)
				require.Nil(t, finishOf(f))
				if r, ok := d["reasoning_content"]; ok {
					require.Zero(t, content.Len(), "reasoning comes first")
					require.Equal(t, 1, tokens.Count(r.(string)), "%q", r)
					reasoning.WriteString(r.(string))
					continue
				}
				c := d["content"].(string)
				require.Equal(t, 1, tokens.Count(c), "%q", c)
				content.WriteString(c)
			}
			require.Equal(t, tc.content, tokens.Count(content.String()))
			require.Equal(t, tc.reasoning, tokens.Count(reasoning.String()))
			fin := frames[1+n]
			require.Equal(t, map[string]any{}, delta(fin))
			require.Equal(t, tc.finish, finishOf(fin))
			require.NotContains(t, fin, "usage")
			if tc.usage {
				u := frames[len(frames)-1]
				require.Equal(t, []any{}, u["choices"])
				require.Equal(t, promptTokens(t, tc.body), num(t, u, "usage.prompt_tokens"))
				require.Equal(t, n, num(t, u, "usage.completion_tokens"), "completion tokens are the token chunks")
				require.Equal(t, tc.content+tc.reasoning, n)
				require.Equal(t, num(t, u, "usage.prompt_tokens")+n, num(t, u, "usage.total_tokens"))
			}
		})
	}
}

func TestChatStreamMatchesCompletion(t *testing.T) {
	h := newHarness(t, Config{})
	body := `{"model":"m","messages":[{"role":"user","content":"Hi [[sim:reasoning=3]]"}],"max_tokens":25,"stream":%s}`
	var v map[string]any
	require.NoError(t, json.Unmarshal(readAll(t, h.post("/v1/chat/completions", strings.Replace(body, "%s", "false", 1))), &v))
	resp := h.post("/v1/chat/completions", strings.Replace(body, "%s", "true", 1))
	s := readSSE(t, resp.Body)
	resp.Body.Close()
	require.True(t, s.done)
	var content, reasoning string
	for _, f := range s.frames[1 : len(s.frames)-1] {
		d := delta(f)
		if r, ok := d["reasoning_content"].(string); ok {
			reasoning += r
		} else {
			content += d["content"].(string)
		}
	}
	// Different bodies, different seeds: the shapes agree, not the words.
	msg := dig(t, v, "choices.0.message").(map[string]any)
	require.Equal(t, tokens.Count(msg["content"].(string)), tokens.Count(content))
	require.Equal(t, tokens.Count(msg["reasoning_content"].(string)), tokens.Count(reasoning))
}

func TestChatDeterministic(t *testing.T) {
	h := newHarness(t, Config{})
	body := `{"model":"m","messages":[{"role":"user","content":"Tell me [[sim:reasoning=4]]"}],"max_tokens":40}`
	first := readAll(t, h.post("/v1/chat/completions", body))
	second := readAll(t, h.post("/v1/chat/completions", body))
	require.Equal(t, string(first), string(second))
	other := readAll(t, h.post("/v1/chat/completions", strings.Replace(body, "Tell", "Show", 1)))
	require.NotEqual(t, string(first), string(other))

	stream := `{"model":"m","messages":[{"role":"user","content":"Tell me"}],"stream":true,"stream_options":{"include_usage":true}}`
	a := readSSE(t, h.post("/v1/chat/completions", stream).Body)
	b := readSSE(t, h.post("/v1/chat/completions", stream).Body)
	require.Equal(t, a.raw, b.raw)

	// Another seed answers the same body differently.
	h2 := newHarness(t, Config{Seed: 99})
	seeded := readAll(t, h2.post("/v1/chat/completions", body))
	require.NotEqual(t, string(first), string(seeded))
}

func TestChatLatency(t *testing.T) {
	h := newHarness(t, Config{})
	start := time.Now()
	s, _ := h.stream(chat("[[sim:ttft_ms=60]] [[sim:itl_ms=10]] [[sim:tokens=6]]"))
	require.True(t, s.done)
	require.GreaterOrEqual(t, time.Since(start), 60*time.Millisecond+5*10*time.Millisecond)

	start = time.Now()
	h.postJSON("/v1/chat/completions", chat("[[sim:ttft_ms=50]] [[sim:tokens=2]]"), http.StatusOK)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)

	slow := newHarness(t, Config{TTFT: 40 * time.Millisecond, ITL: 5 * time.Millisecond})
	start = time.Now()
	s, _ = slow.stream(chat("[[sim:tokens=5]]"))
	require.True(t, s.done)
	require.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond+4*5*time.Millisecond)

	// A request's directives override the configured latencies.
	sluggish := newHarness(t, Config{TTFT: 10 * time.Second, ITL: 10 * time.Second})
	start = time.Now()
	s, _ = sluggish.stream(chat("[[sim:tokens=5]] [[sim:ttft_ms=0]] [[sim:itl_ms=0]]"))
	require.True(t, s.done)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestChatStreamFlushesEachFrame(t *testing.T) {
	h := newHarness(t, Config{})
	body := chat("[[sim:tokens=2]] [[sim:itl_ms=500]]", "stream", true)
	resp := h.post("/v1/chat/completions", body)
	defer resp.Body.Close()
	// The role frame and the first token arrive well before the stream ends.
	start := time.Now()
	buf := make([]byte, 4096)
	got := ""
	for strings.Count(got, "\n\n") < 2 {
		n, err := resp.Body.Read(buf)
		require.NoError(t, err)
		got += string(buf[:n])
	}
	require.Less(t, time.Since(start), 450*time.Millisecond)
	s := readSSE(t, resp.Body)
	require.True(t, s.done)
}

func TestChatReplyDirective(t *testing.T) {
	h := newHarness(t, Config{})
	for _, tc := range []struct {
		name, text, want string
		extra            []any
	}{
		{name: "exact text", text: "Hi [[sim:reply=Hello, world.]]", want: "Hello, world."},
		{name: "spaces kept", text: "[[sim:reply= two  spaces ]]", want: " two  spaces "},
		{name: "later wins", text: "[[sim:reply=first]] [[sim:reply=second]]", want: "second"},
		{name: "beats a json format", text: `[[sim:reply={"pass":true,"reason":"ok"}]]`, want: `{"pass":true,"reason":"ok"}`,
			extra: []any{"response_format", map[string]any{"type": "json_object"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := h.postJSON("/v1/chat/completions", chat(tc.text, tc.extra...), http.StatusOK)
			require.Equal(t, tc.want, dig(t, v, "choices.0.message.content"))
			require.Equal(t, "stop", dig(t, v, "choices.0.finish_reason"))
		})
	}
	t.Run("without a value", func(t *testing.T) {
		h.postJSON("/v1/chat/completions", chat("[[sim:reply]]"), http.StatusBadRequest)
	})
}

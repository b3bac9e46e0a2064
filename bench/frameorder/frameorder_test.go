package frameorder

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
)

// goldenDir holds the gateway's recorded transcripts.
var goldenDir = filepath.Join("..", "..", "proxy", "testdata", "golden")

// checkSplit checks body whole and fed one byte at a time through a
// scanner, requires both to agree, and returns the outcome.
func checkSplit(t *testing.T, w Wire, body []byte) Outcome {
	t.Helper()
	whole := CheckStream(w, body)

	var c Checker
	c.Reset(w)
	sc := codec.NewSSEScanner(0)
	drain := func(next func() (codec.SSEEvent, bool, error)) {
		for {
			ev, ok, err := next()
			if err != nil {
				c.ScanError(err)
				return
			}
			if !ok {
				return
			}
			c.Event(ev)
		}
	}
	for i := range body {
		sc.Feed(body[i : i+1])
		drain(sc.Next)
	}
	drain(sc.Finish)
	split := c.End()
	require.Equal(t, whole, split, "whole and byte-split scans disagree")
	require.Equal(t, split, c.End(), "End is not idempotent")
	return whole
}

// transcript is one golden file: its wire, case, status line and body.
type transcript struct {
	name, kase, status, contentType string
	wire                            Wire
	body                            []byte
}

func readGolden(t *testing.T) []transcript {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(goldenDir, "*_sse_*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no golden transcripts under %s", goldenDir)
	var out []transcript
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		require.NoError(t, err)
		name := strings.TrimSuffix(filepath.Base(p), ".txt")
		tr := transcript{name: name}
		var prefix string
		for _, c := range []struct {
			prefix string
			wire   Wire
		}{{"openai_usage_sse_", OpenAIUsage}, {"openai_sse_", OpenAI}, {"v1_sse_", V1}, {"v2_sse_", V2},
			{"anthropic_sse_", Anthropic}, {"responses_sse_", Responses}} {
			if strings.HasPrefix(name, c.prefix) {
				prefix, tr.wire = c.prefix, c.wire
				break
			}
		}
		require.NotEmpty(t, prefix, "%s: unknown wire", name)
		tr.kase = strings.TrimPrefix(name, prefix)
		header, body, ok := strings.Cut(string(raw), "\n\n")
		require.True(t, ok, "%s: no header", name)
		for line := range strings.SplitSeq(header, "\n") {
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "status":
				tr.status = v
			case "content-type":
				tr.contentType = v
			}
		}
		tr.body = []byte(body)
		out = append(out, tr)
	}
	return out
}

// goldenSuccess are the recorded cases that complete.
var goldenSuccess = map[string]bool{
	"text": true, "tools": true, "parallel_tools": true, "reasoning": true, "length": true,
	"content_filter": true, "no_done": true, "fail_first": true,
}

// goldenFailure maps the recorded cases that fail after the stream opened
// to the code the README's fault table gives them: a connection cut is an
// upstream_overloaded ending, silence past the idle bound an
// upstream_timeout ending, a chunk that is not JSON an upstream_error
// ending.
var goldenFailure = map[string]string{
	"drop_after":       "upstream_overloaded",
	"stall_after":      "upstream_timeout",
	"slow_first_token": "upstream_timeout",
	"malformed_after":  "upstream_error",
}

// anthropicFailure is goldenFailure as Anthropic's error types say it.
var anthropicFailure = map[string]string{
	"drop_after":       "overloaded_error",
	"stall_after":      "timeout_error",
	"slow_first_token": "timeout_error",
	"malformed_after":  "api_error",
}

func TestGoldenTranscripts(t *testing.T) {
	streams := 0
	for _, tr := range readGolden(t) {
		if tr.status != "OK" {
			require.Equal(t, "application/json", tr.contentType, "%s: a refusal is a JSON envelope", tr.name)
			continue
		}
		streams++
		t.Run(tr.name, func(t *testing.T) {
			require.Equal(t, "text/event-stream", tr.contentType)
			out := checkSplit(t, tr.wire, tr.body)
			require.Empty(t, out.Violation)
			switch {
			case goldenSuccess[tr.kase]:
				require.True(t, out.Complete)
				require.False(t, out.Failed)
				require.Empty(t, out.ErrorCode)
				require.Positive(t, out.Content+out.ToolCalls)
			case goldenFailure[tr.kase] != "":
				require.False(t, out.Complete)
				require.True(t, out.Failed)
				if tr.wire == V1 {
					require.Empty(t, out.ErrorCode, "v1 carries no error frame")
				} else if tr.wire == Anthropic {
					require.Equal(t, anthropicFailure[tr.kase], out.ErrorCode)
				} else {
					require.Equal(t, goldenFailure[tr.kase], out.ErrorCode)
				}
			default:
				require.Failf(t, "unclassified transcript", "%s answered 200: add it to goldenSuccess or goldenFailure", tr.name)
			}
		})
	}
	require.Greater(t, streams, 40)
}

func TestGoldenCounts(t *testing.T) {
	byName := map[string]Outcome{}
	for _, tr := range readGolden(t) {
		if tr.status == "OK" {
			byName[tr.name] = CheckStream(tr.wire, tr.body)
		}
	}
	text := byName["v1_sse_text"]
	require.Equal(t, Outcome{Complete: true, Frames: 8, Content: 4}, text)
	require.Equal(t, Outcome{Complete: true, Frames: 7, Content: 4}, byName["openai_sse_text"])
	require.Equal(t, Outcome{Complete: true, Frames: 6, Content: 4}, byName["v2_sse_text"])
	require.Equal(t, Outcome{Complete: true, Frames: 7, Content: 2, Reasoning: 3}, byName["v2_sse_reasoning"])
	require.Equal(t, Outcome{Complete: true, Frames: 16, ToolCalls: 12}, byName["openai_usage_sse_parallel_tools"])
	require.Equal(t, Outcome{Failed: true, ErrorCode: "upstream_timeout", Frames: 2}, byName["v2_sse_slow_first_token"])
	require.Equal(t, Outcome{Failed: true, Frames: 3, Content: 2}, byName["v1_sse_drop_after"])
}

func TestGoldenSplitTranscripts(t *testing.T) {
	for name, w := range map[string]Wire{"split_v1": V1, "split_v2": V2, "split_openai": OpenAI, "split_openai_usage": OpenAIUsage} {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(goldenDir, name+".txt"))
			require.NoError(t, err)
			out := checkSplit(t, w, raw)
			require.True(t, out.OK(), "%+v", out)
			require.Equal(t, 2, out.Content)
			require.Equal(t, 1, out.ToolCalls)
		})
	}
}

// Hand-made frames.
const (
	head    = `"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"mira"`
	gw      = `"gw":{"request_id":"req-1","routed_tier":"mira","reasoning_effort":"none"}`
	primer  = `{` + head + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	primer1 = `{` + head + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],` + gw + `}`
	hello   = `{` + head + `,"choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}`
	tool0   = `{` + head + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"tc_1","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}`
	args0   = `{` + head + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null}]}`
	finish  = `{` + head + `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`
	usage   = `{` + head + `,"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"cost":{"tier":"mira","amount":0.000001,"currency":"USD"}}}`
	errOAI  = `{"error":{"message":"The model's stream ended before the reply was complete.","type":"server_error","param":null,"code":"upstream_overloaded"}}`
	done    = `[DONE]`
)

// sse renders data frames as an unnamed-event stream.
func sse(frames ...string) []byte {
	var b strings.Builder
	for _, f := range frames {
		b.WriteString("data: " + f + "\n\n")
	}
	return []byte(b.String())
}

// ev renders one named event.
func ev(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

func events(evs ...string) []byte { return []byte(strings.Join(evs, "")) }

const (
	v2StartData = `{"id":"chatcmpl-1","created":1700000000,"model":"kavi","request_id":"req-1","routing":{"tier":"kavi","mode":"explicit","reasoning_effort":"high"}}`
	v2Think     = `{"content":"Hmm"}`
	v2Hello     = `{"content":"Hello"}`
	v2Tool      = `{"tool_calls":[{"index":0,"id":"tc_1","type":"function","function":{"name":"f","arguments":""}}]}`
	v2Finish    = `{"finish_reason":"stop","usage":{"input_tokens":3,"output_tokens":1,"cost":{"tier":"kavi","amount":0.000001,"currency":"USD"}}}`
	v2Error     = `{"code":"upstream_timeout","message":"The model stopped sending before the reply was complete.","request_id":"req-1"}`
)

func replace(s, old, new string) string { return strings.Replace(s, old, new, 1) }

func TestValidStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		wire Wire
		body []byte
		want Outcome
	}{
		{"v1 text", V1, sse(primer1, hello, hello, finish, usage, done), Outcome{Complete: true, Frames: 6, Content: 2}},
		{"v1 no deltas", V1, sse(primer1, finish, usage, done), Outcome{Complete: true, Frames: 4}},
		{"v1 usage frame with gw", V1, sse(primer1, hello, finish, replace(usage, `"choices":[]`, `"choices":[],"gw":{"memory_capture":{"count":1}}`), done),
			Outcome{Complete: true, Frames: 5, Content: 1}},
		{"v1 tools", V1, sse(primer1, tool0, args0, finish, usage, done), Outcome{Complete: true, Frames: 6, ToolCalls: 2}},
		{"v1 stops after primer", V1, sse(primer1), Outcome{Failed: true, Frames: 1}},
		{"v1 stops mid-stream", V1, sse(primer1, hello, hello), Outcome{Failed: true, Frames: 3, Content: 2}},
		{"openai text", OpenAI, sse(primer, hello, finish, done), Outcome{Complete: true, Frames: 4, Content: 1}},
		{"openai usage", OpenAIUsage, sse(primer, hello, finish, usage, done), Outcome{Complete: true, Frames: 5, Content: 1}},
		{"openai error", OpenAI, sse(primer, hello, errOAI), Outcome{Failed: true, ErrorCode: "upstream_overloaded", Frames: 3, Content: 1}},
		{"openai unregistered code", OpenAIUsage, sse(primer, replace(errOAI, "upstream_overloaded", "weird_code")),
			Outcome{Failed: true, ErrorCode: "weird_code", Frames: 2}},
		{"openai event: message", OpenAI, events(ev("message", primer), ev("message", finish), ev("message", done)), Outcome{Complete: true, Frames: 3}},
		{"crlf and comments", OpenAI, []byte(": keep-alive\r\ndata: " + primer + "\r\n\r\n:\r\ndata: " + finish + "\r\n\r\ndata: [DONE]\r\n\r\n"),
			Outcome{Complete: true, Frames: 3}},
		{"upstream with reasoning and a usage frame without cost", Upstream,
			sse(primer, replace(hello, `"content":"Hello"`, `"reasoning_content":"hmm"`), hello, finish,
				replace(usage, `,"cost":{"tier":"mira","amount":0.000001,"currency":"USD"}`, ""), done),
			Outcome{Complete: true, Frames: 6, Content: 1}},
		{"upstream without usage", Upstream, sse(primer, hello, finish, done), Outcome{Complete: true, Frames: 4, Content: 1}},
		{"v2 text", V2, events(ev("start", v2StartData), ev("reasoning", v2Think), ev("delta", v2Hello), ev("finish", v2Finish)),
			Outcome{Complete: true, Frames: 4, Content: 1, Reasoning: 1}},
		{"v2 tools", V2, events(ev("start", v2StartData), ev("delta", v2Tool), ev("finish", replace(v2Finish, "stop", "tool_calls"))),
			Outcome{Complete: true, Frames: 3, ToolCalls: 1}},
		{"v2 error without delta", V2, events(ev("start", v2StartData), ev("error", v2Error)),
			Outcome{Failed: true, ErrorCode: "upstream_timeout", Frames: 2}},
		{"v2 error after reasoning", V2, events(ev("start", v2StartData), ev("reasoning", v2Think), ev("error", v2Error)),
			Outcome{Failed: true, ErrorCode: "upstream_timeout", Frames: 3, Reasoning: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, checkSplit(t, tc.wire, tc.body))
		})
	}
}

func TestViolations(t *testing.T) {
	for _, tc := range []struct {
		name string
		wire Wire
		body []byte
		want string // the whole violation
	}{
		// chunk wires
		{"upstream: a frame after [DONE]", Upstream, sse(primer, hello, finish, done, hello), "frame 5: a frame after [DONE]"},
		{"upstream: truncated", Upstream, sse(primer, hello), "after frame 2: the stream ended without [DONE] or an error frame (silent truncation)"},
		{"upstream: an empty delta", Upstream, sse(primer, replace(hello, `"content":"Hello"`, ""), finish, done),
			"frame 2: a delta carries neither content nor tool_calls"},
		{"missing primer", V1, sse(hello, finish, usage, done), "frame 1: the first frame is not the role primer"},
		{"missing primer openai", OpenAI, sse(finish, done), "frame 1: the first frame is not the role primer"},
		{"gw on the openai route", OpenAI, sse(primer1, hello, finish, done), "frame 1: a gw block on the OpenAI route"},
		{"gw on the openai usage route", OpenAIUsage, sse(primer, hello, finish, replace(usage, `"choices":[]`, `"choices":[],`+gw), done),
			"frame 4: a gw block on the OpenAI route"},
		{"v1 primer without gw", V1, sse(primer, hello, finish, usage, done), "frame 1: the role primer carries no gw block"},
		{"v1 gw without routed_tier", V1, sse(replace(primer1, `"routed_tier":"mira",`, ""), finish, usage, done),
			"frame 1: the gw block lacks request_id, routed_tier or reasoning_effort"},
		{"primer role", OpenAI, sse(replace(primer, `"assistant"`, `"user"`), finish, done), `frame 1: the role primer's role is not "assistant"`},
		{"primer content", OpenAI, sse(replace(primer, `"content":""`, `"content":"Hi"`), finish, done), `frame 1: the role primer's content is not ""`},
		{"second primer", OpenAI, sse(primer, hello, primer, finish, done), "frame 3: a second role primer"},
		{"content and tool_calls", V1, sse(primer1, replace(tool0, `"delta":{`, `"delta":{"content":"x",`), finish, usage, done),
			"frame 2: a delta carries both content and tool_calls"},
		{"empty delta", OpenAI, sse(primer, replace(hello, `"content":"Hello"`, ""), finish, done), "frame 2: a delta carries neither content nor tool_calls"},
		{"two finish frames", V1, sse(primer1, hello, finish, finish, usage, done), "frame 4: a second finish frame"},
		{"finish with content", OpenAI, sse(primer, replace(finish, `"delta":{}`, `"delta":{"content":"x"}`), done),
			"frame 2: the finish frame's delta is not an empty object"},
		{"finish with usage", OpenAIUsage, sse(primer, replace(finish, `"finish_reason":"stop"}]`, `"finish_reason":"stop"}],"usage":{"prompt_tokens":1}`), usage, done),
			"frame 2: the finish frame carries usage"},
		{"bad finish reason", OpenAI, sse(primer, replace(finish, `"stop"`, `"eos"`), done),
			"frame 2: finish_reason is not stop, tool_calls, length or content_filter"},
		{"delta after finish", V1, sse(primer1, finish, hello, usage, done), "frame 3: a delta after the finish frame"},
		{"usage before finish", V1, sse(primer1, hello, usage, finish, done), "frame 3: a usage frame before the finish frame"},
		{"usage with choices", V1, sse(primer1, finish, replace(usage, `"choices":[]`, `"choices":[{"index":0,"delta":{}}]`), done),
			"frame 3: the usage frame's choices is not an empty array"},
		{"usage without cost", OpenAIUsage, sse(primer, finish, replace(usage, `,"cost":{"tier":"mira","amount":0.000001,"currency":"USD"}`, ""), done),
			"frame 3: the usage frame's usage has no cost object"},
		{"empty choices without usage", OpenAIUsage, sse(primer, finish, `{`+head+`,"choices":[]}`, done),
			"frame 3: a frame with empty choices and no usage"},
		{"two usage frames", V1, sse(primer1, finish, usage, usage, done), "frame 4: a second usage frame"},
		{"usage without include_usage", OpenAI, sse(primer, hello, finish, usage, done), "frame 4: a usage frame without stream_options.include_usage"},
		{"missing usage on v1", V1, sse(primer1, hello, finish, done), "frame 4: [DONE] without a usage frame"},
		{"missing usage on openai usage", OpenAIUsage, sse(primer, hello, finish, done), "frame 4: [DONE] without a usage frame"},
		{"done before finish", OpenAI, sse(primer, hello, done), "frame 3: [DONE] before the finish frame"},
		{"done first", OpenAI, sse(done), "frame 1: [DONE] before the role primer"},
		{"frame after done", OpenAI, sse(primer, finish, done, hello), "frame 4: a frame after [DONE]"},
		{"done after done", V1, sse(primer1, finish, usage, done, done), "frame 5: a frame after [DONE]"},
		{"changing id", OpenAI, sse(primer, replace(hello, "chatcmpl-1", "chatcmpl-2"), finish, done), "frame 2: the id changed within the stream"},
		{"changing created", V1, sse(primer1, hello, replace(finish, "1700000000", "1700000001"), usage, done), "frame 3: created changed within the stream"},
		{"wrong object", OpenAI, sse(primer, replace(hello, `"chat.completion.chunk"`, `"chat.completion"`), finish, done),
			`frame 2: object is not "chat.completion.chunk"`},
		{"missing id", OpenAI, sse(primer, replace(hello, `"id":"chatcmpl-1",`, ""), finish, done), "frame 2: a chunk without a string id"},
		{"reasoning_content in a delta", V1, sse(primer1, replace(hello, `"content":"Hello"`, `"reasoning_content":"hmm"`), finish, usage, done),
			"frame 2: reasoning_content on a chunk wire"},
		{"null reasoning_content", OpenAI, sse(primer, replace(hello, `"content":"Hello"`, `"content":"Hello","reasoning_content":null`), finish, done),
			"frame 2: reasoning_content on a chunk wire"},
		{"reasoning in a delta", OpenAI, sse(primer, replace(hello, `"content":"Hello"`, `"content":"Hello","reasoning":"hmm"`), finish, done),
			"frame 2: reasoning_content on a chunk wire"},
		{"reasoning_content nested", OpenAIUsage, sse(primer, finish, replace(usage, `"currency":"USD"`, `"currency":"USD","x":[{"reasoning_content":1}]`), done),
			"frame 3: reasoning_content on a chunk wire"},
		{"not json", V1, sse(primer1, `{"id":`, finish, usage, done), "frame 2: the data is neither [DONE] nor a JSON chat.completion.chunk"},
		{"trailing garbage", OpenAI, sse(primer, hello+"x", finish, done), "frame 2: the data is neither [DONE] nor a JSON chat.completion.chunk"},
		{"named event on a chunk wire", OpenAI, events(ev("start", primer), ev("message", finish), ev("message", done)),
			`frame 1: a named event ("start") on a chunk wire`},
		{"error frame then done", OpenAI, sse(primer, hello, errOAI, done), "frame 4: [DONE] after the error frame"},
		{"frame after error", OpenAIUsage, sse(primer, errOAI, hello), "frame 3: a frame after the error frame"},
		{"error frame first", OpenAI, sse(errOAI), "frame 1: an error frame before the role primer"},
		{"error param not null", OpenAI, sse(primer, replace(errOAI, `"param":null`, `"param":"messages"`)), "frame 2: the error object's param is not null"},
		{"error without type", OpenAI, sse(primer, replace(errOAI, `"type":"server_error",`, "")), "frame 2: the error object lacks a string code, message or type"},
		{"v1 error frame", V1, sse(primer1, hello, errOAI), "frame 3: an error frame on /api/v1/chat (a failed stream just stops)"},
		{"v1 ends after finish", V1, sse(primer1, hello, finish), "after frame 3: the stream ended after the finish frame without [DONE]"},
		{"v1 ends after usage", V1, sse(primer1, hello, finish, usage), "after frame 4: the stream ended after the finish frame without [DONE]"},
		{"v1 empty", V1, nil, "after frame 0: the stream ended before the role primer"},
		{"openai truncated", OpenAI, sse(primer, hello), "after frame 2: the stream ended without [DONE] or an error frame (silent truncation)"},
		{"openai truncated after finish", OpenAIUsage, sse(primer, hello, finish, usage),
			"after frame 4: the stream ended without [DONE] or an error frame (silent truncation)"},
		{"unterminated last event", OpenAI, []byte(string(sse(primer, finish)) + "data: [DONE]"),
			"after frame 2: the stream ended without [DONE] or an error frame (silent truncation)"},
		{"tool fragment without index", V1, sse(primer1, replace(tool0, `"index":0,"id"`, `"id"`), finish, usage, done),
			"frame 2: a tool_calls fragment without an integer index"},
		{"tool index not an integer", OpenAI, sse(primer, replace(tool0, `"index":0,"id"`, `"index":"0","id"`), finish, done),
			"frame 2: a tool_calls fragment without an integer index"},
		{"tool index fractional", OpenAI, sse(primer, replace(tool0, `"index":0,"id"`, `"index":0.5,"id"`), finish, done),
			"frame 2: a tool_calls fragment without an integer index"},
		{"tool first fragment without id", OpenAI, sse(primer, args0, finish, done), "frame 2: the first fragment of a tool call lacks id or function.name"},
		{"tool first fragment without name", V1, sse(primer1, replace(tool0, `"name":"f",`, ""), finish, usage, done),
			"frame 2: the first fragment of a tool call lacks id or function.name"},
		{"tool fragment not an object", OpenAI, sse(primer, replace(tool0, `"tool_calls":[`, `"tool_calls":[1,`), finish, done),
			"frame 2: a tool_calls fragment is not an object"},
		{"second call without head", OpenAI, sse(primer, tool0, replace(args0, `"tool_calls":[{"index":0`, `"tool_calls":[{"index":1`), finish, done),
			"frame 3: the first fragment of a tool call lacks id or function.name"},

		// v2
		{"v2 delta before start", V2, events(ev("delta", v2Hello), ev("start", v2StartData), ev("finish", v2Finish)), "frame 1: the first event is not start"},
		{"v2 second start", V2, events(ev("start", v2StartData), ev("start", v2StartData), ev("delta", v2Hello), ev("finish", v2Finish)), "frame 2: a second start event"},
		{"v2 start without routing", V2, events(ev("start", `{"request_id":"r"}`), ev("delta", v2Hello), ev("finish", v2Finish)),
			"frame 1: start lacks request_id or routing (tier, mode, reasoning_effort)"},
		{"v2 start without mode", V2, events(ev("start", replace(v2StartData, `"mode":"explicit",`, "")), ev("delta", v2Hello), ev("finish", v2Finish)),
			"frame 1: start lacks request_id or routing (tier, mode, reasoning_effort)"},
		{"v2 reasoning after delta", V2, events(ev("start", v2StartData), ev("delta", v2Hello), ev("reasoning", v2Think), ev("finish", v2Finish)),
			"frame 3: a reasoning event after a delta"},
		{"v2 two terminals", V2, events(ev("start", v2StartData), ev("delta", v2Hello), ev("finish", v2Finish), ev("error", v2Error)),
			"frame 4: an event after the terminal event"},
		{"v2 two finishes", V2, events(ev("start", v2StartData), ev("delta", v2Hello), ev("finish", v2Finish), ev("finish", v2Finish)),
			"frame 4: an event after the terminal event"},
		{"v2 delta after error", V2, events(ev("start", v2StartData), ev("error", v2Error), ev("delta", v2Hello)),
			"frame 3: an event after the terminal event"},
		{"v2 unknown event", V2, events(ev("start", v2StartData), ev("ping", `{}`), ev("delta", v2Hello), ev("finish", v2Finish)),
			`frame 2: an unknown event "ping"`},
		{"v2 unnamed event", V2, events(ev("start", v2StartData), "data: "+v2Hello+"\n\n", ev("finish", v2Finish)), "frame 2: an event without a name"},
		{"v2 done", V2, events(ev("start", v2StartData), ev("delta", v2Hello), ev("finish", v2Finish), "data: [DONE]\n\n"),
			"frame 4: an event after the terminal event"},
		{"v2 done before terminal", V2, events(ev("start", v2StartData), ev("delta", v2Hello), "data: [DONE]\n\n"), "frame 3: [DONE] on the v2 wire"},
		{"v2 truncated", V2, events(ev("start", v2StartData), ev("delta", v2Hello)),
			"after frame 2: the stream ended without a finish or error event (silent truncation)"},
		{"v2 empty", V2, nil, "after frame 0: the stream ended without a finish or error event (silent truncation)"},
		{"v2 finish without delta", V2, events(ev("start", v2StartData), ev("reasoning", v2Think), ev("finish", v2Finish)),
			"frame 3: finish without any delta"},
		{"v2 finish without usage", V2, events(ev("start", v2StartData), ev("delta", v2Hello), ev("finish", `{"finish_reason":"stop"}`)),
			"frame 3: finish lacks usage with a cost object"},
		{"v2 bad finish reason", V2, events(ev("start", v2StartData), ev("delta", v2Hello), ev("finish", replace(v2Finish, `"stop"`, `"done"`))),
			"frame 3: finish_reason is not stop, tool_calls, length or content_filter"},
		{"v2 error without request_id", V2, events(ev("start", v2StartData), ev("error", replace(v2Error, `,"request_id":"req-1"`, ""))),
			"frame 2: the error event lacks a string code, message or request_id"},
		{"v2 content and tool_calls", V2, events(ev("start", v2StartData), ev("delta", replace(v2Tool, `{"tool_calls"`, `{"content":"x","tool_calls"`)), ev("finish", v2Finish)),
			"frame 2: a delta carries both content and tool_calls"},
		{"v2 empty delta", V2, events(ev("start", v2StartData), ev("delta", `{}`), ev("finish", v2Finish)), "frame 2: a delta carries neither content nor tool_calls"},
		{"v2 tool fragment without index", V2, events(ev("start", v2StartData), ev("delta", replace(v2Tool, `"index":0,`, "")), ev("finish", v2Finish)),
			"frame 2: a tool_calls fragment without an integer index"},
		{"v2 data not json", V2, events(ev("start", v2StartData), ev("delta", `content`), ev("finish", v2Finish)), "frame 2: the data is not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := checkSplit(t, tc.wire, tc.body)
			require.Equal(t, tc.want, out.Violation)
		})
	}
}

// A violation does not stop the count, nor hide how the stream ended.
func TestViolationKeepsCounting(t *testing.T) {
	out := CheckStream(V1, sse(hello, hello, finish, usage, done))
	require.Equal(t, Outcome{Complete: true, Frames: 5, Content: 2, Violation: "frame 1: the first frame is not the role primer"}, out)

	out = CheckStream(V2, events(ev("start", v2StartData), ev("delta", v2Hello), ev("reasoning", v2Think), ev("delta", v2Hello), ev("error", v2Error)))
	require.Equal(t, Outcome{Failed: true, ErrorCode: "upstream_timeout", Frames: 5, Content: 2, Reasoning: 1,
		Violation: "frame 3: a reasoning event after a delta"}, out)
}

func TestScanError(t *testing.T) {
	body := []byte("data: " + strings.Repeat("x", codec.DefaultMaxSSEEvent+1) + "\n\n")
	out := CheckStream(OpenAI, body)
	require.Equal(t, "after frame 0: the body is not a readable event stream: SSE event too large", out.Violation)
}

func TestCheckerReuse(t *testing.T) {
	var c Checker
	bad := c.Check(OpenAI, sse(primer, replace(hello, "chatcmpl-1", "chatcmpl-2"), finish, done))
	require.NotEmpty(t, bad.Violation)
	// Another stream with another id on the same checker: nothing carries over.
	good := c.Check(OpenAI, sse(replace(primer, "chatcmpl-1", "chatcmpl-9"), replace(hello, "chatcmpl-1", "chatcmpl-9"),
		replace(finish, "chatcmpl-1", "chatcmpl-9"), done))
	require.Equal(t, Outcome{Complete: true, Frames: 4, Content: 1}, good)
	v2 := c.Check(V2, events(ev("start", v2StartData), ev("delta", v2Tool), ev("finish", v2Finish)))
	require.True(t, v2.OK(), "%+v", v2)
}

func TestUnknownWire(t *testing.T) {
	require.Equal(t, "frame 1: unknown wire", CheckStream(0, sse(primer)).Violation)
	require.Equal(t, "after frame 0: unknown wire", CheckStream(9, nil).Violation)
	require.Equal(t, "wire(9)", Wire(9).String())
}

func TestWireNames(t *testing.T) {
	for w, want := range map[Wire][2]string{
		V1: {"v1", "/api/v1/chat"}, V2: {"v2", "/api/v2/chat"},
		OpenAI: {"openai", "/v1/chat/completions"}, OpenAIUsage: {"openai+usage", "/v1/chat/completions"},
		Upstream: {"upstream", "/v1/chat/completions"},
	} {
		require.Equal(t, want[0], w.String())
		require.Equal(t, want[1], w.Path())
	}
}

func TestJSONWalker(t *testing.T) {
	f := func(in string, want bool) {
		t.Helper()
		var fl fields
		require.Equal(t, want, fl.scan([]byte(in)), "%s", in)
	}
	f(`{}`, true)
	f(` {"a":[1,-2.5e+3,true,false,null,"x\u00e9\n"],"b":{"c":{}}} `, true)
	f(`{"a":01}`, false)
	f(`{"a":1.}`, false)
	f(`{"a":"\x"}`, false)
	f(`{"a":"`+"\x01"+`"}`, false)
	f(`{"a":[1,]}`, false)
	f(`{"a":1,}`, false)
	f(`{"a" 1}`, false)
	f(`{"a":tru}`, false)
	f(`[]`, false)
	f(`{} {}`, false)
	f(`{"a":`+strings.Repeat("[", maxDepth)+strings.Repeat("]", maxDepth)+`}`, false)
	f(`{"a":`+strings.Repeat("[", maxDepth-2)+strings.Repeat("]", maxDepth-2)+`}`, true)
}

// FuzzChecker: the checker never panics, and a stream scans the same whole
// and split in two at any point.
func FuzzChecker(f *testing.F) {
	f.Add(uint8(V1), sse(primer1, hello, finish, usage, done), 10)
	f.Add(uint8(OpenAI), sse(primer, tool0, args0, finish, errOAI), 50)
	f.Add(uint8(V2), events(ev("start", v2StartData), ev("delta", v2Tool), ev("finish", v2Finish)), 7)
	f.Fuzz(func(t *testing.T, w uint8, body []byte, cut int) {
		wire := Wire(w % 5)
		whole := CheckStream(wire, body)
		if cut < 0 {
			cut = -cut
		}
		if len(body) > 0 {
			cut %= len(body) + 1
		} else {
			cut = 0
		}
		var c Checker
		c.Reset(wire)
		sc := codec.NewSSEScanner(0)
		for _, part := range [][]byte{body[:cut], body[cut:]} {
			sc.Feed(part)
			for {
				ev, ok, err := sc.Next()
				if err != nil {
					c.ScanError(err)
					break
				}
				if !ok {
					break
				}
				c.Event(ev)
			}
		}
		for {
			ev, ok, err := sc.Finish()
			if err != nil || !ok {
				if err != nil {
					c.ScanError(err)
				}
				break
			}
			c.Event(ev)
		}
		require.Equal(t, whole, c.End())
	})
}

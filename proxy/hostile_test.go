package proxy

import (
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/cputest"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// cpuTime is the CPU time this process has used, user and system. A
// request's cost is read from it, never from a wall clock.
// hostileCase is one hostile request and what it must cost at most.
type hostileCase struct {
	name    string
	path    string // the route; /api/v1/chat when empty
	body    func() string
	headers []string
	status  int
	code    string
	message string        // a substring of the error message
	cpu     time.Duration // CPU of the whole process (gateway and simulator) for the request
	alloc   uint64        // bytes allocated by the whole process for the request
}

func hostileBody(content string, extra string) string {
	b, _ := json.Marshal(content)
	return `{"model":"kavi","messages":[{"role":"user","content":` + string(b) + `}]` + extra + `}`
}

func wordsText(n int) string {
	var sb strings.Builder
	sb.Grow(n + 64)
	for sb.Len() < n {
		sb.WriteString("the quick brown fox jumps over the lazy dog ")
	}
	return sb.String()[:n]
}

func manyTools(n int) string {
	var sb strings.Builder
	sb.WriteString(`[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"type":"function","function":{"name":"f` + strconv.Itoa(i) + `"}}`)
	}
	sb.WriteString(`]`)
	return sb.String()
}

func schemaFormat(schema string) string {
	return `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}`
}

func toolWith(params string) string {
	return `,"tools":[{"type":"function","function":{"name":"f","parameters":` + params + `}}],"tool_choice":"required"`
}

// hostileCases are the findings of the hostile-input review, each with the
// answer it must get and the bound on what it may cost. The figures before
// the bounds are in docs/performance.md.
func hostileCases() []hostileCase {
	const mib = 1 << 20
	return []hostileCase{
		// Token counting: one unbroken word (before: 280 KB took 34 s of CPU).
		{name: "one 280 KB word", body: func() string { return hostileBody(strings.Repeat("a", 280<<10), "") },
			status: 200, cpu: 2 * time.Second, alloc: 64 * mib},
		// A window's worth of one letter is one part's encoding and
		// comparisons with it (before the count's memo of repeated parts,
		// about 1.2 s on an idle machine).
		{name: "one 7.9 MiB word over the window", body: func() string { return hostileBody(strings.Repeat("a", 79*mib/10), "") },
			status: 400, code: "context_overflow", cpu: 2 * time.Second, alloc: 96 * mib},
		// Letters at random: no part repeats, so every part is encoded,
		// until the count passes the window (the worst case at the
		// default limits).
		{name: "one 280 KB word of random letters", body: func() string { return hostileBody(string(tokens.AppendLetters(nil, 7, 280<<10)), "") },
			status: 200, cpu: 2 * time.Second, alloc: 64 * mib},
		{name: "one 7.9 MiB word of random letters over the window", body: func() string { return hostileBody(string(tokens.AppendLetters(nil, 7, 79*mib/10)), "") },
			status: 400, code: "context_overflow", cpu: 4 * time.Second, alloc: 96 * mib},
		// Memory amplification (before: 7.9 MiB cost about 330 MiB of RSS).
		{name: "7.9 MiB of words over the window", body: func() string { return hostileBody(wordsText(79*mib/10), "") },
			status: 400, code: "context_overflow", cpu: 2 * time.Second, alloc: 96 * mib},
		{name: "auto with nothing that fits", body: func() string {
			return strings.Replace(hostileBody(wordsText(79*mib/10), ""), `"kavi"`, `"auto"`, 1)
		}, status: 400, code: "context_overflow", cpu: 2 * time.Second, alloc: 96 * mib},
		// Quadratic validation (before: 120,000 tools took 16 s). The count
		// is read before the body is decoded (before that: 50 ms of CPU and
		// 23 MiB to decode tools only to refuse them; what is left is
		// reading the body).
		{name: "120000 tools", body: func() string { return hostileBody("hi", `,"tools":`+manyTools(120_000)) },
			status: 400, code: "invalid_request", message: "at most 128 tools", cpu: time.Second, alloc: 16 * mib},
		// Every route that decodes a chat body reads the count first.
		{name: "120000 tools, token count", path: "/api/v1/tokens/count",
			body:   func() string { return hostileBody("hi", `,"tools":`+manyTools(120_000)) },
			status: 400, code: "invalid_request", message: "at most 128 tools", cpu: time.Second, alloc: 16 * mib},
		{name: "128 tools, last a duplicate", body: func() string {
			return hostileBody("hi", `,"tools":`+strings.Replace(manyTools(128), `"f127"`, `"f3"`, 1))
		}, status: 400, code: "invalid_request", message: "tools[127].function.name: f3 is already declared by tools[3]", cpu: time.Second, alloc: 16 * mib},
		// The simulator's schema-derived output (before: 13 GiB of RSS).
		{name: "tool minLength 1e9", body: func() string {
			return hostileBody("hi", toolWith(`{"type":"object","required":["a"],"properties":{"a":{"type":"string","minLength":1000000000}}}`))
		}, status: 400, code: "invalid_tool_schema", message: "minLength at /properties/a: 1000000000 is more than any tier can write", cpu: time.Second, alloc: 16 * mib},
		{name: "tool minLength within bounds", body: func() string {
			return hostileBody("hi", toolWith(`{"type":"object","required":["a"],"properties":{"a":{"type":"string","minLength":1000000}}}`))
		}, status: 200, cpu: time.Second, alloc: 32 * mib},
		{name: "response minLength 1e9", body: func() string {
			return hostileBody("hi", schemaFormat(`{"type":"object","required":["a"],"properties":{"a":{"type":"string","minLength":1000000000}}}`))
		}, status: 400, code: "invalid_schema", message: "minLength", cpu: time.Second, alloc: 16 * mib},
		{name: "response minItems 1e308", body: func() string {
			return hostileBody("hi", schemaFormat(`{"type":"array","minItems":1e308}`))
		}, status: 400, code: "invalid_schema", message: "minItems at the top level: 1e308", cpu: time.Second, alloc: 16 * mib},
		{name: "response maxLength past an integer", body: func() string {
			return hostileBody("hi", schemaFormat(`{"type":"string","maxLength":99999999999999999999}`))
		}, status: 400, code: "invalid_schema", message: "does not fit a 32-bit integer", cpu: time.Second, alloc: 16 * mib},
		{name: "response $ref to itself", body: func() string { return hostileBody("hi", schemaFormat(`{"$ref":"#"}`)) },
			status: 400, code: "invalid_schema", message: "refers back to itself", cpu: time.Second, alloc: 16 * mib},
		{name: "tool $ref to itself", body: func() string {
			return hostileBody("hi", toolWith(`{"type":"object","required":["a"],"properties":{"a":{"$ref":"#"}}}`))
		}, status: 400, code: "invalid_tool_schema", message: "refers back to itself", cpu: time.Second, alloc: 16 * mib},
		{name: "response nesting past depth 16", body: func() string {
			return hostileBody("hi", schemaFormat(strings.Repeat(`{"type":"array","items":`, 17)+`{}`+strings.Repeat(`}`, 17)))
		}, status: 400, code: "invalid_schema", message: "depth 16", cpu: time.Second, alloc: 16 * mib},
		// Wrong answers to bad input: the client's 400, naming the field.
		{name: "invalid escape", body: func() string {
			return `{"model":"kavi","messages":[{"role":"user","content":"\x41"}]}`
		}, status: 400, code: "invalid_request", message: "messages[0].content: is not a valid JSON string", cpu: time.Second, alloc: 16 * mib},
		{name: "invalid unicode escape", body: func() string {
			return `{"model":"kavi","messages":[{"role":"user","content":"\u12G4"}]}`
		}, status: 400, code: "invalid_request", message: "messages[0].content: is not a valid JSON string", cpu: time.Second, alloc: 16 * mib},
		{name: "raw control byte", body: func() string {
			return "{\"model\":\"kavi\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x07b\"}]}"
		}, status: 400, code: "invalid_request", message: "messages[0].content: is not a valid JSON string", cpu: time.Second, alloc: 16 * mib},
		{name: "raw newline", body: func() string {
			return "{\"model\":\"kavi\",\"messages\":[{\"role\":\"user\",\"content\":\"a\nb\"}]}"
		}, status: 400, code: "invalid_request", message: "messages[0].content: is not a valid JSON string", cpu: time.Second, alloc: 16 * mib},
		{name: "invalid UTF-8", body: func() string {
			return "{\"model\":\"kavi\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xc3\x28\"}]}"
		}, status: 400, code: "invalid_request", message: "messages[0].content: is not valid UTF-8", cpu: time.Second, alloc: 16 * mib},
		{name: "max_tokens a string", body: func() string { return hostileBody("hi", `,"max_tokens":"100"`) },
			status: 400, code: "invalid_request", message: "max_tokens: must be an integer, got a string.", cpu: time.Second, alloc: 16 * mib},
		{name: "stream a string", body: func() string { return hostileBody("hi", `,"stream":"true"`) },
			status: 400, code: "invalid_request", message: "stream: must be a boolean, got a string.", cpu: time.Second, alloc: 16 * mib},
		{name: "model a number", body: func() string {
			return `{"model":5,"messages":[{"role":"user","content":"hi"}]}`
		}, status: 400, code: "invalid_request", message: "model: must be a string, got a number.", cpu: time.Second, alloc: 16 * mib},
		{name: "keys match case-sensitively", body: func() string {
			return `{"MODEL":"kavi","messages":[{"role":"user","content":"hi"}]}`
		}, status: 400, code: "invalid_request", message: "model: required", cpu: time.Second, alloc: 16 * mib},
		{name: "gzip body", body: func() string { return hostileBody("hi", "") }, headers: []string{"Content-Encoding", "gzip"},
			status: 415, code: "unsupported_media_type", cpu: time.Second, alloc: 16 * mib},
	}
}

// TestHostileInput sends each hostile request through the whole gateway,
// with the simulator as its upstream, and checks the answer, the CPU the
// process spent on it and the bytes it allocated.
func TestHostileInput(t *testing.T) {
	// The simulator counts a long word too: under the race detector that
	// takes longer than the fixture's short tier deadline.
	f := newChatFixture(t, longDeadlines)
	f.post(t, "/api/v1/chat", hostileBody("warm up", "")) // load the tokenizer and the pools
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := cputest.Used(t)
			path := tc.path
			if path == "" {
				path = "/api/v1/chat"
			}
			r := f.post(t, path, body, tc.headers...)
			used := cputest.Used(t) - start
			runtime.ReadMemStats(&after)
			require.Equal(t, tc.status, r.status, "%.300s", r.body)
			if tc.code != "" {
				var env struct {
					Code  string `json:"code"`
					Error string `json:"error"`
				}
				require.NoError(t, json.Unmarshal(r.body, &env), "%s", r.body)
				require.Equal(t, tc.code, env.Code, env.Error)
				require.Contains(t, env.Error, tc.message)
			}
			require.Less(t, used, tc.cpu*cpuScale, "CPU for a %d-byte body", len(body))
			allocated := after.TotalAlloc - before.TotalAlloc
			require.Less(t, allocated, tc.alloc, "bytes allocated for a %d-byte body", len(body))
			t.Logf("%d-byte body: %v CPU, %d KiB allocated", len(body), used, allocated>>10)
		})
	}
}

// TestOpenAIRouteRefusesInTheOpenAIShape: the same refusals on the OpenAI
// route come in its envelope, still naming the field.
func TestOpenAIRouteRefusesInTheOpenAIShape(t *testing.T) {
	f := newChatFixture(t)
	r := f.post(t, "/v1/chat/completions", hostileBody("hi", `,"max_tokens":"100"`))
	require.Equal(t, 400, r.status)
	require.Contains(t, string(r.body), `"message":"max_tokens: must be an integer, got a string."`)
	require.Contains(t, string(r.body), `"code":"invalid_request"`)
}

// TestUpstreamResponseCaps: a non-streaming body over the cap is an
// upstream failure, counted and logged without content; so is one SSE event
// over the event cap.
func TestUpstreamResponseCaps(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.upstream = func(uc *UpstreamConfig) { uc.MaxResponseBytes, uc.MaxEventBytes = 4096, 120 }
	})
	r := f.post(t, "/api/v1/chat", hostileBody("[[sim:tokens=2000]]", ""))
	require.Equal(t, 503, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"code":"upstream_overloaded"`)
	require.Contains(t, string(r.body), "larger than the gateway accepts")
	require.Contains(t, f.logs.String(), `"part":"body"`)
	require.NotContains(t, f.logs.String(), "sim:tokens")

	r = f.post(t, "/api/v2/chat", hostileBody("hi", `,"stream":true`))
	require.Equal(t, 200, r.status)
	require.Contains(t, string(r.body), "event: error")
	require.Contains(t, f.logs.String(), `"part":"event"`)
	require.Equal(t, 2.0, counterValue(f, "gateway_chat_upstream_oversize_total"))
}

func counterValue(f *chatFixture, name string) float64 {
	var sb strings.Builder
	f.set.WritePrometheus(&sb)
	for line := range strings.SplitSeq(sb.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	return -1
}

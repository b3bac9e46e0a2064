package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// fakeUpstream is a programmable upstream that counts what it is asked.
type fakeUpstream struct {
	calls  atomic.Int64
	closed atomic.Int64 // connections the gateway closed
	mu     sync.Mutex
	bodies [][]byte
	ln     *fasthttputil.InmemoryListener
}

func newFakeUpstream(t testing.TB, h func(ctx *fasthttp.RequestCtx)) *fakeUpstream {
	t.Helper()
	f := &fakeUpstream{ln: fasthttputil.NewInmemoryListener()}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		f.calls.Add(1)
		f.mu.Lock()
		f.bodies = append(f.bodies, append([]byte(nil), ctx.PostBody()...))
		f.mu.Unlock()
		h(ctx)
	}, ConnState: func(_ net.Conn, s fasthttp.ConnState) {
		if s == fasthttp.StateClosed {
			f.closed.Add(1)
		}
	}}
	go func() { _ = srv.Serve(f.ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return f
}

func (f *fakeUpstream) dial() (net.Conn, error) { return f.ln.Dial() }

func (f *fakeUpstream) lastBody(t testing.TB) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.bodies)
	var m map[string]any
	require.NoError(t, json.Unmarshal(f.bodies[len(f.bodies)-1], &m))
	return m
}

// sseUpstream answers with the given SSE frames, written in pieces of
// split bytes (0: all at once), flushing after each piece.
func sseUpstream(frames string, split int) func(ctx *fasthttp.RequestCtx) {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			b := []byte(frames)
			for len(b) > 0 {
				n := len(b)
				if split > 0 && split < n {
					n = split
				}
				_, _ = w.Write(b[:n])
				if w.Flush() != nil {
					return
				}
				b = b[n:]
			}
		})
	}
}

const upstreamFrames = "data: {\"id\":\"up-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"secret-upstream-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\r\n\r\n" +
	": keep-alive comment\n\n" +
	"data: {\"id\":\"up-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"secret-upstream-model\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\\\"lo\"},\"finish_reason\":null}]}\n\n" +
	"data: {\"id\":\"up-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"secret-upstream-model\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" w\\u00f6rld\",\"tool_calls\":[{\"index\":0,\"id\":\"abc\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\r\n\r\n" +
	"data: {\"id\":\"up-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"secret-upstream-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n" +
	"data: {\"id\":\"up-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"secret-upstream-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7,\"total_tokens\":18,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n" +
	"data: [DONE]\n\n"

// The same upstream bytes, however the network splits them, give the same
// client bytes on every wire.
func TestStreamOutputIndependentOfUpstreamSplits(t *testing.T) {
	for _, w := range goldenWires {
		var first string
		for _, split := range []int{0, 1, 2, 3, 7, 64, 333} {
			up := newFakeUpstream(t, sseUpstream(upstreamFrames, split))
			f := newChatFixture(t, func(o *fixtureOptions) { o.dial = up.dial })
			body := `{"model":"vaani",` + w.extra + `"stream":true,"messages":[{"role":"user","content":"hi"}]}`
			got := string(normalize(f.post(t, w.path, body).body))
			require.NotContains(t, got, "secret-upstream-model", "the upstream model never reaches the client")
			require.NotContains(t, got, "up-1")
			if first == "" {
				first = got
				golden(t, "split_"+w.name+".txt", []byte(got))
				continue
			}
			require.Equal(t, first, got, "wire %s, split %d", w.name, split)
		}
	}
}

func TestUpstreamRequestIsRewritten(t *testing.T) {
	up := newFakeUpstream(t, sseUpstream(upstreamFrames, 0))
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.dial = up.dial
		o.upstream = func(c *UpstreamConfig) { c.SystemPrompt = "You are the tier." }
	})
	r := f.post(t, "/api/v1/chat", `{"model":"mira","stream":true,"max_tokens":99999,"memory":{"recall":false},"rules":false,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.status)
	sent := up.lastBody(t)
	require.Equal(t, "sim-mira", sent["model"], "the upstream model id goes upstream")
	require.EqualValues(t, 2048, sent["max_tokens"], "clamped to the tier cap")
	require.Equal(t, map[string]any{"include_usage": true}, sent["stream_options"])
	for _, k := range []string{"memory", "rules", "vault_id"} {
		require.NotContains(t, sent, k, "gateway-only fields stay here")
	}
	msgs := sent["messages"].([]any)
	require.Equal(t, map[string]any{"role": "system", "content": "You are the tier."}, msgs[0])

	f.post(t, "/api/v1/chat", `{"model":"mira","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	require.EqualValues(t, 2048, up.lastBody(t)["max_tokens"], "unset means the cap")
}

func TestToolCallsReplayUnchanged(t *testing.T) {
	up := newFakeUpstream(t, sseUpstream(upstreamFrames, 0))
	f := newChatFixture(t, func(o *fixtureOptions) { o.dial = up.dial })
	body := `{"model":"vaani","stream":true,"tools":[` + weatherTool + `],"messages":[` +
		`{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"tc_odd-ID.1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Pune\"}"}}]},` +
		`{"role":"tool","tool_call_id":"tc_odd-ID.1","content":"31C"}]}`
	require.Equal(t, 200, f.post(t, "/v1/chat/completions", body).status)
	msgs := up.lastBody(t)["messages"].([]any)
	call := msgs[1].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	require.Equal(t, "tc_odd-ID.1", call["id"])
	require.Equal(t, `{"city":"Pune"}`, call["function"].(map[string]any)["arguments"])
	require.Equal(t, "tc_odd-ID.1", msgs[2].(map[string]any)["tool_call_id"])
}

func TestUsageCountedLocallyWhenUpstreamOmitsIt(t *testing.T) {
	noUsage := strings.Replace(upstreamFrames, "data: {\"id\":\"up-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"secret-upstream-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7,\"total_tokens\":18,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n", "", 1)
	up := newFakeUpstream(t, sseUpstream(noUsage, 0))
	f := newChatFixture(t, func(o *fixtureOptions) { o.dial = up.dial })
	r := f.post(t, "/api/v1/chat", `{"model":"mira","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.status)
	usage := usageFrame(t, r.body)
	// The counts are deterministic: the prompt "hi" in mira's chat template
	// is 9 tokens, and what was delivered — `Hel"lo` and ` wörld` — is
	// counted as one text, `Hel"lo wörld`: 6.
	require.Equal(t, 9.0, usage["prompt_tokens"])
	require.Equal(t, 6.0, usage["completion_tokens"], "what was delivered is billed")
	require.Equal(t, float64(tokens.Count(`Hel"lo wörld`)), usage["completion_tokens"])
	require.Equal(t, 15.0, usage["total_tokens"])
	// mira: $0.20 and $0.40 per million input and output tokens.
	require.Equal(t, 0.0000042, usage["cost"].(map[string]any)["amount"])
	require.Equal(t, 1.0, metricValue(t, f, "gateway_chat_usage_estimated_total"))
}

// usageFrame returns the usage of the frame with empty choices.
func usageFrame(t *testing.T, body []byte) map[string]any {
	t.Helper()
	for _, line := range strings.Split(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &m))
		if choices, ok := m["choices"].([]any); ok && len(choices) == 0 {
			return m["usage"].(map[string]any)
		}
	}
	t.Fatal("no usage frame")
	return nil
}

func metricValue(t *testing.T, f *chatFixture, name string) float64 {
	t.Helper()
	var b strings.Builder
	f.set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			require.NoError(t, json.Unmarshal([]byte(rest), &v))
			return v
		}
	}
	return 0
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	f := newChatFixture(t)
	for _, w := range goldenWires[:3] {
		t.Run(w.name, func(t *testing.T) {
			// A slow stream: 200 tokens, 100 ms apart, which would run
			// for twenty seconds if the gateway did not cancel it.
			body := `{"model":"mira","stream":true,"messages":[{"role":"user","content":"x [[sim:tokens=200]] [[sim:itl_ms=100]] ` + w.name + `"}]}`
			conn, err := f.rawDial()
			require.NoError(t, err)
			_, err = conn.Write([]byte("POST " + w.path + " HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + f.key +
				"\r\nContent-Type: application/json\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body))
			require.NoError(t, err)
			br := bufio.NewReader(conn)
			for i := 0; i < 20; i++ { // read the head and a few frames
				_, err := br.ReadString('\n')
				require.NoError(t, err)
			}
			require.NoError(t, conn.Close())
			// The gateway notices at its next frame and closes the upstream
			// stream; its in-flight slot comes back.
			// (The bounds are generous for a loaded machine under the race
			// detector, and still far short of the stream's own end.)
			require.Eventually(t, func() bool { return f.chat.gate.InFlight() == 0 }, 10*time.Second, 5*time.Millisecond)
			require.Eventually(t, func() bool { return metricValue(t, f, "gateway_chat_client_disconnects_total") >= 1 },
				5*time.Second, 5*time.Millisecond)
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestConcurrencyCeiling(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) { o.maxInFlight = 1 })
	done := make(chan chatReply)
	go func() {
		done <- f.post(t, "/api/v1/chat", `{"model":"mira","stream":true,"messages":[{"role":"user","content":"x [[sim:tokens=30]] [[sim:itl_ms=10]]"}]}`)
	}()
	require.Eventually(t, func() bool { return f.chat.gate.InFlight() == 1 }, time.Second, time.Millisecond)
	for _, path := range []string{"/api/v1/chat", "/api/v2/chat", "/v1/chat/completions"} {
		r := f.post(t, path, `{"model":"mira","messages":[{"role":"user","content":"x"}]}`)
		require.Equal(t, 429, r.status)
		require.Equal(t, "1", r.header.Get("Retry-After"))
		require.Contains(t, string(r.body), "rate_limited")
		if path != "/v1/chat/completions" {
			require.Contains(t, string(r.body), `"reason":"concurrency"`)
		}
	}
	require.Equal(t, 200, (<-done).status)
	require.Equal(t, 0, f.chat.gate.InFlight())
	require.Equal(t, 200, f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"x"}]}`).status)
}

// lastWriteConn calls atLast at the moment the gateway writes a stream's
// last chunk to the client, before the client can read it.
type lastWriteConn struct {
	net.Conn
	atLast func()
}

func (c *lastWriteConn) Write(p []byte) (int, error) {
	if bytes.HasSuffix(p, []byte("\r\n0\r\n\r\n")) {
		c.atLast()
	}
	return c.Conn.Write(p)
}

// A stream gives its slots back before its last bytes go out: a client that
// sends its next request the moment it has read a stream's end is never
// refused for the concurrency that stream held — the gateway's ceiling,
// or its key's max_concurrent_requests.
func TestStreamSlotFreeBeforeLastByte(t *testing.T) {
	const stream = `{"model":"mira","stream":true,"messages":[{"role":"user","content":"x [[sim:tokens=5]]"}]}`
	t.Run("the gateway's ceiling", func(t *testing.T) {
		var f *chatFixture
		var seen atomic.Int64
		f = newChatFixture(t, func(o *fixtureOptions) {
			o.maxInFlight = 1
			o.clientConn = func(c net.Conn) net.Conn {
				return &lastWriteConn{Conn: c, atLast: func() { seen.Store(int64(f.chat.gate.InFlight())) }}
			}
		})
		for range 3 {
			seen.Store(-1)
			r := f.post(t, "/api/v1/chat", stream)
			require.Equal(t, 200, r.status)
			require.Equal(t, int64(0), seen.Load(), "in flight when the last chunk went out")
		}
	})
	t.Run("the key's concurrency", func(t *testing.T) {
		l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.MaxConcurrent = 1 }))
		var f *chatFixture
		var next atomic.Int64 // the status of a request sent as the last chunk goes out
		f = newChatFixture(t, withLimits(l, nil, uncapped()), func(o *fixtureOptions) {
			o.clientConn = func(c net.Conn) net.Conn {
				return &lastWriteConn{Conn: c, atLast: func() {
					req, _ := http.NewRequest("POST", "http://gw/api/v1/chat",
						strings.NewReader(`{"model":"mira","messages":[{"role":"user","content":"x"}]}`))
					req.Header.Set("Authorization", "Bearer "+f.key)
					resp, err := f.client.Do(req)
					if err != nil {
						next.Store(-2)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					next.Store(int64(resp.StatusCode))
				}}
			}
		})
		for range 3 {
			next.Store(-1)
			r := f.post(t, "/api/v1/chat", stream)
			require.Equal(t, 200, r.status)
			require.Equal(t, int64(200), next.Load(), "a request sent as the stream's last chunk went out")
		}
	})
}

// Requests already waiting on a hung upstream when their fellows open the
// breaker still reached their own deadline: each is 504 upstream_timeout,
// streaming or not, never the 503 a request refused by the open breaker
// gets.
func TestDeadlinesPassedWhileTheBreakerOpensAre504(t *testing.T) {
	f := newChatFixture(t, productionBreaker, func(o *fixtureOptions) {
		o.tiers = func(ts []hotpath.Tier) {
			for i := range ts {
				ts[i].Deadline = 300 * time.Millisecond
			}
		}
		o.upstream = func(c *UpstreamConfig) { c.StreamIdle = 300 * time.Millisecond }
	})
	for _, stream := range []bool{false, true} {
		const n = 12 // past the breaker's five distinct failing requests
		statuses := make(chan string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r := f.post(t, "/v1/chat/completions", `{"model":"mira","stream":`+strconv.FormatBool(stream)+
					`,"messages":[{"role":"user","content":"`+strconv.Itoa(i)+` [[sim:fault=hang]]"}]}`)
				statuses <- strconv.Itoa(r.status) + " " + map[bool]string{true: "upstream_timeout", false: "other"}[strings.Contains(string(r.body), "upstream_timeout")]
			})
		}
		wg.Wait()
		close(statuses)
		for s := range statuses {
			require.Equal(t, "504 upstream_timeout", s, "stream %v", stream)
		}
		require.Equal(t, hotpath.BreakerOpen, f.chat.upstreamFor("mira").Breaker.State(), "the timeouts opened it")
		f.chat.upstreamFor("mira").Breaker.Success() // closed again for the next round
	}
}

func TestNonStreamDeadline(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.tiers = func(ts []hotpath.Tier) {
			for i := range ts {
				ts[i].Deadline = 200 * time.Millisecond
			}
		}
	})
	for _, w := range goldenWires[:3] {
		r := f.post(t, w.path, `{"model":"mira","messages":[{"role":"user","content":"x [[sim:fault=hang]] `+w.name+`"}]}`)
		require.Equal(t, 504, r.status, w.name)
		require.Contains(t, string(r.body), "upstream_timeout")
	}
	require.Zero(t, metricValue(t, f, "gateway_chat_upstream_retries_total"), "a timeout is not retried")
}

func TestBreakerRefusesExplicitTierAndAutoRoutesAround(t *testing.T) {
	up := newFakeUpstream(t, func(ctx *fasthttp.RequestCtx) {
		if strings.Contains(string(ctx.PostBody()), `"sim-mira"`) {
			ctx.SetStatusCode(503)
			ctx.SetBodyString(`{"error":{"message":"upstream secret detail","type":"server_error"}}`)
			return
		}
		sseUpstream(upstreamFrames, 0)(ctx)
	})
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.dial = up.dial
		o.breaker = hotpath.BreakerConfig{MinRequests: 3, Cooldown: time.Hour}
	})
	r := f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, 503, r.status)
	require.Contains(t, string(r.body), "upstream_overloaded")
	require.NotContains(t, string(r.body), "secret detail", "upstream error bodies never leak")
	require.EqualValues(t, 3, up.calls.Load(), "one attempt and two retries")

	// The gateway's retries were one request; two more distinct failing
	// requests make three, all failed: the breaker opens.
	for _, text := range []string{"y", "z"} {
		r = f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"`+text+`"}]}`)
		require.Equal(t, 503, r.status)
		require.Contains(t, string(r.body), "upstream_overloaded")
	}
	calls := up.calls.Load()
	require.EqualValues(t, 9, calls)

	r = f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, 503, r.status)
	require.Contains(t, string(r.body), "model_unavailable", "an open breaker refuses at once")
	require.Equal(t, "60", r.header.Get("Retry-After"), "the rest of the hour's cooldown, bounded")
	require.Equal(t, calls, up.calls.Load(), "without calling the upstream")

	r = f.post(t, "/api/v1/chat", `{"model":"auto","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, 200, r.status)
	require.Contains(t, string(r.body), `"routed_tier":"vaani"`, "auto routes around the cooling tier")
}

// longDeadlines gives every tier room for a prompt that takes a while to
// count, as one of 350 KB does under the race detector on a busy machine.
func longDeadlines(o *fixtureOptions) {
	o.tiers = func(ts []hotpath.Tier) {
		for i := range ts {
			ts[i].Deadline = 30 * time.Second
		}
	}
}

func TestAutoRouting(t *testing.T) {
	f := newChatFixture(t, longDeadlines)
	cases := []struct{ body, tier string }{
		{`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, "mira"},
		{`{"model":"auto","reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}`, "kavi"},
		{`{"model":"auto","reasoning_effort":"low","messages":[{"role":"user","content":"hi"}]}`, "vaani"},
		{`{"model":"auto","tools":[` + weatherTool + `],"messages":[{"role":"user","content":"hi"}]}`, "vaani"},
		{`{"model":"auto","messages":[{"role":"user","content":"` + strings.Repeat("word ", 70000) + `"}]}`, "vaani"},
	}
	for _, c := range cases {
		r := f.post(t, "/api/v2/chat", c.body)
		require.Equal(t, 200, r.status, "%s", r.body)
		var m map[string]any
		require.NoError(t, json.Unmarshal(r.body, &m))
		require.Equal(t, c.tier, m["model"])
		require.Equal(t, map[string]any{"tier": c.tier, "mode": "auto", "reasoning_effort": m["routing"].(map[string]any)["reasoning_effort"]}, m["routing"])
	}
	allowlisted := newChatFixture(t, func(o *fixtureOptions) { o.principal.Models = []string{"kavi"} })
	r := allowlisted.post(t, "/api/v1/chat", `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.status)
	require.Contains(t, string(r.body), `"routed_tier":"kavi"`, "auto stays within the key's allowlist")
	r = allowlisted.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 403, r.status)
	require.Contains(t, string(r.body), "model_not_allowed")
}

func TestEffortEcho(t *testing.T) {
	f := newChatFixture(t)
	cases := []struct{ model, effort, want string }{
		{"kavi", "", "high"}, {"vaani", "", "low"}, {"mira", "", "none"},
		{"kavi", "none", "none"}, {"vaani", "medium", "medium"}, {"mira", "high", "none"},
	}
	for _, c := range cases {
		effort := ""
		if c.effort != "" {
			effort = `"reasoning_effort":"` + c.effort + `",`
		}
		r := f.post(t, "/api/v1/chat", `{"model":"`+c.model+`",`+effort+`"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, 200, r.status)
		require.Contains(t, string(r.body), `"reasoning_effort":"`+c.want+`"`, "%s/%s", c.model, c.effort)
	}
	r := f.post(t, "/api/v1/chat", `{"model":"kavi","reasoning_effort":"minimal","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 400, r.status)
}

func TestReasoningNeverInContent(t *testing.T) {
	f := newChatFixture(t)
	for _, w := range goldenWires {
		for _, stream := range []string{"false", "true"} {
			r := f.post(t, w.path, `{"model":"kavi",`+w.extra+`"stream":`+stream+`,"max_tokens":50,"messages":[{"role":"user","content":"x [[sim:reasoning=5]] [[sim:tokens=1]]"}]}`)
			require.Equal(t, 200, r.status)
			if w.name == "v2" {
				continue
			}
			require.NotContains(t, string(r.body), "reasoning_content")
			if w.name == "v1" && stream == "false" {
				require.Contains(t, string(r.body), `"output_tokens":6`, "reasoning is billed as output")
			} else if w.name != "openai" || stream == "false" {
				require.Contains(t, string(r.body), `"completion_tokens":6`, "reasoning is billed as output")
			}
		}
	}
	// kavi with a tiny budget spends it all on thinking: length, empty content.
	r := f.post(t, "/api/v1/chat", `{"model":"kavi","max_tokens":3,"messages":[{"role":"user","content":"x [[sim:reasoning=50]]"}]}`)
	require.Equal(t, 200, r.status)
	require.Contains(t, string(r.body), `"content":""`)
	require.Contains(t, string(r.body), `"finish_reason":"length"`)
}

func TestIdempotentReplay(t *testing.T) {
	up := newFakeUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"id":"u","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	})
	f := newChatFixture(t, func(o *fixtureOptions) { o.dial = up.dial })
	body := `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`
	first := f.post(t, "/v1/chat/completions", body, "Idempotency-Key", "order-42")
	require.Equal(t, 200, first.status)
	again := f.post(t, "/v1/chat/completions", body, "Idempotency-Key", "order-42")
	require.Equal(t, 200, again.status)
	require.Equal(t, string(first.body), string(again.body), "replayed byte for byte")
	require.EqualValues(t, 1, up.calls.Load(), "the replay calls no model")

	r := f.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"other"}]}`, "Idempotency-Key", "order-42")
	require.Equal(t, 409, r.status)
	require.Contains(t, string(r.body), "idempotency_conflict")

	stream := `{"model":"mira","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	f.post(t, "/v1/chat/completions", stream, "Idempotency-Key", "s-1")
	f.post(t, "/v1/chat/completions", stream, "Idempotency-Key", "s-1")
	require.EqualValues(t, 3, up.calls.Load(), "streams store and replay nothing")

	r = f.post(t, "/v1/chat/completions", body, "Idempotency-Key", strings.Repeat("k", 256))
	require.Equal(t, 400, r.status)
}

func TestStructuredOutput(t *testing.T) {
	f := newChatFixture(t)
	format := `"response_format":{"type":"json_schema","json_schema":{"name":"city","schema":{"type":"object","properties":{"city":{"type":"string"},"pop":{"type":"integer"}},"required":["city","pop"],"additionalProperties":false}}}`
	for _, w := range goldenWires[:3] {
		r := f.post(t, w.path, `{"model":"vaani",`+format+`,"messages":[{"role":"user","content":"x [[sim:json]]"}]}`)
		require.Equal(t, 200, r.status, "%s", r.body)
		r = f.post(t, w.path, `{"model":"vaani",`+format+`,"messages":[{"role":"user","content":"x [[sim:json_invalid]]"}]}`)
		require.Equal(t, 422, r.status, "%s", r.body)
		require.Contains(t, string(r.body), "structured_output_unsatisfied")
	}
	r := f.post(t, "/api/v1/chat", `{"model":"vaani","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","if":{}}}},"messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, 400, r.status)
	require.Contains(t, string(r.body), "invalid_schema")
}

func TestOverheadHeader(t *testing.T) {
	f := newChatFixture(t)
	r := f.post(t, "/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.status)
	require.Regexp(t, `^\d+(\.\d{1,3})?$`, r.header.Get("Gateway-Overhead-Ms"))
	require.Greater(t, metricValue(t, f, `gateway_chat_overhead_seconds_count`), 0.0)
}

func TestChatRequestRefusals(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) { o.principal.Scopes = mustScopes("chat") })
	cases := []struct{ path, body, code string }{
		{"/api/v1/chat", `{`, "invalid_request"},
		{"/api/v1/chat", ``, "invalid_request"},
		{"/api/v1/chat", `{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`, "invalid_request"},
		{"/v1/chat/completions", `{"model":"mira","messages":[{"role":"developer","content":"x"}]}`, "invalid_request"},
		{"/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"x","file_ids":["f1"]}]}`, "invalid_request"},
		{"/api/v1/chat", `{"model":"mira","memory":{"recall":true},"messages":[{"role":"user","content":"x"}]}`, "key_scope_forbidden"},
		{"/api/v1/chat", `{"model":"mira","rules":true,"messages":[{"role":"user","content":"x"}]}`, "key_scope_forbidden"},
		{"/api/v1/chat", `{"model":"mira","temperature":2.5,"messages":[{"role":"user","content":"x"}]}`, "invalid_request"},
		{"/api/v1/chat", `{"model":"mira","tool_choice":"required","messages":[{"role":"user","content":"x"}]}`, "invalid_request"},
		{"/api/v1/chat", `{"model":"mira","messages":[{"role":"tool","content":"x"}]}`, "invalid_request"},
		{"/api/v1/chat", `{"model":"mira","messages":[{"role":"user","content":"` + strings.Repeat("word ", 70000) + `"}]}`, "context_overflow"},
	}
	for _, c := range cases {
		r := f.post(t, c.path, c.body)
		require.Contains(t, string(r.body), `"`+c.code+`"`, "%s %s", c.path, c.body[:min(len(c.body), 80)])
		require.GreaterOrEqual(t, r.status, 400)
	}
	r := f.post(t, "/api/v1/chat", `{"model":"mira","memory":{"recall":false,"capture":false},"rules":false,"messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, 200, r.status, "false needs no scope")

	// file_ids on the native route: the pin comes first, then the scope, then the file.
	files := `{"model":"mira","messages":[{"role":"user","content":"x","file_ids":["file-1"]}]}`
	r = f.post(t, "/api/v1/chat", files)
	require.Equal(t, 400, r.status)
	require.Contains(t, string(r.body), `"required_version":"2026-10-05"`)
	r = f.post(t, "/api/v1/chat", files, "Gateway-Version", "2026-10-05")
	require.Equal(t, 403, r.status)
	require.Contains(t, string(r.body), `"required_scope":"files"`)
	full := newChatFixture(t)
	r = full.post(t, "/api/v2/chat", files, "Gateway-Version", "2026-10-07")
	require.Equal(t, 404, r.status)
	require.Contains(t, string(r.body), "file_not_found")
}

func TestTierCapabilities(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.tiers = func(ts []hotpath.Tier) {
			for i := range ts {
				if ts[i].Name == "vaani" {
					ts[i].SupportsStructured = false
					ts[i].SupportsTools = false
				}
			}
		}
	})
	image := `{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}`
	r := f.post(t, "/api/v1/chat", `{"model":"mira","messages":[`+image+`]}`)
	require.Equal(t, 400, r.status)
	require.Contains(t, string(r.body), `"code":"image_not_supported"`)
	require.Contains(t, string(r.body), `"vision_tiers":["kavi","vaani"]`)
	r = f.post(t, "/api/v1/chat", `{"model":"kavi","messages":[`+image+`]}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	r = f.post(t, "/api/v1/chat", `{"model":"auto","messages":[`+image+`]}`)
	require.Equal(t, 200, r.status)
	require.NotContains(t, string(r.body), `"routed_tier":"mira"`, "auto skips a tier that cannot read images")

	r = f.post(t, "/api/v1/chat", `{"model":"vaani","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, 422, r.status)
	require.Contains(t, string(r.body), "structured_output_unsupported")
	r = f.post(t, "/api/v1/chat", `{"model":"vaani","tools":[`+weatherTool+`],"messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, 400, r.status)
	r = f.post(t, "/api/v1/chat", `{"model":"auto","tools":[`+weatherTool+`],"messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, 200, r.status)
	require.Contains(t, string(r.body), `"routed_tier":"kavi"`, "auto moves past the tier without tools")
}

// The upstream connection is closed as soon as the gateway sees the client
// gone, long before the upstream would have finished.
func TestClientDisconnectClosesUpstreamConnection(t *testing.T) {
	var frames strings.Builder
	frames.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	up := newFakeUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for range 1000 { // 20 s of tokens unless someone hangs up
				_, _ = w.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n")
				if w.Flush() != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	})
	f := newChatFixture(t, func(o *fixtureOptions) { o.dial = up.dial })
	body := `{"model":"mira","stream":true,"messages":[{"role":"user","content":"x"}]}`
	conn, err := f.rawDial()
	require.NoError(t, err)
	_, err = conn.Write([]byte("POST /api/v1/chat HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + f.key +
		"\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body))
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	for range 16 {
		_, err := br.ReadString('\n')
		require.NoError(t, err)
	}
	require.Zero(t, up.closed.Load())
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool { return up.closed.Load() >= 1 }, 2*time.Second, 5*time.Millisecond,
		"the upstream connection is closed when the client leaves")
}

// Shutdown waits for open streams: they own their connections, so the
// server's own shutdown does not see them.
func TestDrainWaitsForStreams(t *testing.T) {
	f := newChatFixture(t)
	done := make(chan chatReply)
	go func() {
		done <- f.post(t, "/api/v1/chat", `{"model":"mira","stream":true,"messages":[{"role":"user","content":"x [[sim:tokens=20]] [[sim:itl_ms=10]]"}]}`)
	}()
	require.Eventually(t, func() bool { return f.chat.open.Load() == 1 }, 2*time.Second, time.Millisecond)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	require.False(t, f.chat.Drain(short), "a stream is still open")
	cancel()
	long, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.True(t, f.chat.Drain(long))
	r := <-done
	require.Equal(t, 200, r.status)
	require.Contains(t, string(r.body), "data: [DONE]", "the stream was allowed to finish")
}

// auto weighs a tier's system prompt when it decides whether the prompt
// fits: a prompt that fits mira's window alone but not with mira's system
// prompt goes to vaani rather than being refused.
func TestAutoCountsTheTierSystemPrompt(t *testing.T) {
	sys := strings.Repeat("word ", 53000)
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.upstream = func(c *UpstreamConfig) {
			if c.Model == "sim-mira" {
				c.SystemPrompt = sys
			}
		}
	})
	body := `{"model":"auto","messages":[{"role":"user","content":"` + strings.Repeat("word ", 13000) + `"}]}`
	r := f.post(t, "/api/v1/chat", body)
	require.Equal(t, 200, r.status, "%.300s", r.body)
	require.Contains(t, string(r.body), `"routed_tier":"vaani"`)
	r = f.post(t, "/api/v1/chat", strings.Replace(body, `"auto"`, `"mira"`, 1))
	require.Equal(t, 400, r.status)
	require.Contains(t, string(r.body), "context_overflow")
}

// A stream writes its own response head when it takes the connection
// over: the edge's headers must be in it, on every wire.
func TestStreamResponseHead(t *testing.T) {
	f := newChatFixture(t)
	for _, w := range goldenWires[:3] {
		r := f.post(t, w.path, `{"model":"mira","stream":true,"messages":[{"role":"user","content":"x"}]}`,
			"X-Request-Id", "head-"+w.name, "Gateway-Version", "2026-10-05")
		require.Equal(t, 200, r.status)
		require.Equal(t, "text/event-stream", r.header.Get("Content-Type"))
		require.Equal(t, "head-"+w.name, r.header.Get("X-Request-Id"))
		require.Equal(t, "2026-10-05", r.header.Get("Gateway-Version"))
		require.Equal(t, "no-cache", r.header.Get("Cache-Control"))
		require.Empty(t, r.header.Get("Content-Length"), "the body ends with the connection")
		require.Contains(t, string(r.body), `"model":"mira"`)
	}
}

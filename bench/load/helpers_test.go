package load

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/bench/sim"
)

// startSim starts a simulator on a loopback port and returns its base URL.
func startSim(t testing.TB) string {
	t.Helper()
	s, ln, err := sim.Listen("127.0.0.1:0", sim.Config{})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	return "http://" + ln.Addr().String()
}

// serve serves h on a loopback port and returns its base URL.
func serve(t testing.TB, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// transcript serves body as an event stream on every route.
func transcript(body string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(body)
	}
}

// completion is a small non-streaming OpenAI reply.
const completion = `{"id":"c","object":"chat.completion","created":0,"model":"mira",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`

// arrivals records, in order, which target each request arrived at.
type arrivals struct {
	mu     sync.Mutex
	labels []string
	at     []time.Time
}

func (a *arrivals) handler(label string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		a.mu.Lock()
		a.labels = append(a.labels, label)
		a.at = append(a.at, time.Now())
		a.mu.Unlock()
		ctx.SetContentType("application/json")
		ctx.SetBodyString(completion)
	}
}

// quick returns a validated scenario for short test runs.
func quick(t testing.TB, sc Scenario) *Scenario {
	t.Helper()
	if sc.Name == "" {
		sc.Name = t.Name()
	}
	if sc.Warmup == 0 {
		sc.Warmup = -1
	}
	if sc.Timeout == 0 {
		sc.Timeout = 5 * time.Second
	}
	require.NoError(t, sc.Validate())
	return &sc
}

// V1 transcripts: a good one, and one that opens with content instead of
// the role primer.
const (
	v1Good = `data: {"id":"chatcmpl-ID","object":"chat.completion.chunk","created":0,"model":"mira","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"gw":{"request_id":"req-1","routed_tier":"mira","reasoning_effort":"none"}}

data: {"id":"chatcmpl-ID","object":"chat.completion.chunk","created":0,"model":"mira","choices":[{"index":0,"delta":{"content":"But"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ID","object":"chat.completion.chunk","created":0,"model":"mira","choices":[{"index":0,"delta":{"content":" few"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ID","object":"chat.completion.chunk","created":0,"model":"mira","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}

data: {"id":"chatcmpl-ID","object":"chat.completion.chunk","created":0,"model":"mira","choices":[],"usage":{"prompt_tokens":17,"completion_tokens":2,"total_tokens":19,"cost":{"tier":"mira","amount":0.000005,"currency":"USD","input_unit":0.2,"output_unit":0.4,"cache_read_unit":0.05}}}

data: [DONE]

`
	v1Bad = `data: {"id":"chatcmpl-ID","object":"chat.completion.chunk","created":0,"model":"mira","choices":[{"index":0,"delta":{"content":"But"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-ID","object":"chat.completion.chunk","created":0,"model":"mira","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}

data: [DONE]

`
	v2Error = `event: start
data: {"id":"chatcmpl-ID","created":0,"model":"mira","request_id":"req-1","routing":{"tier":"mira","mode":"explicit","reasoning_effort":"none"}}

event: delta
data: {"content":"Now"}

event: error
data: {"code":"upstream_overloaded","message":"The model's stream ended before the reply was complete.","request_id":"req-1"}

`
)

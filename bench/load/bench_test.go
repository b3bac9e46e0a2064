package load

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// inmemory serves h on an in-memory listener and returns a runner for sc
// whose client dials it.
func inmemory(tb testing.TB, sc *Scenario, h fasthttp.RequestHandler) *runner {
	tb.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Shutdown() })
	r, err := newRunner(tb.Context(), sc, Target{Name: "mem", BaseURL: "http://127.0.0.1:1"}, Options{
		Client: ClientOptions{Dial: func(string) (net.Conn, error) { return ln.Dial() }},
	})
	require.NoError(tb, err)
	tb.Cleanup(r.close)
	return r
}

// streamHandler answers a short OpenAI stream, flushed frame by frame.
func streamHandler(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/event-stream")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		for _, frame := range []string{
			`data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"sim","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			`data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"sim","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`,
			`data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"sim","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]}`,
			`data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"sim","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`data: [DONE]`,
		} {
			_, _ = w.WriteString(frame)
			_, _ = w.WriteString("\n\n")
			_ = w.Flush()
		}
	})
}

func jsonHandler(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	ctx.SetBodyString(completion)
}

// BenchmarkRequest measures the harness's own cost per request, against an
// in-memory server that answers at once: building nothing, sending a
// pooled request, reading and timing the answer, and recording it.
func BenchmarkRequest(b *testing.B) {
	for _, tc := range []struct {
		name    string
		sc      Scenario
		handler fasthttp.RequestHandler
	}{
		{"json", Scenario{Wires: map[Wire]float64{WireUpstream: 1}}, jsonHandler},
		{"stream", Scenario{Wires: map[Wire]float64{WireUpstream: 1}, Stream: true}, streamHandler},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sc := quick(b, tc.sc)
			r := inmemory(b, sc, tc.handler)
			rec := newRecorder("mem")
			c := newCall()
			v := &r.variants[0]
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				c.do(r.client, v, r.auth, time.Second, time.Now())
				if !c.out.completed {
					b.Fatalf("request failed: %s", c.out.code)
				}
				rec.sent()
				rec.record(uint32(i), &c.out)
				c.reset()
			}
		})
	}
}

func TestInmemoryDial(t *testing.T) {
	sc := quick(t, Scenario{Wires: map[Wire]float64{WireUpstream: 1}, Stream: true})
	r := inmemory(t, sc, streamHandler)
	c := newCall()
	c.do(r.client, &r.variants[0], authHeader{}, time.Second, time.Now())
	require.True(t, c.out.completed, c.out.code)
	require.EqualValues(t, 5, c.out.frames)
	require.Len(t, c.out.gaps, 4)
	require.Positive(t, c.out.ttft)
}

package proxy

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/codec"
)

// The client's W3C traceparent (and tracestate) reach the upstream
// unchanged on every wire, streamed or not; a request without one, or
// with a malformed one, starts a trace of its own, and never forwards a
// tracestate it cannot vouch for.
func TestTraceparentReachesTheUpstream(t *testing.T) {
	s := sim.New(sim.Config{})
	t.Cleanup(s.Shutdown)
	var mu sync.Mutex
	var parents, states []string
	up := newFakeUpstream(t, func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		parents = append(parents, string(ctx.Request.Header.Peek("traceparent")))
		states = append(states, string(ctx.Request.Header.Peek("tracestate")))
		mu.Unlock()
		s.Handler()(ctx)
	})
	f := newChatFixture(t, func(o *fixtureOptions) { o.dial = up.dial })
	last := func() (string, string) {
		mu.Lock()
		defer mu.Unlock()
		return parents[len(parents)-1], states[len(states)-1]
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, path := range lcPaths {
		for _, body := range []string{`{"model":"mira","messages":[{"role":"user","content":"hi"}]}`, streamBody("hi")} {
			r := f.post(t, path, body, "traceparent", tp, "tracestate", "vendor=opaque")
			require.Equal(t, 200, r.status, "%s", r.body)
			p, st := last()
			require.Equal(t, tp, p, path)
			require.Equal(t, "vendor=opaque", st, path)
		}
	}

	r := f.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.status)
	first, st := last()
	require.True(t, codec.ValidTraceparent([]byte(first)), first)
	require.Empty(t, st)
	r = f.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`,
		"traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "tracestate", "vendor=forged")
	require.Equal(t, 200, r.status)
	second, st := last()
	require.True(t, codec.ValidTraceparent([]byte(second)), second)
	require.NotEqual(t, first[3:35], second[3:35], "each request starts a trace of its own")
	require.Empty(t, st, "no tracestate without the client's trace")

	// A later version is carried as version 00, its first four fields.
	r = f.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`,
		"traceparent", "cc"+tp[2:]+"-future")
	require.Equal(t, 200, r.status)
	p, _ := last()
	require.Equal(t, tp, p)
}

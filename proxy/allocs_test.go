//go:build !race

package proxy

import (
	"bufio"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// maxRequestAllocs is the budget for one whole non-streaming request
// through the gateway's handler: the measured figure (11, in
// docs/performance.md; 13 before the upstream body was encoded into the
// upstream request's own buffer) and a margin of two, so that a
// regression fails.
const maxRequestAllocs = 13

func TestNonStreamRequestAllocationBudget(t *testing.T) {
	f := newRequestHarness(t)
	allocs := testing.AllocsPerRun(200, func() { f.do(t) })
	t.Logf("allocations per non-streaming request: %.0f", allocs)
	require.LessOrEqual(t, allocs, float64(maxRequestAllocs))
}

// maxMeteredAllocs is the budget with limits and the ledger row on: the
// window, lease and reservation on the in-process counters, and the row.
// Measured 12 (18 before the admission's arguments moved into the
// request's charge, 14 before the upstream body's encoding stopped
// allocating).
const maxMeteredAllocs = 14

func TestMeteredRequestAllocationBudget(t *testing.T) {
	f := newRequestHarness(t, metered(t))
	allocs := testing.AllocsPerRun(200, func() { f.do(t) })
	t.Logf("allocations per metered non-streaming request: %.0f", allocs)
	require.LessOrEqual(t, allocs, float64(maxMeteredAllocs))
}

// maxStreamAllocs is the budget for one whole stream, whatever its length,
// client side included. Measured 32 (34 before the upstream body's
// encoding stopped allocating).
const maxStreamAllocs = 34

// A stream's allocations do not grow with its frames: a 500-frame stream
// allocates what a 10-frame one does, within the per-stream budget.
func TestStreamAllocatesNothingPerFrame(t *testing.T) {
	short, long := newStreamHarness(t, 10), newStreamHarness(t, 500)
	a := testing.AllocsPerRun(50, func() { short.stream(t) })
	b := testing.AllocsPerRun(50, func() { long.stream(t) })
	t.Logf("allocations per streaming request: %.0f with 10 frames, %.0f with 500", a, b)
	require.LessOrEqual(t, b-a, 1.0, "allocations per frame")
	require.LessOrEqual(t, b, float64(maxStreamAllocs), "allocations per stream")
}

// A reply of 190 KiB of text — far past what used to be counted between two
// frames — allocates what a short one does: nothing is counted while it
// streams when the upstream sends its usage.
func TestLongStreamAllocatesNothingPerFrame(t *testing.T) {
	word := strings.Repeat("x", 47)
	short, long := newWordStreamHarness(t, 10, word), newWordStreamHarness(t, 4000, word)
	a := testing.AllocsPerRun(20, func() { short.stream(t) })
	b := testing.AllocsPerRun(20, func() { long.stream(t) })
	t.Logf("allocations per streaming request: %.0f with 10 frames, %.0f with 4000 (190 KiB)", a, b)
	require.LessOrEqual(t, b-a, 1.0, "allocations per frame")
}

// nativeAllocs measures a non-streaming /api/v1/chat request.
func nativeAllocs(t *testing.T, opts ...func(*fixtureOptions)) float64 {
	f := newRequestHarness(t, opts...)
	f.ctx.Request.SetRequestURI("/api/v1/chat")
	for range 50 {
		f.do(t)
	}
	return testing.AllocsPerRun(200, func() { f.do(t) })
}

// A native request that uses no memory and no rules (a developer key's
// default) costs exactly what it costs with no memory wired at all, and
// never reaches the store.
func TestNativeRequestWithoutMemoryAllocationBudget(t *testing.T) {
	store := &countingStore{}
	without := nativeAllocs(t)
	with := nativeAllocs(t, func(o *fixtureOptions) {
		o.memory = &MemoryConfig{Store: store, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	})
	t.Logf("allocations per native request: %.0f without memory wired, %.0f with it (switches off)", without, with)
	require.Equal(t, without, with)
	require.LessOrEqual(t, with, float64(maxRequestAllocs))
	require.Zero(t, store.calls.Load(), "no store call, so no database round trip")
}

// The Anthropic and Responses wires allocate nothing per frame either: a
// 500-frame stream allocates what a 10-frame one does, within the
// per-stream budget of the chat wires.
func TestWireStreamsAllocateNothingPerFrame(t *testing.T) {
	wires := []struct{ name, path, body string }{
		{"anthropic", "/v1/messages", `{"stream":true,"model":"mira","max_tokens":256,"system":"You are terse.","messages":[{"role":"user","content":"Say hello to the team."},{"role":"assistant","content":"Hello, team."},{"role":"user","content":"Once more, warmly."}]}`},
		{"responses", "/v1/responses", `{"stream":true,"model":"mira","max_output_tokens":256,"instructions":"You are terse.","input":[{"role":"user","content":"Say hello to the team."},{"role":"assistant","content":"Hello, team."},{"role":"user","content":"Once more, warmly."}]}`},
	}
	for _, w := range wires {
		t.Run(w.name, func(t *testing.T) {
			short := newWireStreamHarness(t, 10, "word", w.path, w.body)
			long := newWireStreamHarness(t, 500, "word", w.path, w.body)
			a := testing.AllocsPerRun(50, func() { short.stream(t) })
			b := testing.AllocsPerRun(50, func() { long.stream(t) })
			t.Logf("allocations per %s stream: %.0f with 10 frames, %.0f with 500", w.name, a, b)
			require.LessOrEqual(t, b-a, 1.0, "allocations per frame")
			require.LessOrEqual(t, b, float64(maxStreamAllocs+wireRequestAllocs), "allocations per stream")
		})
	}
}

// wireRequestAllocs is what decoding a request on the Anthropic or
// Responses wire adds, once per request: the wire's own request struct and
// the chat request built from it. Measured 39 and 40 allocations per
// stream (7 and 8 over the chat wire's 32).
const wireRequestAllocs = 8

// A connection that streams turn after turn reads each next request
// without allocating a read buffer for it: a stream takes its connection
// over, fasthttp keeps no taken-over connection's buffer, and the server
// that serves the connection afterwards releases its buffer to its pool
// between requests (NewServer). The bytes one stream allocates, the
// in-process simulator's and the client's included, stay below one read
// buffer (24.6 KiB at the default limits); reading each next request into
// a new buffer would put them above it.
func TestStreamsOnAKeptConnectionAllocateNoReadBuffer(t *testing.T) {
	f := newChatFixture(t)
	rc := f.dialRaw(t)
	body := streamBody("hi [[sim:tokens=5]]")
	stream := func() {
		rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", body)
		resp, _, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
	}
	for range 50 {
		stream()
	}
	const n = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		stream()
	}
	runtime.ReadMemStats(&after)
	perStream := float64(after.TotalAlloc-before.TotalAlloc) / n
	t.Logf("bytes allocated per stream on a kept connection: %.0f", perStream)
	var cfg ServerConfig
	cfg.defaults()
	require.Less(t, perStream, float64(cfg.readBufferSize()))
}

// The checks on a request's head as it arrived (requestConfig) allocate
// nothing, on an ordinary head and on one they act on.
func TestHeadChecksAllocateNothing(t *testing.T) {
	e := &Edge{}
	for _, raw := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nConnection: Keep-Alive, Close\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
	} {
		var h fasthttp.RequestHeader
		require.NoError(t, h.Read(bufio.NewReader(strings.NewReader(raw))))
		require.Zero(t, testing.AllocsPerRun(100, func() { e.requestConfig(&h) }), raw)
	}
}

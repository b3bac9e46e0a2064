//go:build !race

package load

import (
	"bufio"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// streamOf answers an OpenAI stream of n content frames.
func streamOf(n int) fasthttp.RequestHandler {
	frames := make([]string, n)
	for i := range frames {
		frames[i] = `data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"sim","choices":[{"index":0,"delta":{"content":" w` + strconv.Itoa(i) + `"},"finish_reason":null}]}` + "\n\n"
	}
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			_, _ = w.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"sim","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
			for _, f := range frames {
				_, _ = w.WriteString(f)
				_ = w.Flush()
			}
			_, _ = w.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"sim","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
		})
	}
}

// The harness's cost per request does not grow with the frames of a
// stream: nothing is allocated per frame (the in-memory server's own
// allocations are counted too, and are the same for both lengths).
func TestAllocationsPerRequest(t *testing.T) {
	sc := quick(t, Scenario{Wires: map[Wire]float64{WireUpstream: 1}, Stream: true})
	measure := func(frames int) float64 {
		r := inmemory(t, sc, streamOf(frames))
		rec := newRecorder("mem")
		c := newCall()
		v := &r.variants[0]
		var i uint32
		return testing.AllocsPerRun(200, func() {
			c.do(r.client, v, r.auth, time.Second, time.Now())
			if !c.out.completed {
				t.Fatalf("request failed: %s", c.out.code)
			}
			rec.sent()
			rec.record(i, &c.out)
			i++
			c.reset()
		})
	}
	short, long := measure(4), measure(64)
	require.LessOrEqual(t, short, 16.0)
	require.InDelta(t, short, long, 1, "allocations per frame: %v for 4 frames, %v for 64", short, long)

	json := quick(t, Scenario{Wires: map[Wire]float64{WireUpstream: 1}})
	r := inmemory(t, json, jsonHandler)
	c := newCall()
	allocs := testing.AllocsPerRun(200, func() {
		c.do(r.client, &r.variants[0], r.auth, time.Second, time.Now())
		c.reset()
	})
	require.LessOrEqual(t, allocs, 6.0)
}

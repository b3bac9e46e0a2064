package sim

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkChat measures the simulator's own cost per non-streaming reply of
// 64 tokens, the handler called directly.
func BenchmarkChat(b *testing.B) {
	s := New(Config{})
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"You are brief."},` +
		`{"role":"user","content":"Tell me about the sea."}],"max_tokens":64}`)
	var ctx fasthttp.RequestCtx
	run := func() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(fasthttp.MethodPost)
		ctx.Request.SetRequestURI("/v1/chat/completions")
		ctx.Request.SetBody(body)
		s.handle(&ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	run()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		run()
	}
}

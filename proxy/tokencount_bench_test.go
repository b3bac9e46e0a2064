package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"
)

// countBody32K is a conversation of about 32 KiB of text: alternating user
// and assistant turns of ordinary prose, with a declared tool.
func countBody32K(tb testing.TB) []byte {
	tb.Helper()
	para := "The gateway counts the tokens of a conversation locally, with the tier's tokenizer and chat template, so a client can size its prompt before it sends it. "
	msgs := []any{map[string]any{"role": "system", "content": "You are a careful assistant."}}
	size := 0
	for i := 0; size < 32<<10; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		text := strings.Repeat(para, 4) + strconv.Itoa(i)
		size += len(text)
		msgs = append(msgs, map[string]any{"role": role, "content": text})
	}
	b, err := sonic.Marshal(map[string]any{"model": "vaani", "messages": msgs, "tools": []any{map[string]any{"type": "function",
		"function": map[string]any{"name": "lookup", "description": "Look a word up.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}}}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func newCountHarness(tb testing.TB) *requestHarness {
	f := newRequestHarness(tb)
	f.ctx.Request.SetRequestURI("/api/v1/tokens/count")
	f.ctx.Request.SetBody(countBody32K(tb))
	for range 5 {
		f.do(tb)
	}
	return f
}

// BenchmarkTokenCount32K is one POST /api/v1/tokens/count of a 32 KiB
// conversation through the whole handler (edge, key check, decode,
// validation, counting).
func BenchmarkTokenCount32K(b *testing.B) {
	f := newCountHarness(b)
	b.SetBytes(int64(len(f.ctx.Request.Body())))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f.do(b)
	}
}

// The answer is a count, and the same body always counts the same.
func TestTokenCount32KAnswers(t *testing.T) {
	f := newCountHarness(t)
	if ct := string(f.ctx.Response.Header.ContentType()); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	n, err := sonic.Get(f.ctx.Response.Body(), "input_tokens")
	if err != nil {
		t.Fatalf("no input_tokens in %s", f.ctx.Response.Body())
	}
	v, _ := n.Int64()
	if v < 6000 || v > 9000 {
		t.Fatalf("input_tokens %d for about 32 KiB of English prose", v)
	}
	first := string(f.ctx.Response.Body())
	f.do(t)
	if string(f.ctx.Response.Body()) != first || f.ctx.Response.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("a second count differs: %s", f.ctx.Response.Body())
	}
}

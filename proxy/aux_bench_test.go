package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// cannedEmbeddings answers 8 inputs with 8 vectors of 256 floats.
func cannedEmbeddings() []byte {
	var b strings.Builder
	b.WriteString(`{"object":"list","model":"m","data":[`)
	for i := range 8 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"object":"embedding","index":` + strconv.Itoa(i) + `,"embedding":[`)
		for j := range 256 {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString("0.0123456")
		}
		b.WriteString(`]}`)
	}
	b.WriteString(`],"usage":{"prompt_tokens":320,"total_tokens":320}}`)
	return []byte(b.String())
}

const cannedGuard = `{"id":"g","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"unsafe\nS1,S10"},"finish_reason":"stop"}],"usage":{"prompt_tokens":40,"completion_tokens":5,"total_tokens":45}}`

const cannedRerank = `{"id":"r","results":[{"index":3,"relevance_score":0.9},{"index":0,"relevance_score":0.8},{"index":1,"relevance_score":0.5},{"index":2,"relevance_score":0.5},{"index":4,"relevance_score":0.4},{"index":5,"relevance_score":0.3},{"index":6,"relevance_score":0.2},{"index":7,"relevance_score":0.1}],"usage":{"total_tokens":300}}`

func auxInputs() string {
	words := strings.Repeat("lorem ipsum dolor sit amet ", 6)
	in := make([]string, 8)
	for i := range in {
		in[i] = strconv.Quote(words + strconv.Itoa(i))
	}
	return "[" + strings.Join(in, ",") + "]"
}

func newAuxHarness(tb testing.TB, path, body string, canned []byte) *requestHarness {
	f := newRequestHarness(tb, func(o *fixtureOptions) {
		o.aux = true
		o.upstream = func(c *UpstreamConfig) { c.Transport = cannedTransport{body: canned} }
	})
	f.ctx.Request.SetRequestURI(path)
	f.ctx.Request.SetBodyString(body)
	for range 20 {
		f.do(tb)
	}
	return f
}

// The three aux routes through the whole handler with a canned upstream,
// beside BenchmarkNonStreamRequest (chat's non-streaming path).
func BenchmarkAuxRequest(b *testing.B) {
	cases := []struct {
		name, path, body string
		canned           []byte
	}{
		{"embeddings", "/api/v1/embeddings", `{"model":"gw-embed","input":` + auxInputs() + `}`, cannedEmbeddings()},
		{"rerank", "/api/v1/rerank", `{"model":"gw-rerank","query":"lorem ipsum","documents":` + auxInputs() + `}`, []byte(cannedRerank)},
		{"moderation", "/api/v1/moderations", `{"model":"gw-guard","input":"lorem ipsum dolor sit amet"}`, []byte(cannedGuard)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			f := newAuxHarness(b, c.path, c.body, c.canned)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				f.do(b)
			}
			if f.ctx.Response.StatusCode() != fasthttp.StatusOK {
				b.Fatal(string(f.ctx.Response.Body()))
			}
		})
	}
}

package refproxy

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// benchProxy serves a small JSON reply behind a reference proxy, both on
// loopback listeners, and returns a client of the proxy.
func benchProxy(b *testing.B, reply []byte) *fasthttp.HostClient {
	upstreamURL := serveUpstream(b, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(reply)
	})
	proxyURL := serveProxy(b, upstreamURL)
	return &fasthttp.HostClient{Addr: proxyURL[len("http://"):], MaxConns: 1024}
}

var (
	benchRequest = []byte(`{"model":"mira","messages":[{"role":"user","content":"Hello"}]}`)
	benchReply   = []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"mira",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hi."},"finish_reason":"stop"}]}`)
)

func doBench(b *testing.B, c *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) {
	if err := c.Do(req, resp); err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode() != fasthttp.StatusOK || len(resp.Body()) != len(benchReply) {
		b.Fatalf("status %d, body %q", resp.StatusCode(), resp.Body())
	}
}

func newBenchRequest() *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/v1/chat/completions")
	req.Header.SetHost("proxy")
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	req.SetBody(benchRequest)
	return req
}

// BenchmarkSmallRequest is one small JSON request and reply through the
// proxy, over loopback. The allocations counted are the client's, the
// proxy's and the upstream's together.
func BenchmarkSmallRequest(b *testing.B) {
	c := benchProxy(b, benchReply)
	req := newBenchRequest()
	defer fasthttp.ReleaseRequest(req)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	doBench(b, c, req, resp)

	b.ReportAllocs()
	b.SetBytes(int64(len(benchRequest) + len(benchReply)))
	for b.Loop() {
		doBench(b, c, req, resp)
	}
}

// BenchmarkSmallRequestParallel is BenchmarkSmallRequest from GOMAXPROCS
// clients at once.
func BenchmarkSmallRequestParallel(b *testing.B) {
	c := benchProxy(b, benchReply)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchRequest) + len(benchReply)))
	b.RunParallel(func(pb *testing.PB) {
		req := newBenchRequest()
		defer fasthttp.ReleaseRequest(req)
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseResponse(resp)
		for pb.Next() {
			doBench(b, c, req, resp)
		}
	})
}

package proxy

import (
	"strings"
	"testing"

	"github.com/bytedance/sonic"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// switchTransport answers every call with its current body.
type switchTransport struct{ body []byte }

func (s *switchTransport) RoundTrip(_ *fasthttp.HostClient, _ *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	resp.SetStatusCode(fasthttp.StatusOK)
	resp.Header.SetContentType("application/json")
	resp.SetBody(s.body)
	return false, nil
}

// auxAgainst returns a harness whose auxiliary upstreams answer tr's body.
func auxAgainst(t *testing.T, tr *switchTransport) *requestHarness {
	return newRequestHarness(t, func(o *fixtureOptions) {
		o.aux = true
		canned := o.upstream
		o.upstream = func(c *UpstreamConfig) {
			canned(c)
			if c.Path != "" { // the auxiliary tiers
				c.Transport, c.Retries = tr, -1
			}
		}
	})
}

func (f *requestHarness) post(path, body string) (int, []byte) {
	f.ctx.Response.Reset()
	f.ctx.Request.SetRequestURI(path)
	f.ctx.Request.SetBodyString(body)
	f.handler(&f.ctx)
	return f.ctx.Response.StatusCode(), f.ctx.Response.Body()
}

// The vectors are copied from the upstream's answer byte for byte, in
// input order whatever the upstream's order, and the envelope is the
// gateway's own.
func TestEmbeddingsCopyVectorsVerbatim(t *testing.T) {
	tr := &switchTransport{}
	f := auxAgainst(t, tr)
	tr.body = []byte(`{"object":"list","data":[{"index":1,"object":"embedding","embedding":[ 1.5e-3 ,-2]},` +
		`{"embedding":[0.25,1E+2],"index":0}],"model":"upstream-secret","usage":{"prompt_tokens":4}}`)
	status, body := f.post("/api/v1/embeddings", `{"model":"gw-embed","input":["a","b"]}`)
	require.Equal(t, 200, status, "%s", body)
	require.Contains(t, string(body), `"data":[{"object":"embedding","index":0,"embedding":[0.25,1E+2]},{"object":"embedding","index":1,"embedding":[ 1.5e-3 ,-2]}]`)
	require.NotContains(t, string(body), "upstream-secret")
	var doc map[string]any
	require.NoError(t, sonic.Unmarshal(body, &doc))
	require.EqualValues(t, 4, doc["usage"].(map[string]any)["prompt_tokens"])

	tr.body = []byte(`{"data":[{"index":0,"embedding":"AAAAPw=="}]}`)
	status, body = f.post("/v1/embeddings", `{"model":"gw-embed","input":"a","encoding_format":"base64"}`)
	require.Equal(t, 200, status, "%s", body)
	require.Contains(t, string(body), `"embedding":"AAAAPw=="`)
}

// An upstream answer the gateway cannot serve as it is — a vector that is
// not numbers, of the other encoding, a wrong count, a duplicate or missing
// index, bytes past the JSON — is refused as an upstream failure (503
// upstream_overloaded), never passed on.
func TestAuxRefusesHostileUpstreamAnswers(t *testing.T) {
	tr := &switchTransport{}
	f := auxAgainst(t, tr)
	huge := `{"data":[` + strings.Repeat(`{"index":0,"embedding":[1]},`, 40000) + `{"index":1,"embedding":[1]}]}`
	for _, c := range []struct{ path, req, answer string }{
		{"/api/v1/embeddings", `{"model":"gw-embed","input":["a","b"]}`, `{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":["1"]}]}`},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":["a","b"]}`, `{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[1,null]}]}`},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":["a","b"]}`, `{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":[1]}]}}`},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":["a","b"]}`, `{"data":[{"index":0,"embedding":[1]},{"index":1,"embedding":"AAAA"}]}`},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":["a","b"]}`, `{"data":[{"index":0,"embedding":[1]}]}`},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":["a","b"]}`, `{"data":[{"index":1,"embedding":[1]},{"index":1,"embedding":[1]}]}`},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":["a","b"]}`, `{"data":[{"embedding":[1]},{"index":1,"embedding":[1]}]}`},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":["a","b"]}`, huge},
		{"/api/v1/embeddings", `{"model":"gw-embed","input":"a","encoding_format":"base64"}`, `{"data":[{"index":0,"embedding":[1]}]}`},
		{"/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":["a","b"]}`, `{"results":[{"index":0,"relevance_score":0.5}]}`},
		{"/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":["a","b"]}`, `{"results":[{"index":0,"relevance_score":0.5},{"index":0,"relevance_score":0.4}]}`},
		{"/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":["a","b"]}`, `{"results":[{"index":0,"relevance_score":0.5},{"index":1,"relevance_score":"x"}]}`},
		{"/api/v1/rerank", `{"model":"gw-rerank","query":"q","documents":["a","b"]}`, `{"results":[{"index":0,"relevance_score":0.5},{"index":2,"relevance_score":0.1}]}`},
	} {
		tr.body = []byte(c.answer)
		status, body := f.post(c.path, c.req)
		require.Equal(t, 503, status, "%s: %.200s", c.answer[:min(len(c.answer), 120)], body)
		require.Contains(t, string(body), "upstream_overloaded")
	}
}

// An embeddings answer over the upstream's response cap is an upstream
// failure before it is scanned, as chat's is.
func TestEmbeddingsResponseCap(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.aux = true
		o.upstream = func(uc *UpstreamConfig) {
			if uc.Path != "" {
				uc.MaxResponseBytes, uc.Retries = 4096, -1
			}
		}
	})
	r := f.post(t, "/api/v1/embeddings", `{"model":"gw-embed","input":["a","b","c","d","e","f","g","h"],"dimensions":64}`)
	require.Equal(t, 503, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"code":"upstream_overloaded"`)
	r = f.post(t, "/api/v1/embeddings", `{"model":"gw-embed","input":"a","dimensions":8}`)
	require.Equal(t, 200, r.status, "%s", r.body)
}

package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/hotpath"
)

// statusTransport answers every call with status and body.
type statusTransport struct {
	status int
	body   []byte
}

func (c statusTransport) RoundTrip(_ *fasthttp.HostClient, _ *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	resp.SetStatusCode(c.status)
	resp.Header.SetContentType("application/json")
	resp.SetBody(c.body)
	return false, nil
}

// probeUpstreams binds the three auxiliary tiers to a simulator, or to
// transport when it is set.
func probeUpstreams(t *testing.T, transport fasthttp.RoundTripper) (embed, rerank, guard *Upstream) {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	s := sim.New(sim.Config{})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Shutdown)
	tiers := hotpath.DefaultAuxTiers()
	bind := func(i int, path, model string) *Upstream {
		uc := UpstreamConfig{BaseURL: "http://sim.test/v1", Path: path, Model: model, Transport: transport,
			Dial: func(string) (net.Conn, error) { return ln.Dial() }}
		up, err := NewUpstream(&tiers[i], uc, hotpath.NewBreaker(hotpath.BreakerConfig{}, nil))
		require.NoError(t, err)
		return up
	}
	return bind(0, "/embeddings", "sim-embed"), bind(1, "/rerank", "sim-rerank"), bind(2, "/chat/completions", "guard-sim")
}

func probeClass(err error) string {
	if err == nil {
		return ""
	}
	return err.(*ProbeFailure).Class
}

// Each auxiliary tier's probe speaks its route's wire to the simulator:
// one embeddings input, a query and one document in either rerank shape,
// one guard verdict (an unsafe verdict is an answer as good as a safe
// one). Directives fail or slow them as they would a route's request.
func TestAuxProbesAgainstSimulator(t *testing.T) {
	embed, rerank, guard := probeUpstreams(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, embed.ProbeEmbeddings(ctx, DefaultProbePrompt))
	require.NoError(t, rerank.ProbeRerank(ctx, RerankCohere, DefaultProbePrompt, ProbeDocument))
	require.NoError(t, rerank.ProbeRerank(ctx, RerankTEI, DefaultProbePrompt, ProbeDocument))
	require.NoError(t, rerank.ProbeRerank(ctx, "", DefaultProbePrompt, ProbeDocument), "empty is cohere")
	require.NoError(t, guard.ProbeGuard(ctx, DefaultProbePrompt))
	require.NoError(t, guard.ProbeGuard(ctx, "ping [[sim:unsafe=S1]]"))

	require.Equal(t, "status_500", probeClass(embed.ProbeEmbeddings(ctx, "ping [[sim:status=500]]")))
	require.Equal(t, "status_503", probeClass(rerank.ProbeRerank(ctx, RerankCohere, "ping [[sim:fail_first=1]]", ProbeDocument)),
		"a probe is not retried")
	require.Equal(t, "status_429", probeClass(guard.ProbeGuard(ctx, "ping [[sim:fault=rate_limited]]")))
	require.Equal(t, "malformed", probeClass(guard.ProbeGuard(ctx, "ping [[sim:garbled]]")))
	require.Equal(t, "connect", probeClass(embed.ProbeEmbeddings(ctx, "ping [[sim:fault=reset]]")))

	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	require.Equal(t, "timeout", probeClass(rerank.ProbeRerank(short, RerankCohere, "ping [[sim:ttft_ms=2000]]", ProbeDocument)))

	// A probe is gateway traffic: it never moves the breaker.
	for _, up := range []*Upstream{embed, rerank, guard} {
		require.Equal(t, hotpath.BreakerClosed, up.Breaker.State())
	}
}

// An answer the route would refuse is a failed probe (malformed), never a
// success: a vector that is not numbers, a wrong count, a duplicate or
// missing index, a guard reply cut at its budget.
func TestAuxProbesRefuseHostileAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, body := range []string{
		`{"data":[]}`,
		`{"data":[{"index":0,"embedding":[0.1,0.2]},{"index":1,"embedding":[0.1]}]}`,
		`{"data":[{"index":1,"embedding":[0.1,0.2]}]}`,
		`{"data":[{"embedding":[0.1,0.2]}]}`,
		`{"data":[{"index":0,"embedding":"AAAA"}]}`,
		`{"data":[{"index":0,"embedding":["a","b"]}]}`,
		`{"data":[{"index":0,"embedding":[0.1,{"x":1}]}]}`,
		`{"data":[{"index":0,"embedding":[]}]}`,
		`{"data":[{"index":0,"embedding":[0.1,0.2]`,
		`[1,2,3]`,
	} {
		embed, _, _ := probeUpstreams(t, statusTransport{status: 200, body: []byte(body)})
		require.Equal(t, "malformed", probeClass(embed.ProbeEmbeddings(ctx, "ping")), body)
	}
	for _, c := range []struct{ shape, body string }{
		{RerankCohere, `{"results":[{"index":0,"relevance_score":0.5},{"index":0,"relevance_score":0.4}]}`},
		{RerankCohere, `{"results":[{"index":0}]}`},
		{RerankCohere, `{"results":[{"index":0,"relevance_score":"high"}]}`},
		{RerankTEI, `{"results":[{"index":0,"score":0.5}]}`},
		{RerankTEI, `[{"index":1,"score":0.5}]`},
	} {
		_, rerank, _ := probeUpstreams(t, statusTransport{status: 200, body: []byte(c.body)})
		require.Equal(t, "malformed", probeClass(rerank.ProbeRerank(ctx, c.shape, "q", "d")), c.body)
	}
	for _, body := range []string{
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"unsafe\nS1,S"},"finish_reason":"length"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"maybe"},"finish_reason":"stop"}]}`,
		`{"error":{"message":"no"}}`,
	} {
		_, _, guard := probeUpstreams(t, statusTransport{status: 200, body: []byte(body)})
		require.Equal(t, "malformed", probeClass(guard.ProbeGuard(ctx, "ping")), body)
	}
	embed, _, _ := probeUpstreams(t, statusTransport{status: 502, body: []byte(`{"error":{"message":"bad gateway"}}`)})
	require.Equal(t, "status_502", probeClass(embed.ProbeEmbeddings(ctx, "ping")))
}

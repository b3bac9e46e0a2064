package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/memory"
)

// An upstream closes idle connections after its keep-alive timeout (200 ms
// here; uvicorn's is 5 s), while the gateway keeps them pooled for longer.
// The first request after a pause draws a closed connection: the pool's
// idle connections are closed and the request is sent again on a new one
// at once, not failed, backed off, or counted against the tier. Before,
// each attempt drew another closed connection and the request failed
// 503 model_unavailable.
func TestStalePooledUpstreamConnectionsAreRedialled(t *testing.T) {
	const burst = 6
	var (
		mu      sync.Mutex
		waiting int
		release = make(chan struct{})
		served  atomic.Int64
	)
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The burst's requests wait for one another, so that each holds
		// a connection of its own.
		mu.Lock()
		waiting++
		if waiting == burst {
			close(release)
		}
		mu.Unlock()
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"u","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`))
	}))
	upstream.Config.IdleTimeout = 200 * time.Millisecond
	upstream.Start()
	t.Cleanup(upstream.Close)

	f := newChatFixture(t, func(o *fixtureOptions) {
		o.upstream = func(uc *UpstreamConfig) {
			uc.BaseURL, uc.Dial = upstream.URL+"/v1", nil
		}
	})
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() {
			r := f.post(t, "/v1/chat/completions", chatBody(""))
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		})
	}
	wg.Wait()
	require.Equal(t, int64(burst), served.Load())

	time.Sleep(500 * time.Millisecond) // the upstream closes every idle connection
	for range 3 {
		r := f.post(t, "/v1/chat/completions", chatBody(""))
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.True(t, strings.Contains(string(r.body), `"hello"`), "%s", r.body)
	}
	require.Equal(t, 1.0, metricValue(t, f, "gateway_chat_upstream_redials_total"), "one redial: the pool was emptied")
	require.Equal(t, 0.0, metricValue(t, f, "gateway_chat_upstream_retries_total"), "no attempt failed")
}

// A health probe that draws a pooled connection the upstream closed while
// it was idle is sent again on a new one: the tier is not reported down
// because its keep-alive timeout is shorter than the pool's.
func TestProbeRedialsAStalePooledConnection(t *testing.T) {
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"u","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	}))
	upstream.Config.IdleTimeout = 100 * time.Millisecond
	upstream.Start()
	t.Cleanup(upstream.Close)
	tier := hotpath.DefaultTiers()[0]
	up, err := NewUpstream(&tier, UpstreamConfig{BaseURL: upstream.URL + "/v1", Model: "m"}, hotpath.NewBreaker(hotpath.BreakerConfig{}, nil))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, up.Probe(ctx, "ping"))
	time.Sleep(300 * time.Millisecond) // the upstream closes the idle connection
	require.NoError(t, up.Probe(ctx, "ping"))
}

// Memory's two upstream calls, the fact extractor and the embed tier,
// redial a pooled connection the upstream closed as chat does: a turn
// after a pause keeps its memory instead of losing it to the pool.
func TestMemoryCallsRedialAStalePooledConnection(t *testing.T) {
	var calls atomic.Int64
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/embeddings") {
			_, _ = w.Write([]byte(`{"object":"list","model":"e","data":[{"object":"embedding","index":0,"embedding":[0.6,0.8]}],"usage":{"prompt_tokens":2,"total_tokens":2}}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"u","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"{\"facts\":[{\"kind\":\"preference\",\"key\":\"units\",\"value\":\"metric\"}]}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}`))
	}))
	upstream.Config.IdleTimeout = 100 * time.Millisecond
	upstream.Start()
	t.Cleanup(upstream.Close)

	tiers, aux := hotpath.DefaultTiers(), hotpath.DefaultAuxTiers()
	chatUp, err := NewUpstream(&tiers[0], UpstreamConfig{BaseURL: upstream.URL + "/v1", Model: "m"}, hotpath.NewBreaker(hotpath.BreakerConfig{}, nil))
	require.NoError(t, err)
	i := slices.IndexFunc(aux, func(t hotpath.Tier) bool { return t.Name == hotpath.TierEmbed })
	embedUp, err := NewUpstream(&aux[i], UpstreamConfig{BaseURL: upstream.URL + "/v1", Path: "/embeddings", Model: "e"},
		hotpath.NewBreaker(hotpath.BreakerConfig{}, nil))
	require.NoError(t, err)
	extractor, embedder := NewExtractor(chatUp), NewEmbedder(embedUp, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for round := range 2 {
		facts, err := extractor.Extract(ctx, "I use metric units", "Noted.")
		require.NoError(t, err, "round %d", round)
		require.Equal(t, []memory.Fact{{Key: "units", Value: "metric"}}, facts)
		vecs, err := embedder.Embed(ctx, []string{"units: metric"})
		require.NoError(t, err, "round %d", round)
		require.Len(t, vecs, 1)
		time.Sleep(300 * time.Millisecond) // the upstream closes the idle connections
	}
	require.Equal(t, int64(4), calls.Load(), "each call reached the upstream once")
}

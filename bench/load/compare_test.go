package load

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bytedance/sonic"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

func TestCompareInterleaves(t *testing.T) {
	var a arrivals
	targets := []Target{
		{Name: "a", BaseURL: serve(t, a.handler("a"))},
		{Name: "b", BaseURL: serve(t, a.handler("b"))},
	}
	sc := quick(t, Scenario{Concurrency: 2, Duration: time.Second, Warmup: 100 * time.Millisecond})
	results, err := Compare(context.Background(), sc, targets, Options{Round: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, results, 2)
	for i, res := range results {
		require.Equal(t, targets[i].Name, res.Target)
		require.Equal(t, 5, res.Rounds)
		require.Positive(t, res.Completed)
		require.Equal(t, res.Requests, res.Completed)
		require.Equal(t, time.Second, res.Elapsed)
		require.Positive(t, res.Throughput)
	}

	// The warm-ups (a, then b), then five rounds: a b, b a, a b, b a, a b.
	// Each round switches target once; the rotation puts the same target
	// on both sides of a round's boundary.
	a.mu.Lock()
	defer a.mu.Unlock()
	var runs []string
	for _, l := range a.labels {
		if len(runs) == 0 || runs[len(runs)-1] != l {
			runs = append(runs, l)
		}
	}
	require.Equal(t, []string{"a", "b", "a", "b", "a", "b", "a", "b"}, runs,
		"warm-up a, warm-up b and round 1's b, round 1's a and round 2's a, ...")
}

func TestCompareDirectAndProxied(t *testing.T) {
	base := startSim(t)
	// A "proxy" that adds 5 ms before answering like the simulator.
	delayed := serve(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(5 * time.Millisecond)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(completion)
	})
	sc := quick(t, Scenario{Concurrency: 2, ReplyTokens: 4, Duration: 600 * time.Millisecond})
	results, err := Compare(context.Background(), sc, []Target{
		{Name: "direct", BaseURL: base, Wire: WireUpstream},
		{Name: "proxy", BaseURL: delayed},
	}, Options{Round: 200 * time.Millisecond})
	require.NoError(t, err)
	direct, via := results[0], results[1]
	over := Overhead(direct, via, "latency")
	require.Len(t, over, len(Percentiles))
	require.GreaterOrEqual(t, over[50], 4*time.Millisecond)
	require.Positive(t, ThroughputRatio(via, direct))
	require.Equal(t, 0.5, ThroughputRatio(&Result{Throughput: 100}, &Result{Throughput: 200}))
	require.Zero(t, ThroughputRatio(via, &Result{}))
	require.Zero(t, (&Result{}).Quantile("latency", 99), "no histogram")
	require.Zero(t, direct.Quantile("nosuch", 99))
}

func TestFrontier(t *testing.T) {
	base := startSim(t)
	// Adds 50 ms to every answer: within a 200 ms budget, never within 10 ms.
	slowed := serve(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(50 * time.Millisecond)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(completion)
	})
	sc := quick(t, Scenario{Rate: 20, ReplyTokens: 4})
	var out bytes.Buffer
	start := time.Now()
	points, err := Frontier(context.Background(), sc,
		Target{Name: "slowed", BaseURL: slowed}, Target{Name: "direct", BaseURL: base},
		[]time.Duration{10 * time.Millisecond, 200 * time.Millisecond},
		Options{ProbeDuration: 250 * time.Millisecond, FrontierBudget: 3 * time.Second, Progress: &out})
	require.NoError(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Len(t, points, 2)
	require.Equal(t, 10*time.Millisecond, points[0].Budget)
	require.Zero(t, points[0].Rate, "50 ms over the direct path is never within 10 ms:\n%s", out.String())
	require.Equal(t, 200*time.Millisecond, points[1].Budget)
	require.GreaterOrEqual(t, points[1].Rate, 20.0, out.String())
	require.Greater(t, points[1].P99Overhead, 10*time.Millisecond, out.String())
	require.Less(t, points[1].P99Overhead, 200*time.Millisecond)
	require.Contains(t, out.String(), "frontier")

	_, err = Frontier(context.Background(), sc, Target{Name: "x", BaseURL: "http://192.0.2.1"},
		Target{Name: "direct", BaseURL: base}, []time.Duration{time.Millisecond}, Options{})
	require.ErrorIs(t, err, ErrNotLoopback)
}

func TestBracket(t *testing.T) {
	probes := []probeResult{
		{rate: 10, overhead: time.Millisecond, ok: true},
		{rate: 20, overhead: 3 * time.Millisecond, ok: true},
		{rate: 40, overhead: time.Millisecond, ok: false},
		{rate: 80, overhead: 9 * time.Millisecond, ok: true},
	}
	lo, hi := bracket(probes, 2*time.Millisecond)
	require.Equal(t, 10.0, lo.rate)
	require.Equal(t, 20.0, hi.rate)
	lo, hi = bracket(probes, 5*time.Millisecond)
	require.Equal(t, 20.0, lo.rate)
	require.Equal(t, 40.0, hi.rate, "an erring probe fails every budget")
	lo, hi = bracket(probes, 500*time.Microsecond)
	require.Nil(t, lo)
	require.Equal(t, 10.0, hi.rate)
	lo, hi = bracket(probes[:2], 5*time.Millisecond)
	require.Equal(t, 20.0, lo.rate)
	require.Nil(t, hi)
}

// Rounds interleave short requests only: one target, or replies that outlast
// several rounds, run their whole window at once — a round ends only when
// its requests have, so long streams in short rounds would mostly wait.
func TestCompareRoundsFitTheReplies(t *testing.T) {
	var a arrivals
	two := []Target{{Name: "a", BaseURL: serve(t, a.handler("a"))}, {Name: "b", BaseURL: serve(t, a.handler("b"))}}
	for _, tc := range []struct {
		name    string
		targets []Target
		sc      Scenario
		rounds  int
	}{
		{"short replies, two targets", two, Scenario{Concurrency: 1, Duration: time.Second}, 2},
		{"one target", two[:1], Scenario{Concurrency: 1, Duration: time.Second}, 1},
		{"long replies", two, Scenario{Concurrency: 1, Duration: time.Second, ReplyTokens: 30, ITLms: 100}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.sc.Warmup = -1
			results, err := Compare(context.Background(), quick(t, tc.sc), tc.targets, Options{})
			require.NoError(t, err)
			for _, res := range results {
				require.Equal(t, tc.rounds, res.Rounds)
			}
		})
	}
}

// A run counts the connections its clients opened after the warm-up: one per
// request against a target that closes after every response, none more
// against one that keeps them.
func TestConnectionsOpenedAreCounted(t *testing.T) {
	ok := func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{"object":"chat.completion"}`) }
	closing := func(ctx *fasthttp.RequestCtx) { ok(ctx); ctx.SetConnectionClose() }
	sc := quick(t, Scenario{Concurrency: 2, MaxRequests: 40, Duration: 5 * time.Second, Warmup: 200 * time.Millisecond})

	res, err := Run(context.Background(), sc, Target{Name: "kept", BaseURL: serve(t, ok)}, Options{})
	require.NoError(t, err)
	require.Equal(t, int64(40), res.Completed)
	require.Zero(t, res.Connections, "the warm-up's connections carry on")

	res, err = Run(context.Background(), sc, Target{Name: "closed", BaseURL: serve(t, closing)}, Options{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Connections, res.Completed-2, "a connection per request")
}

// A comparison drives a target that names, routes and authenticates
// requests its own way with exactly what it was told: the server records
// what arrived.
func TestCompareCustomTarget(t *testing.T) {
	type arrival struct{ path, apiKey, authorization, model string }
	var (
		mu   sync.Mutex
		seen []arrival
	)
	peer := serve(t, func(ctx *fasthttp.RequestCtx) {
		name := "(none)"
		if model, err := sonic.Get(ctx.PostBody(), "model"); err == nil {
			name, _ = model.String()
		}
		mu.Lock()
		seen = append(seen, arrival{string(ctx.Path()), string(ctx.Request.Header.Peek("x-api-key")),
			string(ctx.Request.Header.Peek("Authorization")), name})
		mu.Unlock()
		ctx.SetContentType("application/json")
		ctx.SetBodyString(completion)
	})
	sc := quick(t, Scenario{Concurrency: 2, Duration: 400 * time.Millisecond})
	results, err := Compare(context.Background(), sc, []Target{
		{Name: "direct", BaseURL: startSim(t), Wire: WireUpstream},
		{Name: "peer", BaseURL: peer + "/openai", Wire: WireUpstream,
			Model: "openai/sim-{tier}", Path: "/chat/completions", AuthHeader: "x-api-key: peer-key"},
	}, Options{Round: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Positive(t, results[1].Completed)
	require.Zero(t, results[1].Errors)

	mu.Lock()
	defer mu.Unlock()
	require.EqualValues(t, results[1].Requests, len(seen), "every request sent, warm-up none")
	for _, a := range seen {
		require.Equal(t, arrival{"/openai/chat/completions", "peer-key", "", "openai/sim-mira"}, a)
	}
}

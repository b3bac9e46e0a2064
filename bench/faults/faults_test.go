package faults

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/edgegw/gateway/bench/frameorder"
	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/proxy"
)

// keySource is a KeySource holding fixed user keys.
type keySource map[hotpath.TokenHash]*hotpath.Principal

func (m keySource) LookupKey(_ context.Context, h hotpath.TokenHash) (*hotpath.Principal, error) {
	if p, ok := m[h]; ok {
		c := *p // a record of its own, as from the database
		return &c, nil
	}
	return nil, hotpath.ErrKeyNotFound
}

func (keySource) LookupServiceToken(context.Context, hotpath.TokenHash) (*hotpath.ServiceToken, error) {
	return nil, hotpath.ErrKeyNotFound
}

// Bounds of the gateway under test: short, so that hangs and stalls end
// quickly, and far under SlowTTFT.
const (
	testDeadline   = time.Second
	testStreamIdle = 300 * time.Millisecond
)

// stack is a gateway in front of the simulator, both on in-memory
// listeners, the way the proxy package's chat tests build one, with the
// production breaker (half of five or more distinct requests in ten
// seconds, a ten-second cooldown) so that the scorecard's
// healing is exercised.
type stack struct {
	client *http.Client
	key    string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	simLn := fasthttputil.NewInmemoryListener()
	s := sim.New(sim.Config{})
	go func() { _ = s.Serve(simLn) }()
	t.Cleanup(s.Shutdown)

	tiers := hotpath.DefaultTiers()
	ups := map[string]*proxy.Upstream{}
	for i := range tiers {
		tiers[i].Deadline = testDeadline
	}
	for i := range tiers {
		up, err := proxy.NewUpstream(&tiers[i], proxy.UpstreamConfig{
			BaseURL: "http://sim.test/v1", Model: "sim-" + tiers[i].Name, Reasons: tiers[i].Graded,
			StreamIdle: testStreamIdle, Backoff: time.Millisecond, MaxRetryWait: time.Millisecond,
			Dial: func(string) (net.Conn, error) { return simLn.Dial() },
		}, hotpath.NewBreaker(hotpath.BreakerConfig{}, nil))
		require.NoError(t, err)
		ups[tiers[i].Name] = up
	}
	log := slog.New(slog.DiscardHandler)
	set := metrics.NewSet()
	chat, err := proxy.NewChat(proxy.ChatConfig{Tiers: tiers, Upstreams: ups, Log: log, Metrics: set})
	require.NoError(t, err)

	key, h := hotpath.GenerateToken(hotpath.TokenUser)
	src := keySource{h: {KeyID: "key-1", UserID: "user-1", OrgID: "org-1", Kind: hotpath.KindDeveloper}}
	v, err := hotpath.NewVerifier(hotpath.VerifierConfig{}, src)
	require.NoError(t, err)
	v.SetLive(true)
	t.Cleanup(v.Close)
	rt := proxy.NewRouter(proxy.NewEdge(proxy.EdgeConfig{Verifier: v, Log: log, Metrics: set}))
	chat.Register(rt)

	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: rt.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return &stack{key: key, client: &http.Client{
		Timeout: 20 * time.Second, // the per-request budget, far over the gateway's bounds
		Transport: &http.Transport{
			DialContext:        func(context.Context, string, string) (net.Conn, error) { return ln.Dial() },
			DisableCompression: true,
		},
	}}
}

const base = "http://gw.test"

// TestScorecard runs every case on every wire against the gateway; every
// score must pass.
func TestScorecard(t *testing.T) {
	st := newStack(t)
	cases := Cases()
	began := time.Now()
	scores := Run(t.Context(), st.client, base, st.key, cases)
	var table bytes.Buffer
	pass, fail := WriteTable(&table, scores)
	t.Logf("scorecard in %v:\n%s", time.Since(began).Round(time.Millisecond), table.String())
	require.Zero(t, fail, "every score must pass:\n%s", table.String())

	want := 0
	for _, c := range cases {
		want += len(c.Want)
	}
	require.Equal(t, want, pass)
	require.Len(t, scores, want)
	for _, s := range scores {
		require.Equal(t, s.Want, s.Got, "%s on %s", s.Case.Name, s.Wire)
	}
}

// TestCasesCoverEveryFault: every fault the simulator injects is a case,
// on every wire of both modes (the OpenAI route with and without usage when
// streaming), and names are unique.
func TestCasesCoverEveryFault(t *testing.T) {
	names := map[string]bool{}
	directives := map[string]bool{}
	for _, c := range Cases() {
		require.False(t, names[c.Name], "duplicate case %s", c.Name)
		names[c.Name] = true
		directives[c.Directive] = true
		wires := []frameorder.Wire{frameorder.V1, frameorder.V2, frameorder.OpenAI, frameorder.Anthropic, frameorder.Responses}
		if c.Stream {
			wires = append(wires, frameorder.OpenAIUsage)
			require.True(t, strings.HasSuffix(c.Name, "/sse"))
		} else {
			require.True(t, strings.HasSuffix(c.Name, "/json"))
		}
		require.Len(t, c.Want, len(wires), c.Name)
		for _, w := range wires {
			require.Contains(t, c.Want, w, c.Name)
		}
	}
	joined := ""
	for d := range directives {
		joined += d + " "
	}
	for _, fault := range []string{"fault=reset", "fault=hang", "fault=stall_after=", "fault=malformed_after=", "fault=no_done",
		"fault=rate_limited]]", "fault=rate_limited_bare", "fault=context_length", "fault=content_filter", "status=503", "status=500",
		"fail_first=", "drop_after=", "ttft_ms="} {
		require.Contains(t, joined, fault)
	}
	for _, mode := range []string{"/json", "/sse"} {
		for _, n := range []string{"healthy", "rate_limited", "rate_limited_bare", "fail_first", "status_503", "status_500", "reset", "hang",
			"slow_first_token", "drop_after", "stall_after", "malformed_after", "context_length", "content_filter"} {
			require.True(t, names[n+mode], n+mode)
		}
	}
	require.True(t, names["no_done/sse"])
}

// TestWrongExpectation: a case whose expectation is wrong shows as a FAIL
// row, and the table counts it.
func TestWrongExpectation(t *testing.T) {
	st := newStack(t)
	wrong := Case{Name: "reset/json", Directive: "[[sim:fault=reset]]", Tier: "mira", Want: map[frameorder.Wire]Expect{
		frameorder.V1:     {Status: 200, Complete: true},            // wrong: a reset is refused
		frameorder.OpenAI: {Status: 503, Code: "model_unavailable"}, // right
	}}
	stall := Case{Name: "stall_after/sse", Directive: "[[sim:tokens=6]] [[sim:fault=stall_after=2]]", Stream: true,
		Want: map[frameorder.Wire]Expect{frameorder.V2: {Status: 200, Code: "upstream_overloaded", Failed: true}}} // wrong code
	scores := Run(t.Context(), st.client, base, st.key, []Case{wrong, stall})
	require.Len(t, scores, 3)
	require.False(t, scores[0].Pass)
	require.Equal(t, "200 complete", scores[0].Want)
	require.Equal(t, "503 model_unavailable", scores[0].Got)
	require.True(t, scores[1].Pass)
	require.False(t, scores[2].Pass)
	require.Equal(t, "200 failed upstream_timeout", scores[2].Got)

	var table bytes.Buffer
	pass, fail := WriteTable(&table, scores)
	require.Equal(t, 1, pass)
	require.Equal(t, 2, fail)
	lines := strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n")
	require.Len(t, lines, 5)
	require.Regexp(t, `^CASE +WIRE +WANT +GOT +RESULT$`, lines[0])
	require.Regexp(t, `^reset/json +v1 +200 complete +503 model_unavailable +FAIL$`, lines[1])
	require.Regexp(t, `^reset/json +openai +503 model_unavailable +503 model_unavailable +PASS$`, lines[2])
	require.Regexp(t, `^stall_after/sse +v2 +200 failed upstream_overloaded +200 failed upstream_timeout +FAIL$`, lines[3])
	require.Equal(t, "1 passed, 2 failed", lines[4])
	// Columns line up.
	col := strings.Index(lines[0], "RESULT")
	for _, l := range lines[1:4] {
		require.Equal(t, col, strings.LastIndex(l, " ")+1, l)
	}
}

// TestJunkAnswers: whatever a server answers, Run scores it as a failure,
// says what it got, and does not panic.
func TestJunkAnswers(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/chat", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: hello\n\ndata: [DONE]\n\n")
	})
	mux.HandleFunc("/api/v2/chat", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "<html>busy</html>")
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(readAll(r), "include_usage") {
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			_ = conn.Close()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"code":"upstream_overloaded","error":"x"}`) // the /api envelope on the OpenAI route
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	want := every(true, Expect{Status: 200, Complete: true})
	scores := Run(t.Context(), srv.Client(), srv.URL+"/", "k", []Case{{Name: "junk", Stream: true, Want: want}})
	got := map[frameorder.Wire]string{}
	for _, s := range scores {
		require.False(t, s.Pass, "%s: %s", s.Wire, s.Got)
		got[s.Wire] = s.Got
	}
	require.Equal(t, "200 complete; violation: frame 1: the data is neither [DONE] nor a JSON chat.completion.chunk", got[frameorder.V1])
	require.Equal(t, "503 (no /api envelope)", got[frameorder.V2])
	require.Equal(t, `200 incomplete; content-type "application/json", not a stream`, got[frameorder.OpenAI])
	require.Contains(t, got[frameorder.OpenAIUsage], "no answer: ")

	// The same server, non-streaming: a 200 that is no completion fails too.
	scores = Run(t.Context(), srv.Client(), srv.URL, "k", []Case{{Name: "junk", Want: every(false, Expect{Status: 503, Code: "upstream_overloaded"})}})
	require.Equal(t, "200 incomplete; no completion in the body", scores[0].Got)
	require.Equal(t, "503 (no /api envelope)", scores[1].Got)
	require.Equal(t, "200 incomplete; no completion in the body", scores[2].Got)
	for _, s := range scores {
		require.False(t, s.Pass)
	}
}

func readAll(r *http.Request) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// TestBudget: a per-case timeout bounds a request the gateway never ends,
// and a cancelled run scores what is left as not run.
func TestBudget(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	c := Case{Name: "slow", Timeout: 100 * time.Millisecond, Want: map[frameorder.Wire]Expect{frameorder.V1: {Status: 504, Code: "upstream_timeout"}}}
	began := time.Now()
	scores := Run(t.Context(), srv.Client(), srv.URL, "k", []Case{c})
	require.Less(t, time.Since(began), 5*time.Second)
	require.False(t, scores[0].Pass)
	require.Equal(t, "no answer: context deadline exceeded", scores[0].Got)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	scores = Run(ctx, srv.Client(), srv.URL, "k", Cases()[:2])
	require.NotEmpty(t, scores)
	for _, s := range scores {
		require.False(t, s.Pass)
		require.Equal(t, "not run: context canceled", s.Got)
	}
}

func TestExpectString(t *testing.T) {
	require.Equal(t, "503 upstream_overloaded", Expect{Status: 503, Code: "upstream_overloaded"}.String())
	require.Equal(t, "200 complete", Expect{Status: 200, Complete: true}.String())
	require.Equal(t, "200 failed upstream_timeout", Expect{Status: 200, Failed: true, Code: "upstream_timeout"}.String())
	require.Equal(t, "200 failed", Expect{Status: 200, Failed: true}.String())
	require.Equal(t, "200 incomplete", Expect{Status: 200}.String())
}

func TestRequestID(t *testing.T) {
	id := requestID("drop_after/sse", frameorder.OpenAIUsage, "abc")
	require.Equal(t, "faults-drop_after_sse-openai_usage-abc", id)
	require.Len(t, requestID(strings.Repeat("x", 300), frameorder.V1, "n"), 128)
}

package proxy

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/logtest"
	"github.com/edgegw/gateway/hotpath/meter"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts under testdata/golden")

// chatFixture is a gateway (edge, router, chat) in front of the simulator,
// both on in-memory listeners.
type chatFixture struct {
	client  *http.Client
	key     string
	logs    *logtest.Buffer
	chat    *Chat
	set     *metrics.Set
	simDial func() (net.Conn, error)
	rawDial func() (net.Conn, error) // a raw connection to the gateway
	handler fasthttp.RequestHandler
	verify  *hotpath.Verifier
	addr    string // the gateway's TCP address, with tcp
	edge    *Edge
	srv     *Server
}

type fixtureOptions struct {
	tiers       func([]hotpath.Tier)
	upstream    func(*UpstreamConfig)
	maxInFlight int
	breaker     hotpath.BreakerConfig
	idempotency hotpath.IdempotencyStore
	principal   hotpath.Principal
	dial        func() (net.Conn, error) // replaces the simulator
	limits      *meter.Limits
	usage       hotpath.UsageSink
	server      ServerConfig
	tcp         bool // serve on a loopback TCP listener, not in memory
	keepAlive   time.Duration
	clientConn  func(net.Conn) net.Conn // wraps each accepted client connection
	routes      func(*Router)           // registers routes beside chat
	aux         bool                    // bind the auxiliary tiers too
	chat        func(*ChatConfig)       // adjusts the chat configuration
	memory      *MemoryConfig
	tracer      trace.Tracer // exports spans; nil turns tracing off
}

// wrapListener wraps each connection it accepts.
type wrapListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l wrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c), nil
}

func newChatFixture(t testing.TB, opts ...func(*fixtureOptions)) *chatFixture {
	t.Helper()
	// Golden runs drive many faults through one tier; the breaker has its
	// own tests, so here it opens only when a test asks.
	o := fixtureOptions{idempotency: hotpath.NewMemoryIdempotency(time.Hour, 0), breaker: hotpath.BreakerConfig{MinRequests: 1 << 20}}
	for _, f := range opts {
		f(&o)
	}
	f := &chatFixture{logs: &logtest.Buffer{}, set: metrics.NewSet()}
	if o.dial == nil {
		simLn := fasthttputil.NewInmemoryListener()
		s := sim.New(sim.Config{})
		go func() { _ = s.Serve(simLn) }()
		t.Cleanup(s.Shutdown)
		o.dial = simLn.Dial
	}
	f.simDial = o.dial
	f.rawDial = nil
	tiers := hotpath.DefaultTiers()
	for i := range tiers {
		tiers[i].Deadline = 1500 * time.Millisecond
	}
	if o.tiers != nil {
		o.tiers(tiers)
	}
	ups := map[string]*Upstream{}
	for i := range tiers {
		uc := UpstreamConfig{BaseURL: "http://sim.test/v1", Model: "sim-" + tiers[i].Name, Reasons: tiers[i].Graded,
			StreamIdle: 300 * time.Millisecond, Backoff: time.Millisecond, MaxRetryWait: time.Millisecond,
			Dial: func(string) (net.Conn, error) { return o.dial() }}
		if o.upstream != nil {
			o.upstream(&uc)
		}
		up, err := NewUpstream(&tiers[i], uc, hotpath.NewBreaker(o.breaker, nil))
		require.NoError(t, err)
		ups[tiers[i].Name] = up
	}
	var aux AuxConfig
	if o.aux {
		auxTiers := hotpath.DefaultAuxTiers()
		bind := func(i int, path, model string) *Upstream {
			uc := UpstreamConfig{BaseURL: "http://sim.test/v1", Path: path, Model: model,
				Backoff: time.Millisecond, MaxRetryWait: time.Millisecond, Dial: func(string) (net.Conn, error) { return o.dial() }}
			if o.upstream != nil {
				o.upstream(&uc)
			}
			up, err := NewUpstream(&auxTiers[i], uc, hotpath.NewBreaker(o.breaker, nil))
			require.NoError(t, err)
			return up
		}
		aux = AuxConfig{Embed: bind(0, "/embeddings", "sim-embed"), Rerank: bind(1, "/rerank", "sim-rerank"),
			Guard: bind(2, "/chat/completions", "guard-sim")}
	}
	log := slog.New(slog.NewJSONHandler(f.logs, nil))
	var err error
	cc := ChatConfig{Tiers: tiers, Upstreams: ups, Idempotency: o.idempotency, MaxInFlight: o.maxInFlight,
		Log: log, Metrics: f.set, ConnsKept: true, Limits: o.limits, Usage: o.usage, KeepAliveInterval: o.keepAlive, Aux: aux,
		Memory: o.memory, Tracer: o.tracer}
	if o.chat != nil {
		o.chat(&cc)
	}
	f.chat, err = NewChat(cc)
	require.NoError(t, err)
	t.Cleanup(f.chat.Close)

	src := &mapSource{users: map[hotpath.TokenHash]*hotpath.Principal{}}
	var h hotpath.TokenHash
	f.key, h = hotpath.GenerateToken(hotpath.TokenUser)
	p := o.principal
	p.KeyID, p.UserID, p.OrgID = "key-1", "user-1", "org-1"
	if p.Kind == 0 {
		p.Kind = hotpath.KindDeveloper
	}
	src.users[h] = &p
	v, err := hotpath.NewVerifier(hotpath.VerifierConfig{}, src)
	require.NoError(t, err)
	v.SetLive(true)
	t.Cleanup(v.Close)
	f.edge = NewEdge(EdgeConfig{Verifier: v, Log: log, Metrics: f.set, Limits: o.limits, Usage: o.usage, Tracer: o.tracer})
	rt := NewRouter(f.edge)
	f.chat.Register(rt)
	if o.routes != nil {
		o.routes(rt)
	}
	f.handler, f.verify = rt.Handler(), v

	var ln net.Listener
	if o.tcp {
		tl, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ln, f.addr = tl, tl.Addr().String()
		f.rawDial = func() (net.Conn, error) { return net.Dial("tcp", f.addr) }
	} else {
		ml := fasthttputil.NewInmemoryListener()
		ln, f.rawDial = ml, ml.Dial
	}
	if o.clientConn != nil {
		ln = wrapListener{ln, o.clientConn}
	}
	srv := NewServer(o.server, rt, f.chat)
	f.srv = srv
	go func() { _ = srv.Serve(KeepAccepting(ln, log)) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	f.client = &http.Client{Transport: &http.Transport{
		DialContext:        func(context.Context, string, string) (net.Conn, error) { return f.rawDial() },
		DisableCompression: true,
	}}
	// Before the server's shutdown (cleanups run last first): the server
	// waits for every client connection to close.
	t.Cleanup(f.client.CloseIdleConnections)
	return f
}

type chatReply struct {
	status int
	header http.Header
	body   []byte
}

func (f *chatFixture) post(t testing.TB, path, body string, headers ...string) chatReply {
	t.Helper()
	req, err := http.NewRequest("POST", "http://gw"+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+f.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "req-golden")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body) // a stream cut by a failure still returns what arrived
	return chatReply{status: resp.StatusCode, header: resp.Header, body: raw}
}

var (
	completionIDRE = regexp.MustCompile(`chatcmpl-[0-9a-f]{32}`)
	createdRE      = regexp.MustCompile(`"created":\d+`)
)

// normalize replaces what differs between runs: the completion id and the
// creation time.
func normalize(b []byte) []byte {
	b = completionIDRE.ReplaceAll(b, []byte("chatcmpl-ID"))
	return createdRE.ReplaceAll(b, []byte(`"created":0`))
}

// golden compares got with testdata/golden/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./proxy -run %s -update to create it", t.Name())
	require.Equal(t, string(want), string(got), "transcript %s changed", name)
}

func transcript(r chatReply) []byte {
	var b bytes.Buffer
	b.WriteString("status: ")
	b.WriteString(http.StatusText(r.status))
	b.WriteString("\ncontent-type: ")
	b.WriteString(r.header.Get("Content-Type"))
	for _, h := range []string{"Retry-After", "Www-Authenticate"} {
		if v := r.header.Get(h); v != "" {
			b.WriteString("\n" + strings.ToLower(h) + ": " + v)
		}
	}
	b.WriteString("\n\n")
	b.Write(normalize(r.body))
	return b.Bytes()
}

const weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Weather for a city",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}}`
const timeTool = `{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]}}}`

// goldenCases are the chat shapes every wire is recorded for.
var goldenCases = []struct {
	name string
	body string // without the "stream" field
}{
	{"text", `{"model":"mira","messages":[{"role":"user","content":"Say hello [[sim:tokens=4]]"}]}`},
	{"tools", `{"model":"vaani","tools":[` + weatherTool + `],"messages":[{"role":"user","content":"Weather? [[sim:tool=get_weather]]"}]}`},
	{"parallel_tools", `{"model":"kavi","reasoning_effort":"none","tools":[` + weatherTool + `,` + timeTool + `],"messages":[{"role":"user","content":"Both [[sim:tool=get_weather,get_time]]"}]}`},
	{"reasoning", `{"model":"kavi","messages":[{"role":"user","content":"Think [[sim:reasoning=3]] [[sim:tokens=2]]"}]}`},
	{"length", `{"model":"mira","max_tokens":3,"messages":[{"role":"user","content":"Long [[sim:tokens=10]]"}]}`},
	{"content_filter", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=2]] [[sim:finish=content_filter]]"}]}`},
	{"no_done", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=2]] [[sim:fault=no_done]]"}]}`},
	{"drop_after", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=6]] [[sim:drop_after=2]]"}]}`},
	{"malformed_after", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=6]] [[sim:fault=malformed_after=2]]"}]}`},
	{"stall_after", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=6]] [[sim:fault=stall_after=2]]"}]}`},
	{"rate_limited", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:fault=rate_limited]]"}]}`},
	{"server_error", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:status=500]]"}]}`},
	{"reset", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:fault=reset]]"}]}`},
	{"hang", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:fault=hang]]"}]}`},
	{"rate_limited_bare", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:fault=rate_limited_bare]]"}]}`},
	{"slow_first_token", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=2]] [[sim:ttft_ms=5000]]"}]}`},
	{"context_length", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:fault=context_length]]"}]}`},
	{"content_filter_refusal", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:fault=content_filter]]"}]}`},
	{"fail_first", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=2]] [[sim:fail_first=1]] WIRE"}]}`},
}

var goldenWires = []struct{ name, path, extra string }{
	{"v1", "/api/v1/chat", ""},
	{"v2", "/api/v2/chat", ""},
	{"openai", "/v1/chat/completions", ""},
	{"openai_usage", "/v1/chat/completions", `"stream_options":{"include_usage":true},`},
}

// TestGoldenTranscripts records every shape on every wire, streaming and
// not, and checks each byte for byte.
func TestGoldenTranscripts(t *testing.T) {
	f := newChatFixture(t)
	for _, w := range goldenWires {
		for _, stream := range []bool{false, true} {
			if w.name == "openai_usage" && !stream {
				continue
			}
			for _, c := range goldenCases {
				mode := "json"
				if stream {
					mode = "sse"
				}
				name := w.name + "_" + mode + "_" + c.name
				t.Run(name, func(t *testing.T) {
					body := strings.Replace(c.body, "{", "{"+w.extra+`"stream":`+map[bool]string{true: "true", false: "false"}[stream]+",", 1)
					// fail_first counts attempts per identical body: make each run's body unique.
					body = strings.Replace(body, "WIRE", name, 1)
					golden(t, name+".txt", transcript(f.post(t, w.path, body)))
				})
			}
		}
	}
}

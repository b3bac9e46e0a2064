package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/edgegw/gateway/control"
	"github.com/edgegw/gateway/proxy"
	"github.com/edgegw/gateway/storage"
)

// exported is a span as an OTLP receiver got it.
type exported struct {
	name, traceID, spanID, parentID string
	attrs                           map[string]string
	links                           []string // span ids
	service                         string
}

// otlpReceiver is an OTLP/HTTP traces endpoint that decodes every export
// request (protobuf) and keeps its spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []exported
	srv   *httptest.Server
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "unexpected export", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var msg coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			service := ""
			for _, kv := range rs.Resource.GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					e := exported{name: s.Name, traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
						parentID: hex.EncodeToString(s.ParentSpanId), attrs: map[string]string{}, service: service}
					for _, kv := range s.Attributes {
						v := kv.Value.GetStringValue()
						if v == "" {
							v = strings.Trim(kv.Value.String(), " ")
						}
						e.attrs[kv.Key] = v
					}
					for _, l := range s.Links {
						e.links = append(e.links, hex.EncodeToString(l.SpanId))
					}
					r.spans = append(r.spans, e)
				}
			}
		}
		r.mu.Unlock()
		raw, _ = proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(raw)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// find returns the spans named name in trace traceID.
func (r *otlpReceiver) find(traceID, name string) []exported {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []exported
	for _, s := range r.spans {
		if s.name == name && (traceID == "" || s.traceID == traceID) {
			out = append(out, s)
		}
	}
	return out
}

// Through the real OTLP/HTTP exporter: a request's spans reach the
// collector as one tree under the client's trace, the ledger write's span
// links to the request, the access log names the exported trace, and no
// attribute holds the key or the prompt.
func TestTracingExportsOverOTLP(t *testing.T) {
	rcv := newOTLPReceiver(t)
	ta := startTestApp(t, func(c *serveConfig) {
		c.AccessLog = true
		c.Tracing.Endpoint = rcv.srv.URL // the exporter adds /v1/traces
		c.Tracing.ExportInterval = 20 * time.Millisecond
		c.Tracing.SampleRatio, c.Tracing.SampleRatioSet = 1, true // every trace, so an exported probe would show
	})
	tn := newTenant(t, ta.dbURL, "otel@example.com")
	const traceID, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const prompt = "confidential-prompt-words"
	// The probes load balancers poll export nothing.
	require.Equal(t, 200, ta.call(t, "GET", "/api/health", "", nil).status)
	require.Equal(t, 200, ta.call(t, "GET", "/api/ready", "", nil).status)
	body := map[string]any{"model": "mira", "messages": []map[string]string{{"role": "user", "content": prompt}}}
	r := ta.call(t, "POST", "/v1/chat/completions", tn.key, body,
		"traceparent", "00-"+traceID+"-"+clientSpan+"-01", "X-Request-Id", "otel-req-1")
	require.Equal(t, 200, r.status, "%s", r.raw)

	require.Eventually(t, func() bool {
		return len(rcv.find(traceID, proxy.SpanEdge)) == 1 && len(rcv.find("", storage.SpanLedgerWrite)) > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Len(t, rcv.find("", proxy.SpanEdge), 1, "one request traced: the probes were not")
	edge := rcv.find(traceID, proxy.SpanEdge)[0]
	require.Equal(t, clientSpan, edge.parentID)
	require.Equal(t, "gateway", edge.service)
	require.Equal(t, "otel-req-1", edge.attrs["gateway.request_id"])
	require.Equal(t, "chat_openai", edge.attrs["gateway.route"])
	require.Equal(t, "openai", edge.attrs["gateway.wire"])
	require.Equal(t, "mira", edge.attrs["gateway.tier"])
	require.Equal(t, tn.keyID[:8], edge.attrs["gateway.key_id_prefix"])
	for _, name := range []string{proxy.SpanAdmission, proxy.SpanUpstream} {
		spans := rcv.find(traceID, name)
		require.NotEmpty(t, spans, name)
		for _, s := range spans {
			require.Equal(t, edge.spanID, s.parentID, name)
		}
	}
	linked := false
	for _, w := range rcv.find("", storage.SpanLedgerWrite) {
		for _, l := range w.links {
			linked = linked || l == edge.spanID
		}
	}
	require.True(t, linked, "a ledger write links to the request's span")

	rcv.mu.Lock()
	for _, s := range rcv.spans {
		for k, v := range s.attrs {
			require.NotContains(t, v, "confidential", "%s %s", s.name, k)
			require.NotContains(t, v, tn.key, "%s %s", s.name, k)
		}
	}
	rcv.mu.Unlock()

	// The access log line names the exported trace.
	require.Eventually(t, func() bool { return strings.Contains(ta.logs.String(), `"request_id":"otel-req-1"`) }, 5*time.Second, 10*time.Millisecond)
	for _, line := range bytes.Split([]byte(ta.logs.String()), []byte("\n")) {
		if bytes.Contains(line, []byte(`"request_id":"otel-req-1"`)) && bytes.Contains(line, []byte(`"msg":"request"`)) {
			var m map[string]any
			require.NoError(t, json.Unmarshal(line, &m))
			require.Equal(t, traceID, m["trace_id"])
		}
	}
}

// Tracing is off unless an endpoint is configured; the standard OTEL_
// variables fill what the flags leave unset, and the flags win.
func TestTracingConfigResolve(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	c := tracingConfig{getenv: env()}
	on, err := c.resolve()
	require.NoError(t, err)
	require.False(t, on, "off by default")

	c = tracingConfig{Endpoint: "http://collector:4318", getenv: env()}
	on, err = c.resolve()
	require.NoError(t, err)
	require.True(t, on)
	require.Equal(t, "http://collector:4318/v1/traces", c.Endpoint)
	require.Equal(t, "http/protobuf", c.Protocol)
	require.Equal(t, 1.0, c.SampleRatio)
	require.Equal(t, "gateway", c.ServiceName)
	require.Equal(t, 5*time.Second, c.ExportInterval)

	c = tracingConfig{getenv: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_TRACES_SAMPLER_ARG", "0.25", "OTEL_SERVICE_NAME", "edge-eu")}
	on, err = c.resolve()
	require.NoError(t, err)
	require.True(t, on)
	require.Equal(t, "", c.Endpoint, "the exporter reads the variable itself")
	require.Equal(t, "grpc", c.Protocol)
	require.Equal(t, 0.25, c.SampleRatio)
	require.Equal(t, "edge-eu", c.ServiceName)

	c = tracingConfig{SampleRatio: 0.5, SampleRatioSet: true, ServiceName: "gw", Protocol: "http/protobuf", Endpoint: "https://c.example/x",
		getenv: env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_TRACES_SAMPLER_ARG", "0.25", "OTEL_SERVICE_NAME", "edge-eu")}
	_, err = c.resolve()
	require.NoError(t, err)
	require.Equal(t, "https://c.example/x", c.Endpoint)
	require.Equal(t, 0.5, c.SampleRatio)
	require.Equal(t, "gw", c.ServiceName)

	c = tracingConfig{SampleRatio: 0, SampleRatioSet: true, Endpoint: "http://c:4318", getenv: env("OTEL_TRACES_SAMPLER_ARG", "0.25")}
	_, err = c.resolve()
	require.NoError(t, err)
	require.Equal(t, 0.0, c.SampleRatio, "a ratio of 0 given is kept")

	c = tracingConfig{Endpoint: "http://c:4318", getenv: env("OTEL_SDK_DISABLED", "true")}
	on, err = c.resolve()
	require.NoError(t, err)
	require.False(t, on)

	nan := math.NaN()
	for _, bad := range []tracingConfig{
		{Endpoint: "collector:4318"},
		{SampleRatio: 2, SampleRatioSet: true, Endpoint: "http://c:4318"},
		{SampleRatio: nan, SampleRatioSet: true, Endpoint: "http://c:4318"},
		{SampleRatio: -0.5, SampleRatioSet: true}, // refused with tracing off too
		{ExportInterval: -5 * time.Second},
		{Endpoint: "http://c:4318", Protocol: "thrift"},
		{Endpoint: "http://c:4318", Headers: "novalue"},
		{Endpoint: "http://c:4318", getenv: env("OTEL_TRACES_SAMPLER_ARG", "NaN")},
		{Endpoint: "http://c:4318", getenv: env("OTEL_TRACES_SAMPLER_ARG", "-0.5")},
	} {
		if bad.getenv == nil {
			bad.getenv = env()
		}
		_, err := bad.resolve()
		require.Error(t, err, "%+v", bad)
	}
	// Through the flags: a ratio left unset defers to the variable; one
	// given wins over it.
	for _, c := range []struct {
		args  []string
		ratio float64
	}{{nil, 0.25}, {[]string{"--otel-sample-ratio", "0.5"}, 0.5}} {
		var sc serveConfig
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		sc.flags(fs)
		require.NoError(t, fs.Parse(append([]string{"--otel-endpoint", "http://c:4318"}, c.args...)))
		sc.Tracing.getenv = env("OTEL_TRACES_SAMPLER_ARG", "0.25")
		_, err := sc.Tracing.resolve()
		require.NoError(t, err)
		require.Equal(t, c.ratio, sc.Tracing.SampleRatio, "%v", c.args)
		require.Equal(t, 5*time.Second, sc.Tracing.ExportInterval)
	}

	c = tracingConfig{Headers: "authorization=Bearer%20x, x-tenant=a"}
	h, err := c.headers()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"authorization": "Bearer x", "x-tenant": "a"}, h)
}

// traceCollector is an OTLP/gRPC traces endpoint that keeps span names.
type traceCollector struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (c *traceCollector) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names = append(c.names, s.Name)
			}
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// The grpc protocol exports through OTLP/gRPC to the endpoint given.
func TestTracingExportsOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	col := &traceCollector{}
	coltrace.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	c := tracingConfig{Endpoint: "http://" + ln.Addr().String(), Protocol: "grpc", getenv: func(string) string { return "" }}
	on, err := c.resolve()
	require.NoError(t, err)
	require.True(t, on)
	tp, err := newTracerProvider(t.Context(), c, "test", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	_, sp := tp.Tracer(proxy.TracerName).Start(t.Context(), proxy.SpanEdge)
	sp.End()
	require.NoError(t, tp.ForceFlush(t.Context()))
	require.NoError(t, tp.Shutdown(t.Context()))
	col.mu.Lock()
	defer col.mu.Unlock()
	require.Equal(t, []string{proxy.SpanEdge}, col.names)
}

// A URL refused at start is named without the credentials it may carry:
// the message goes to the operator's terminal and logs.
func TestRefusedURLsHideTheirCredentials(t *testing.T) {
	const secret = "s3cr3t-in-url"
	bad := "grpc://user:" + secret + "@collector:4317"
	var errs []error
	c := tracingConfig{Endpoint: bad, getenv: func(string) string { return "" }}
	_, err := c.resolve()
	errs = append(errs, err)
	errs = append(errs, (&proxy.UpstreamConfig{BaseURL: "ftp://user:" + secret + "@upstream", Model: "m"}).Validate())
	errs = append(errs, (&control.SignInConfig{PublicURL: "https://user:" + secret + "@gw.example.com/x?q"}).Validate())
	errs = append(errs, (&control.SignInConfig{Providers: map[string]control.OIDCProvider{
		"idp": {Issuer: "http://user:" + secret + "@idp.example.com", ClientID: "c"}}}).Validate())
	for i, err := range errs {
		require.Error(t, err, i)
		require.NotContains(t, err.Error(), secret, i)
		require.Contains(t, err.Error(), "xxxxx@", i)
	}
}

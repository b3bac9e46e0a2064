package proxy

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegw/gateway/bench/sim"
)

// tracedFixture is a chat fixture whose spans go to an in-memory
// exporter, and whose upstream records the traceparent of every call.
type tracedFixture struct {
	*chatFixture
	spans   *tracetest.InMemoryExporter
	mu      sync.Mutex
	parents []string
}

func newTracedFixture(t *testing.T, sampler sdktrace.Sampler, opts ...func(*fixtureOptions)) *tracedFixture {
	tf := &tracedFixture{spans: tracetest.NewInMemoryExporter()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tf.spans), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	s := sim.New(sim.Config{})
	t.Cleanup(s.Shutdown)
	up := newFakeUpstream(t, func(ctx *fasthttp.RequestCtx) {
		tf.mu.Lock()
		tf.parents = append(tf.parents, string(ctx.Request.Header.Peek("traceparent")))
		tf.mu.Unlock()
		s.Handler()(ctx)
	})
	tf.chatFixture = newChatFixture(t, append([]func(*fixtureOptions){func(o *fixtureOptions) {
		o.dial, o.tracer = up.dial, tp.Tracer(TracerName)
	}}, opts...)...)
	return tf
}

func (tf *tracedFixture) lastParent() string {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	return tf.parents[len(tf.parents)-1]
}

// waitSpans waits for the edge span of the request (it ends after the
// client has its last byte when the request streamed) and returns them
// all, resetting the exporter.
func (tf *tracedFixture) waitSpans(t *testing.T) tracetest.SpanStubs {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range tf.spans.GetSpans() {
			if s.Name == SpanEdge {
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond)
	out := tf.spans.GetSpans()
	tf.spans.Reset()
	return out
}

func spansNamed(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// A traced request is one tree under the client's traceparent: the edge
// span (child of the client's span, in the client's trace), its admission
// spans (the key check, the chat admission), one span per upstream
// attempt, and for a stream the stream's span with its first byte. The
// upstream's traceparent names its attempt's span. Attributes carry ids
// and codes, never the prompt, the reply or the key.
func TestTracingSpanTree(t *testing.T) {
	tf := newTracedFixture(t, sdktrace.ParentBased(sdktrace.NeverSample()))
	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		clientID = "00f067aa0ba902b7"
		prompt   = "confidential-prompt-words"
	)
	for _, tc := range []struct {
		name, path, body string
		stream           bool
	}{
		{"openai", "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"` + prompt + `"}]}`, false},
		{"v1 stream", "/api/v1/chat", streamBody(prompt), true},
		{"v2 stream", "/api/v2/chat", streamBody(prompt), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tf.post(t, tc.path, tc.body, "traceparent", "00-"+traceID+"-"+clientID+"-01")
			require.Equal(t, 200, r.status, "%s", r.body)
			spans := tf.waitSpans(t)

			edges := spansNamed(spans, SpanEdge)
			require.Len(t, edges, 1)
			edge := edges[0]
			require.Equal(t, traceID, edge.SpanContext.TraceID().String(), "the client's trace is kept")
			require.Equal(t, clientID, edge.Parent.SpanID().String(), "the edge span is the client span's child")
			require.True(t, edge.Parent.IsRemote())
			require.Equal(t, trace.SpanKindServer, edge.SpanKind)
			require.Equal(t, "req-golden", attr(edge, "gateway.request_id"))
			require.Equal(t, "200", attr(edge, "http.response.status_code"))
			require.Equal(t, "mira", attr(edge, "gateway.tier"))
			require.Equal(t, "key-1", attr(edge, "gateway.key_id_prefix"))
			require.NotEmpty(t, attr(edge, "gateway.route"))
			require.NotEmpty(t, attr(edge, "gateway.wire"))

			child := func(s tracetest.SpanStub) {
				t.Helper()
				require.Equal(t, edge.SpanContext.TraceID(), s.SpanContext.TraceID(), s.Name)
				require.Equal(t, edge.SpanContext.SpanID(), s.Parent.SpanID(), "%s is the edge span's child", s.Name)
			}
			adm := spansNamed(spans, SpanAdmission)
			require.Len(t, adm, 2, "the key check and the chat admission")
			stages := []string{}
			for _, s := range adm {
				child(s)
				stages = append(stages, attr(s, "gateway.admission.stage"))
			}
			require.ElementsMatch(t, []string{"key", "chat"}, stages)

			ups := spansNamed(spans, SpanUpstream)
			require.Len(t, ups, 1)
			child(ups[0])
			require.Equal(t, trace.SpanKindClient, ups[0].SpanKind)
			require.Equal(t, "200", attr(ups[0], "http.response.status_code"))
			require.Equal(t, "00-"+traceID+"-"+ups[0].SpanContext.SpanID().String()+"-01", tf.lastParent(),
				"the upstream's parent is its attempt's span")

			streams := spansNamed(spans, SpanStream)
			if !tc.stream {
				require.Empty(t, streams)
			} else {
				require.Len(t, streams, 1)
				child(streams[0])
				require.Equal(t, "true", attr(streams[0], "gateway.stream.complete"))
				var events []string
				for _, e := range streams[0].Events {
					events = append(events, e.Name)
				}
				require.Equal(t, []string{EventFirstByte, EventFirstSent}, events)
			}

			for _, s := range spans {
				for _, kv := range s.Attributes {
					v := kv.Value.String()
					require.NotContains(t, v, "confidential", "%s %s", s.Name, kv.Key)
					require.NotContains(t, v, tf.key, "%s %s", s.Name, kv.Key)
					require.NotContains(t, v, "sim", "%s %s: no reply text, no upstream model", s.Name, kv.Key)
				}
			}
		})
	}
}

// A request without a traceparent starts a trace of its own at the edge
// span; the upstream and the request's traceparent join it. With the
// sampler refusing, nothing is exported, and the upstream still receives
// a well-formed traceparent (not sampled) naming a span of the trace.
func TestTracingWithoutClientTrace(t *testing.T) {
	tf := newTracedFixture(t, sdktrace.AlwaysSample())
	r := tf.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	spans := tf.waitSpans(t)
	edge := spansNamed(spans, SpanEdge)[0]
	require.False(t, edge.Parent.IsValid(), "a root span")
	up := spansNamed(spans, SpanUpstream)[0]
	require.Equal(t, "00-"+edge.SpanContext.TraceID().String()+"-"+up.SpanContext.SpanID().String()+"-01", tf.lastParent())

	off := newTracedFixture(t, sdktrace.NeverSample())
	r = off.post(t, "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.status, "%s", r.body)
	p := off.lastParent()
	require.True(t, strings.HasPrefix(p, "00-") && strings.HasSuffix(p, "-00"), p)
	require.Len(t, p, 55)
	require.Empty(t, off.spans.GetSpans())
}

// The specialised routes trace their upstream calls too, and send the
// attempt's span as the upstream's parent.
func TestTracingAuxUpstream(t *testing.T) {
	tf := newTracedFixture(t, sdktrace.AlwaysSample(), func(o *fixtureOptions) { o.aux = true })
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := tf.post(t, "/api/v1/embeddings", `{"model":"gw-embed","input":["hello"]}`,
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	require.Equal(t, 200, r.status, "%s", r.body)
	spans := tf.waitSpans(t)
	edge := spansNamed(spans, SpanEdge)[0]
	ups := spansNamed(spans, SpanUpstream)
	require.Len(t, ups, 1)
	require.Equal(t, edge.SpanContext.SpanID(), ups[0].Parent.SpanID())
	require.Equal(t, "gw-embed", attr(ups[0], "gateway.tier"))
	require.Equal(t, "00-"+traceID+"-"+ups[0].SpanContext.SpanID().String()+"-01", tf.lastParent())
}

package proxy

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
)

// cannedTransport answers every upstream call with one fixed completion,
// without a network.
type cannedTransport struct{ body []byte }

func (c cannedTransport) RoundTrip(_ *fasthttp.HostClient, _ *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	resp.SetStatusCode(fasthttp.StatusOK)
	resp.Header.SetContentType("application/json")
	resp.SetBodyRaw(c.body)
	return false, nil
}

const cannedCompletion = `{"id":"u","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":25,"completion_tokens":10,"total_tokens":35}}`

const benchBody = `{"model":"mira","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello to the team."},{"role":"assistant","content":"Hello, team."},{"role":"user","content":"Once more, warmly."}],"temperature":0.3,"max_tokens":256}`

// requestHarness drives the whole gateway handler (edge, auth, chat) with a
// reused RequestCtx and a canned upstream: everything the gateway does for
// a non-streaming request, and nothing of the network's.
type requestHarness struct {
	handler fasthttp.RequestHandler
	ctx     fasthttp.RequestCtx
}

func newRequestHarness(t testing.TB, opts ...func(*fixtureOptions)) *requestHarness {
	fx := newChatFixture(t, append([]func(*fixtureOptions){func(o *fixtureOptions) {
		o.upstream = func(c *UpstreamConfig) { c.Transport = cannedTransport{body: []byte(cannedCompletion)} }
	}}, opts...)...)
	f := &requestHarness{handler: fx.handler}
	f.ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	f.ctx.Request.SetRequestURI("/v1/chat/completions")
	f.ctx.Request.Header.Set("Authorization", "Bearer "+fx.key)
	f.ctx.Request.Header.SetContentType("application/json")
	f.ctx.Request.SetBodyString(benchBody)
	f.do(t)
	fx.verify.Wait() // the key is cached from here on
	for range 50 {   // pools and sonic's codecs are warm
		f.do(t)
	}
	return f
}

func (f *requestHarness) do(t testing.TB) {
	f.ctx.Response.Reset()
	f.handler(&f.ctx)
	if f.ctx.Response.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("status %d: %s", f.ctx.Response.StatusCode(), f.ctx.Response.Body())
	}
}

// discardSink takes ledger rows and keeps nothing, as cheaply as the real
// ledger's Record (a copy into a queue).
type discardSink struct{ last hotpath.UsageRecord }

func (d *discardSink) Record(r *hotpath.UsageRecord) { d.last = *r }

// metered is what production adds to every chat request: a request window,
// a concurrency lease and a spend-cap reservation on the in-process
// counters, and a ledger row.
func metered(t testing.TB) func(*fixtureOptions) {
	c := meter.NewMemoryCounters(meter.NoSeeder{})
	plan := meter.DefaultPlan()
	plan.RequestsPerMinute, plan.OrgRequestsPerMinute = 1<<40, 1<<40
	l, err := meter.NewLimits(meter.LimitsConfig{Counters: c, Plans: []meter.Plan{plan}, DefaultPlan: plan.Name, Tiers: hotpath.DefaultTiers()})
	if err != nil {
		t.Fatal(err)
	}
	p := hotpath.Principal{SpendCapMicros: 1 << 40, CreditsMicros: -1, WorkspaceCapMicros: -1}
	return func(o *fixtureOptions) { o.limits, o.usage, o.principal = l, &discardSink{}, p }
}

func BenchmarkNonStreamRequestMetered(b *testing.B) {
	f := newRequestHarness(b, metered(b))
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for b.Loop() {
		f.do(b)
	}
}

func BenchmarkNonStreamRequest(b *testing.B) {
	f := newRequestHarness(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for b.Loop() {
		f.do(b)
	}
}

// streamTransport answers every upstream call with a canned SSE stream of
// n content frames, read from memory.
type streamTransport struct{ body []byte }

// newWordStreamTransport answers n content frames of one word each.
func newWordStreamTransport(n int, word string) streamTransport {
	var b []byte
	b = append(b, "data: {\"id\":\"u\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"...)
	for range n {
		b = append(b, "data: {\"id\":\"u\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" "+word+"\"},\"finish_reason\":null}]}\n\n"...)
	}
	b = append(b, "data: {\"id\":\"u\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"...)
	b = append(b, "data: {\"id\":\"u\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":5,\"total_tokens\":25}}\n\ndata: [DONE]\n\n"...)
	return streamTransport{body: b}
}

func (s streamTransport) RoundTrip(_ *fasthttp.HostClient, _ *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	resp.SetStatusCode(fasthttp.StatusOK)
	resp.Header.SetContentType("text/event-stream")
	resp.SetBodyStream(bytes.NewReader(s.body), len(s.body))
	return false, nil
}

// streamHarness drives whole streaming requests through a real fasthttp
// server on an in-memory listener: a stream takes its connection over, so it
// needs one. The client side writes a prebuilt request and drains the
// connection into a reused buffer, so what it allocates is the same for
// every request.
type streamHarness struct {
	ln  *fasthttputil.InmemoryListener
	req []byte
	buf []byte
	// done marks a complete stream on the wire.
	done []byte
}

func newStreamHarness(t testing.TB, frames int) *streamHarness {
	return newWordStreamHarness(t, frames, "word")
}

// newWordStreamHarness streams n frames of one word each.
func newWordStreamHarness(t testing.TB, frames int, word string) *streamHarness {
	body := strings.Replace(benchBody, `{"model"`, `{"stream":true,"model"`, 1)
	return newWireStreamHarness(t, frames, word, "/api/v1/chat", body)
}

// newWireStreamHarness streams n frames of one word each on the chat wire
// at path, with body as its request.
func newWireStreamHarness(t testing.TB, frames int, word, path, body string, opts ...func(*fixtureOptions)) *streamHarness {
	fx := newChatFixture(t, append([]func(*fixtureOptions){func(o *fixtureOptions) {
		o.upstream = func(c *UpstreamConfig) { c.Transport = newWordStreamTransport(frames, word) }
	}}, opts...)...)
	f := &streamHarness{ln: fasthttputil.NewInmemoryListener(), buf: make([]byte, 256<<10+frames*(512+len(word))),
		done: []byte("data: [DONE]")}
	switch path {
	case "/v1/messages":
		f.done = []byte("event: message_stop")
	case "/v1/responses":
		f.done = []byte("event: response.completed")
	}
	// As the gateway's server: streams own their connections.
	srv := &fasthttp.Server{Handler: fx.handler, KeepHijackedConns: true}
	go func() { _ = srv.Serve(f.ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	// Connection: close ends the exchange with the stream, so the client
	// reads to the end of the connection.
	f.req = []byte("POST " + path + " HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nAuthorization: Bearer " + fx.key +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	f.stream(t)
	fx.verify.Wait()
	for range 20 {
		f.stream(t)
	}
	return f
}

func (f *streamHarness) stream(t testing.TB) { f.streamTimed(t, nil) }

// streamTimed streams once; gaps, when not nil, receives the time between
// every two reads that brought bytes.
func (f *streamHarness) streamTimed(t testing.TB, gaps *[]time.Duration) {
	c, err := f.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(f.req); err != nil {
		t.Fatal(err)
	}
	n := 0
	last := time.Now()
	for {
		m, err := c.Read(f.buf[n:])
		n += m
		if gaps != nil && m > 0 {
			now := time.Now()
			*gaps = append(*gaps, now.Sub(last))
			last = now
		}
		if err != nil {
			break
		}
		if n == len(f.buf) {
			t.Fatal("stream larger than the harness buffer")
		}
	}
	if !bytes.Contains(f.buf[:n], f.done) || !bytes.HasSuffix(f.buf[:n], []byte("\r\n0\r\n\r\n")) {
		t.Fatalf("not a complete stream: %q", f.buf[:min(n, 300)])
	}
}

func BenchmarkStreamRequest256(b *testing.B) {
	f := newStreamHarness(b, 256)
	b.ReportAllocs()
	for b.Loop() {
		f.stream(b)
	}
}

// BenchmarkLongStreamGaps streams 4,000 tokens of 48 bytes (190 KiB of
// text) through the real stream path and reports the p99 and the longest
// gap between two reads of the client: a stream that stops to count its
// text shows here.
func BenchmarkLongStreamGaps(b *testing.B) {
	f := newWordStreamHarness(b, 4000, strings.Repeat("x", 47))
	var gaps []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		f.streamTimed(b, &gaps)
	}
	slices.Sort(gaps)
	b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds()), "gap-p99-µs")
	b.ReportMetric(float64(gaps[len(gaps)-1].Microseconds()), "gap-max-µs")
}

// BenchmarkWireStream256 streams 256 frames on the Anthropic and Responses
// wires, to compare with BenchmarkStreamRequest256.
func BenchmarkWireStream256(b *testing.B) {
	for _, w := range []struct{ name, path, body string }{
		{"anthropic", "/v1/messages", `{"stream":true,"model":"mira","max_tokens":256,"messages":[{"role":"user","content":"Say hello to the team."}]}`},
		{"responses", "/v1/responses", `{"stream":true,"model":"mira","max_output_tokens":256,"input":"Say hello to the team."}`},
	} {
		b.Run(w.name, func(b *testing.B) {
			f := newWireStreamHarness(b, 256, "word", w.path, w.body)
			b.ReportAllocs()
			for b.Loop() {
				f.stream(b)
			}
		})
	}
}

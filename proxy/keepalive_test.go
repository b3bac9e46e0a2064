package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
)

// rawConn speaks HTTP/1.1 over one client connection to the fixture's
// server, so a test can see which requests share it.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func (f *chatFixture) dialRaw(t *testing.T) *rawConn {
	t.Helper()
	c, err := f.rawDial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

// send writes one request; proto is "HTTP/1.1" or "HTTP/1.0".
func (r *rawConn) send(t *testing.T, f *chatFixture, proto, method, path, body string, headers ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\nHost: gw\r\nAuthorization: Bearer %s\r\n", method, path, proto, f.key)
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	_, err := io.WriteString(r.c, b.String())
	require.NoError(t, err)
}

// exchange writes req as it is and reads its response whole.
func (r *rawConn) exchange(t *testing.T, req string) (*http.Response, []byte) {
	t.Helper()
	_, err := io.WriteString(r.c, req)
	require.NoError(t, err)
	resp, body, err := r.read(t)
	require.NoError(t, err)
	return resp, body
}

// read reads one response and its whole body; err is what reading the body
// ended with.
func (r *rawConn) read(t *testing.T) (resp *http.Response, body []byte, err error) {
	t.Helper()
	resp, rerr := http.ReadResponse(r.br, nil)
	require.NoError(t, rerr)
	body, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, body, err
}

func streamBody(content string) string {
	return `{"model":"mira","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` + content + `"}]}`
}

// A complete stream is a chunked body that ends with its last chunk, and the
// connection then serves the client's next request — another stream on any
// wire, or anything else.
func TestCompleteStreamsKeepTheirConnection(t *testing.T) {
	f := newChatFixture(t)
	rc := f.dialRaw(t)
	for _, path := range []string{"/api/v1/chat", "/api/v2/chat", "/v1/chat/completions", "/v1/chat/completions"} {
		rc.send(t, f, "HTTP/1.1", "POST", path, streamBody("hi [[sim:tokens=5]]"))
		resp, body, err := rc.read(t)
		require.NoError(t, err, path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, []string{"chunked"}, resp.TransferEncoding, path)
		require.False(t, resp.Close, path)
		if path == "/api/v2/chat" {
			require.Contains(t, string(body), "event: finish", path)
		} else {
			require.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"), "%s: %q", path, body)
		}
	}
	rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`)
	resp, body, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"chat.completion"`)
	require.Eventually(t, func() bool { return f.chat.open.Load() == 0 }, 2*time.Second, time.Millisecond)
}

// A stream that breaks after it opened ends the way its wire says — no
// finish on /api/v1/chat, an error frame on the others — in a well-formed
// body, and the connection serves the client's next request.
func TestBrokenStreamsEndTheWayTheirWireSays(t *testing.T) {
	f := newChatFixture(t)
	for _, path := range []string{"/api/v1/chat", "/v1/chat/completions", "/api/v2/chat"} {
		rc := f.dialRaw(t)
		rc.send(t, f, "HTTP/1.1", "POST", path, streamBody("hi [[sim:drop_after=2]] [[sim:tokens=10]]"))
		resp, body, err := rc.read(t)
		require.NoError(t, err, path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.NotContains(t, string(body), "[DONE]", path)
		require.NotContains(t, string(body), `"finish_reason":"`, path)
		require.NotContains(t, string(body), "event: finish", path)
		if path != "/api/v1/chat" {
			require.Contains(t, string(body), `"code":"upstream_`, path)
		}
		rc.send(t, f, "HTTP/1.1", "POST", path, streamBody("hi [[sim:tokens=2]]"))
		resp, _, err = rc.read(t)
		require.NoError(t, err, path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
}

// A client that asks to close gets its stream chunked and complete, then the
// connection closes; an HTTP/1.0 client gets a body that ends with the
// connection.
func TestStreamsCloseWhenTheClientAsks(t *testing.T) {
	f := newChatFixture(t)
	rc := f.dialRaw(t)
	rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", streamBody("hi [[sim:tokens=3]]"), "Connection", "close")
	resp, body, err := rc.read(t)
	require.NoError(t, err)
	require.True(t, resp.Close)
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	require.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"), "%q", body)
	_, err = rc.br.ReadByte()
	require.ErrorIs(t, err, io.EOF)

	rc = f.dialRaw(t)
	rc.send(t, f, "HTTP/1.0", "POST", "/v1/chat/completions", streamBody("hi [[sim:tokens=3]]"))
	resp, body, err = rc.read(t)
	require.NoError(t, err)
	require.Empty(t, resp.TransferEncoding)
	require.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"), "%q", body)
}

// A stream gives its concurrency slot back before its connection serves the
// client's next request: a key allowed one request at a time streams turn
// after turn on one connection without a 429.
func TestNextRequestOnAKeptConnectionFindsTheSlotFree(t *testing.T) {
	c := meter.NewMemoryCounters(meter.NoSeeder{})
	l := newLimits(t, c, testPlan(func(p *meter.Plan) { p.MaxConcurrent = 1 }))
	f := newChatFixture(t, withLimits(l, nil, uncapped()))
	rc := f.dialRaw(t)
	for i := range 20 {
		rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", streamBody("hi [[sim:tokens=2]]"))
		resp, body, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "turn %d: %s", i, body)
	}
}

// The client's next request does not wait for the upstream to end its
// stream after [DONE]: an upstream that holds its chunked terminator back
// delays nothing the client sees.
func TestNextRequestDoesNotWaitForTheUpstreamsEnd(t *testing.T) {
	release := make(chan struct{})
	var first atomic.Bool
	up := newFakeUpstream(t, func(ctx *fasthttp.RequestCtx) {
		hold := first.CompareAndSwap(false, true)
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			_, _ = w.WriteString(upstreamFrames)
			_ = w.Flush()
			if hold {
				<-release // [DONE] went out; the terminator waits
			}
		})
	})
	defer close(release)
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.dial = up.dial
		// Only the hand-off's own bound may end the wait, not the
		// upstream's idle bound.
		o.upstream = func(c *UpstreamConfig) { c.StreamIdle = time.Minute }
	})
	rc := f.dialRaw(t)
	for i := range 2 {
		rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", streamBody("hi"))
		resp, body, err := rc.read(t)
		require.NoError(t, err, "turn %d", i)
		require.Equal(t, http.StatusOK, resp.StatusCode, "turn %d: %s", i, body)
		require.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"), "turn %d: %q", i, body)
	}
}

// Once shutdown begins, a stream says it closes its connection and does.
func TestStreamsCloseTheirConnectionOnceShutdownBegins(t *testing.T) {
	f := newChatFixture(t)
	rc := f.dialRaw(t)
	f.chat.StopKeepAlive()
	rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", streamBody("hi [[sim:tokens=3]]"))
	resp, body, err := rc.read(t)
	require.NoError(t, err)
	require.True(t, resp.Close)
	require.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"), "%q", body)
	_, err = rc.br.ReadByte()
	require.ErrorIs(t, err, io.EOF)
}

// A stream the upstream refuses before its first byte is answered on the
// connection the stream took over as the edge answers any refusal — status,
// envelope, the request id, version and rate headers — with a body of
// known length, so the connection serves the client's next request. The
// refusal counts on its route as what it was, and its ledger row says so.
func TestStreamsRefusedBeforeTheirFirstByteKeepTheirConnection(t *testing.T) {
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(nil))
	sink := &recordingSink{}
	f := newChatFixture(t, withLimits(l, sink, uncapped()))
	rc := f.dialRaw(t)
	cases := []struct {
		path, directive, code string
		status                int
	}{
		{"/v1/chat/completions", "[[sim:fault=rate_limited]]", `"code":"upstream_overloaded"`, http.StatusServiceUnavailable},
		{"/api/v1/chat", "[[sim:status=503]]", `"code":"upstream_overloaded"`, http.StatusServiceUnavailable},
		{"/api/v2/chat", "[[sim:fault=context_length]]", `"code":"context_overflow"`, http.StatusBadRequest},
	}
	for i, c := range cases {
		rc.send(t, f, "HTTP/1.1", "POST", c.path, streamBody("hi "+c.directive), "X-Request-Id", fmt.Sprintf("refused-%d", i))
		resp, body, err := rc.read(t)
		require.NoError(t, err, c.path)
		require.Equal(t, c.status, resp.StatusCode, "%s: %s", c.path, body)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), c.path)
		require.Equal(t, int64(len(body)), resp.ContentLength, c.path)
		require.Contains(t, string(body), c.code, c.path)
		require.Equal(t, fmt.Sprintf("refused-%d", i), resp.Header.Get("X-Request-Id"), c.path)
		require.NotEmpty(t, resp.Header.Get("Gateway-Version"), c.path)
		require.Equal(t, "600", resp.Header.Get("X-RateLimit-Limit"), c.path)
		require.False(t, resp.Close, c.path)
	}
	rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", streamBody("hi [[sim:tokens=2]]"))
	resp, body, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	require.Eventually(t, func() bool { return len(sink.all()) == len(cases)+1 }, 2*time.Second, time.Millisecond)
	rows := map[string]hotpath.UsageRecord{}
	for _, row := range sink.all() {
		rows[row.RequestID] = row
	}
	for i, c := range cases {
		row := rows[fmt.Sprintf("refused-%d", i)]
		require.Equal(t, c.status, row.Status, c.path)
		require.Equal(t, strings.Trim(strings.TrimPrefix(c.code, `"code":`), `"`), row.ErrorCode, c.path)
		require.True(t, row.Stream, c.path)
		require.False(t, row.Billed, c.path)
		require.Equal(t, "key-1", row.KeyID, c.path)
	}
	require.Equal(t, 1.0, metricValue(t, f, `gateway_requests_total{route="chat_openai",status="5xx"}`))
	// The stream's row is written before its last frames; it is counted
	// once it has ended.
	require.Eventually(t, func() bool {
		return metricValue(t, f, `gateway_requests_total{route="chat_openai",status="2xx"}`) == 1.0
	}, 2*time.Second, time.Millisecond)
	require.Equal(t, 1.0, metricValue(t, f, `gateway_requests_total{route="chat_v2",status="4xx"}`))
	require.Equal(t, 2.0, metricValue(t, f, `gateway_errors_total{code="upstream_overloaded"}`))
	require.Equal(t, 1.0, metricValue(t, f, `gateway_errors_total{code="context_overflow"}`))
	require.Zero(t, f.chat.gate.InFlight(), "every slot came back")
}

// A panic in a stream's upstream call — which runs after the handler, out
// of the edge's recovery — is answered 500 in the envelope, frees the
// stream's slots, and leaves the process and the connection serving.
func TestAPanicInAStreamsUpstreamCallIsAnswered(t *testing.T) {
	var calls atomic.Int32
	f := newChatFixture(t, func(o *fixtureOptions) {
		o.dial = func() (net.Conn, error) {
			calls.Add(1)
			panic("dialer exploded")
		}
	})
	rc := f.dialRaw(t)
	for range 2 {
		rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", streamBody("hi"))
		resp, body, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode, string(body))
		require.Contains(t, string(body), `"code":"internal_error"`)
	}
	require.Positive(t, calls.Load())
	require.Contains(t, f.logs.String(), "stream's upstream call panicked")
	require.Eventually(t, func() bool { return f.chat.open.Load() == 0 && f.chat.gate.InFlight() == 0 },
		2*time.Second, time.Millisecond)
}

// A connection a stream handed back is served by the server's twin
// (NewServer), and shutdown closes it like any other idle connection: it
// does not wait for the client to leave, and the client sees its
// connection end. (The connection serves one more request first: fasthttp
// counts a connection that has served none yet as idle only five seconds
// after it began serving it, as net/http does.)
func TestShutdownClosesIdleConnectionsAStreamHandedBack(t *testing.T) {
	f := newChatFixture(t)
	const plainBody = `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`
	streamed, plain := f.dialRaw(t), f.dialRaw(t)
	streamed.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", streamBody("hi [[sim:tokens=3]]"))
	resp, _, err := streamed.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.False(t, resp.Close)
	for _, rc := range []*rawConn{streamed, plain} {
		rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", plainBody)
		resp, _, err = rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	require.Eventually(t, func() bool { return f.chat.open.Load() == 0 }, 2*time.Second, time.Millisecond)
	require.EqualValues(t, 1, f.srv.kept.GetOpenConnectionsCount(), "the streamed connection is the twin's")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, f.srv.ShutdownWithContext(ctx))
	for _, rc := range []*rawConn{streamed, plain} {
		_, err := rc.br.ReadByte()
		require.ErrorIs(t, err, io.EOF)
	}
}

// A stream opened before shutdown's grace keeps its connection, so its
// client may pipeline its next request behind it. When the stream ends
// after the grace, that request — whole, or only begun — is refused 503
// server_shutting_down with Connection: close in its own path's envelope,
// as any request arriving on a kept connection then is, instead of being
// dropped with the connection; nothing of it reaches the upstream.
func TestRequestPipelinedBehindAStreamEndingAfterTheGraceIsRefused(t *testing.T) {
	const plainBody = `{"model":"mira","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	type pipelined struct {
		name, path, want string
		split            int  // bytes of the pipelined request sent only after the stream ended
		late             bool // sent once the stream has taken the connection over
		tcp              bool // on a loopback socket, not in memory
	}
	var cases []pipelined
	for _, tcp := range []bool{false, true} {
		net := " in memory"
		if tcp {
			net = " over TCP"
		}
		cases = append(cases,
			pipelined{"whole" + net, "/v1/messages", `"type":"overloaded_error"`, 0, false, tcp},
			pipelined{"head begun" + net, "/api/v1/chat", `"code":"server_shutting_down"`, 20, false, tcp},
			pipelined{"sent during the stream" + net, "/api/v1/chat", `"code":"server_shutting_down"`, 0, true, tcp})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			up := newFakeUpstream(t, func(ctx *fasthttp.RequestCtx) {
				ctx.SetContentType("text/event-stream")
				ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
					<-release
					_, _ = w.WriteString(upstreamFrames)
					_ = w.Flush()
				})
			})
			f := newChatFixture(t, func(o *fixtureOptions) {
				o.dial = up.dial
				o.upstream = func(c *UpstreamConfig) { c.StreamIdle = time.Minute }
				o.tcp = c.tcp
			})
			rc := f.dialRaw(t)
			var next strings.Builder
			fmt.Fprintf(&next, "POST %s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
				"Content-Length: %d\r\n\r\n%s", c.path, f.key, len(plainBody), plainBody)
			pipelined := next.String()
			rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", streamBody("hi"))
			if !c.late {
				_, err := io.WriteString(rc.c, pipelined[:len(pipelined)-c.split])
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool { return up.calls.Load() == 1 }, 2*time.Second, time.Millisecond)
			if c.late {
				// The upstream is called once the stream owns the
				// connection: these bytes reach its socket, not the
				// server's buffer.
				_, err := io.WriteString(rc.c, pipelined)
				require.NoError(t, err)
			}

			// The grace passes while the stream waits for its upstream;
			// then it ends.
			f.edge.Drain()
			f.chat.StartDrain()
			f.edge.StopServing()
			f.chat.StopKeepAlive()
			close(release)
			resp, body, err := rc.read(t)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
			require.False(t, resp.Close, "opened before the grace, the stream promised its connection")
			require.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"), "%q", body)
			if c.split > 0 {
				_, err = io.WriteString(rc.c, pipelined[len(pipelined)-c.split:])
				require.NoError(t, err)
			}

			resp, body, err = rc.read(t)
			require.NoError(t, err)
			require.Contains(t, []int{http.StatusServiceUnavailable, 529}, resp.StatusCode, "%s", body)
			require.True(t, resp.Close)
			require.Contains(t, string(body), c.want)
			require.NotEmpty(t, resp.Header.Get(headerRequestID))
			_, err = rc.br.ReadByte()
			require.ErrorIs(t, err, io.EOF)
			require.EqualValues(t, 1, up.calls.Load(), "the refused request never reached the upstream")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.True(t, f.chat.Drain(ctx))
		})
	}
}

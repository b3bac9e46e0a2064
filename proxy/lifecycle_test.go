package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/meter"
)

// The connection lifecycle, byte by byte over loopback TCP: what a client
// library would hide (a byte written on an idle connection, a response
// answered twice, a request lost in a read buffer) is what these tests look
// for. The server runs with short timeouts so that idling past them is
// quick.
const (
	lcRead = 400 * time.Millisecond
	lcIdle = 1200 * time.Millisecond
)

func newLifecycleFixture(t *testing.T, edit ...func(*fixtureOptions)) *chatFixture {
	t.Helper()
	return newChatFixture(t, append([]func(*fixtureOptions){func(o *fixtureOptions) {
		o.tcp = true
		o.server = ServerConfig{ReadTimeout: lcRead, IdleTimeout: lcIdle, MaxBodySize: 64 << 10}
	}}, edit...)...)
}

// lcKind is one way a request ends.
type lcKind struct {
	name   string
	body   string
	status int
}

func lcKinds() []lcKind {
	return []lcKind{
		{"plain", `{"model":"mira","messages":[{"role":"user","content":"hi [[sim:tokens=3]]"}]}`, http.StatusOK},
		{"stream", streamBody("hi [[sim:tokens=3]]"), http.StatusOK},
		{"refused", streamBody("hi [[sim:status=500]]"), http.StatusServiceUnavailable},
		{"failed", streamBody("hi [[sim:drop_after=2]] [[sim:tokens=10]]"), http.StatusOK},
	}
}

var lcPaths = []string{"/api/v1/chat", "/api/v2/chat", "/v1/chat/completions"}

// requireSilence asserts that nothing arrives on rc for d.
func requireSilence(t *testing.T, rc *rawConn, d time.Duration) {
	t.Helper()
	require.NoError(t, rc.c.SetReadDeadline(time.Now().Add(d)))
	b, err := rc.br.Peek(1)
	require.Empty(t, b, "bytes arrived on an idle connection")
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "the connection ended: %v", err)
	require.NoError(t, rc.c.SetReadDeadline(time.Now().Add(10*time.Second)))
}

// requireClosedSilently asserts that the server closes rc without writing
// (a reset counts: a server that closes with the client's bytes unread
// resets the connection).
func requireClosedSilently(t *testing.T, rc *rawConn) {
	t.Helper()
	b, err := rc.br.Peek(1)
	require.Empty(t, b, "bytes arrived before the close")
	if !errors.Is(err, syscall.ECONNRESET) {
		require.ErrorIs(t, err, io.EOF)
	}
}

// requireKind checks a response to a request of kind k.
func requireKind(t *testing.T, k lcKind, resp *http.Response, body []byte, err error) {
	t.Helper()
	require.NoError(t, err)
	require.Equal(t, k.status, resp.StatusCode, "%s: %s", k.name, body)
	require.NotEmpty(t, resp.Header.Get(headerRequestID))
	require.NotEmpty(t, resp.Header.Get(HeaderVersion))
}

// The defect that started this suite: after a complete stream, a client
// that kept its connection idle past the read timeout was sent an
// unsolicited 400. Every kind of request on every wire leaves a connection
// that is quiet while idle, serves the next request after the read timeout
// has passed, and is closed without a word at the idle timeout.
func TestKeptConnectionsAreQuietUntilTheIdleTimeout(t *testing.T) {
	f := newLifecycleFixture(t)
	for _, path := range lcPaths {
		for _, k := range lcKinds() {
			t.Run(path+"/"+k.name, func(t *testing.T) {
				t.Parallel()
				rc := f.dialRaw(t)
				rc.send(t, f, "HTTP/1.1", "POST", path, k.body)
				resp, body, err := rc.read(t)
				requireKind(t, k, resp, body, err)
				require.False(t, resp.Close)
				requireSilence(t, rc, 2*lcRead)
				rc.send(t, f, "HTTP/1.1", "POST", path, k.body)
				resp, body, err = rc.read(t)
				requireKind(t, k, resp, body, err)
				start := time.Now()
				requireClosedSilently(t, rc)
				require.Greater(t, time.Since(start), lcIdle/2, "closed before the idle timeout")
			})
		}
	}
}

// A client's Connection: close and an HTTP/1.0 request without keep-alive
// end the connection after the response, whatever the response was.
func TestConnectionsCloseWhenTheClientSaysSo(t *testing.T) {
	f := newLifecycleFixture(t)
	for _, path := range lcPaths {
		for _, k := range lcKinds() {
			t.Run(path+"/"+k.name, func(t *testing.T) {
				t.Parallel()
				rc := f.dialRaw(t)
				rc.send(t, f, "HTTP/1.1", "POST", path, k.body, "Connection", "close")
				resp, body, err := rc.read(t)
				requireKind(t, k, resp, body, err)
				require.True(t, resp.Close)
				requireClosedSilently(t, rc)

				rc = f.dialRaw(t)
				rc.send(t, f, "HTTP/1.0", "POST", path, k.body)
				resp, body, err = rc.read(t)
				requireKind(t, k, resp, body, err)
				requireClosedSilently(t, rc)
			})
		}
	}
}

// rawRequest is one request's bytes.
func rawRequest(f *chatFixture, method, path, body string, headers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n", method, path, f.key)
	if body != "" || method == "POST" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	return b.String() + "\r\n" + body
}

// Requests pipelined behind any kind of request — a stream, a stream
// refused before it opened, a stream that failed — sent in the same write,
// are each answered, in order: a stream hands its connection back with
// every byte the server had read past its request.
func TestPipelinedRequestsAreAnsweredInOrder(t *testing.T) {
	f := newLifecycleFixture(t)
	for _, path := range lcPaths {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			kinds := append(lcKinds(), lcKinds()...)
			var all strings.Builder
			for _, k := range kinds {
				all.WriteString(rawRequest(f, "POST", path, k.body))
			}
			rc := f.dialRaw(t)
			_, err := io.WriteString(rc.c, all.String())
			require.NoError(t, err)
			for _, k := range kinds {
				resp, body, err := rc.read(t)
				requireKind(t, k, resp, body, err)
				if k.name == "stream" && path != "/api/v2/chat" {
					require.Contains(t, string(body), "[DONE]", k.name)
				}
			}
			requireSilence(t, rc, 2*lcRead)
		})
	}
}

// A request pipelined behind a stream that the server cannot read is
// answered in the envelope of its own path, and a bare-LF head there is
// refused at once: the connection the stream hands back reads the bytes
// kept from before the stream as the start of the next head.
func TestARequestPipelinedBehindAStreamIsReadAsAHead(t *testing.T) {
	f := newLifecycleFixture(t)
	stream := lcKinds()[1]
	for _, c := range []struct{ name, req, want string }{
		{"two Content-Lengths", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", `{"error":{`},
		{"bare LF", "GET /v1/models HTTP/1.1\nHost: gw\n\n", "CRLF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rc := f.dialRaw(t)
			_, err := io.WriteString(rc.c, rawRequest(f, "POST", "/v1/chat/completions", stream.body)+c.req)
			require.NoError(t, err)
			resp, body, err := rc.read(t)
			requireKind(t, stream, resp, body, err)
			start := time.Now()
			resp, body, err = rc.read(t)
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
			require.Contains(t, string(body), c.want)
			require.Less(t, time.Since(start), lcRead, "answered at once")
			require.True(t, resp.Close)
		})
	}
}

// The shape of a request-smuggling attempt: the head of a second request
// arrives with a stream's request and its body a moment later. The body is
// the second request's body — here not JSON, so a 400 — and never parsed as
// a request of its own (it reads like one: GET /api/v1/me).
func TestABodyThatArrivesLateIsNeverReadAsARequest(t *testing.T) {
	f := newLifecycleFixture(t)
	smuggled := "GET /api/v1/me HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + f.key + "\r\n\r\n"
	for _, path := range lcPaths {
		for _, k := range lcKinds()[1:3] {
			t.Run(path+"/"+k.name, func(t *testing.T) {
				t.Parallel()
				rc := f.dialRaw(t)
				second := rawRequest(f, "POST", "/v1/chat/completions", smuggled)
				head := second[:len(second)-len(smuggled)]
				_, err := io.WriteString(rc.c, rawRequest(f, "POST", path, k.body)+head)
				require.NoError(t, err)
				resp, body, err := rc.read(t)
				requireKind(t, k, resp, body, err)
				time.Sleep(100 * time.Millisecond) // the body comes later
				_, err = io.WriteString(rc.c, smuggled)
				require.NoError(t, err)
				resp, body, err = rc.read(t)
				require.NoError(t, err)
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
				require.Contains(t, string(body), "invalid_request")
				requireSilence(t, rc, 2*lcRead)
			})
		}
	}
}

// A request with both Content-Length and Transfer-Encoding is refused and
// its connection closed (RFC 9112 §6.1): what follows it is never served.
func TestAmbiguousFramingClosesTheConnection(t *testing.T) {
	f := newLifecycleFixture(t)
	body := streamBody("hi")
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + f.key +
		"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
	rc := f.dialRaw(t)
	_, err := io.WriteString(rc.c, req+rawRequest(f, "POST", "/v1/chat/completions", body))
	require.NoError(t, err)
	resp, out, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.True(t, resp.Close)
	require.Contains(t, string(out), `"invalid_request_error"`)
	requireClosedSilently(t, rc)
}

// Framing is decided on the head as it arrived (RFC 9112 §6.1), before any
// body is read: both Content-Length and Transfer-Encoding is 400, a
// Transfer-Encoding other than exactly chunked is 501, on every method and
// path, answered at once and with the connection closed, so what follows
// on the connection — bytes a hop before this one counted in the
// Content-Length — is never served. A chunked request alone is served.
func TestFramingIsDecidedOnTheHeadAsReceived(t *testing.T) {
	f := newLifecycleFixture(t)
	key := "Authorization: Bearer " + f.key + "\r\n"
	smuggled := "GET /api/v1/me HTTP/1.1\r\nHost: gw\r\n" + key + "\r\n"
	cases := []struct {
		name, head, body string
		status           int
		code             string
	}{
		{"an empty chunked body and a Content-Length", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key +
			"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n", 400, "invalid_request"},
		{"Transfer-Encoding first", "POST /api/v1/chat HTTP/1.1\r\nHost: gw\r\n" + key +
			"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n", 400, "invalid_request"},
		{"a chunk that never ends", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key +
			"Content-Length: 9\r\nTransfer-Encoding: chunked\r\n", "fff\r\nabc", 400, "invalid_request"},
		{"GET on no route", "GET /nowhere HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n",
			"0\r\n\r\n", 400, "invalid_request"},
		{"identity with a Content-Length", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key +
			"Content-Length: 5\r\nTransfer-Encoding: identity\r\n", "hello", 400, "invalid_request"},
		{"identity alone", "GET /api/v1/models HTTP/1.1\r\nHost: gw\r\n" + key + "Transfer-Encoding: IDENTITY\r\n",
			"", 501, "transfer_encoding_not_supported"},
		{"a folded coding", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key + "Transfer-Encoding:\r\n chunked\r\n",
			"0\r\n\r\n", 501, "transfer_encoding_not_supported"},
		{"two codings", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key +
			"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n", 501, "transfer_encoding_not_supported"},
		{"both, waiting for 100 Continue", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key +
			"Content-Length: 5\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n", "", 400, "invalid_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rc := f.dialRaw(t)
			start := time.Now()
			resp, body := rc.exchange(t, c.head+"\r\n"+c.body+smuggled)
			require.Equal(t, c.status, resp.StatusCode, string(body))
			require.Contains(t, string(body), `"code":"`+c.code+`"`)
			require.True(t, resp.Close)
			require.Less(t, time.Since(start), lcRead, "answered on the head, not after the read timeout")
			requireClosedSilently(t, rc)
		})
	}

	body := lcKinds()[0].body
	rc := f.dialRaw(t)
	for _, coding := range []string{"chunked", "Chunked"} {
		_, err := fmt.Fprintf(rc.c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n%sContent-Type: application/json\r\n"+
			"Transfer-Encoding: %s\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", key, coding, len(body), body)
		require.NoError(t, err)
		resp, out, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
		require.False(t, resp.Close)
	}
}

// Connection options are case-insensitive and a list (RFC 9110 §7.6.1):
// close in any case, among other options, closes the connection after the
// answer, a stream's included, as soon as it is written.
func TestConnectionCloseIsReadInAnyCase(t *testing.T) {
	f := newLifecycleFixture(t)
	for _, v := range []string{"Close", "CLOSE", "keep-alive, close", "Keep-Alive ,Close", "upgrade,close"} {
		for _, k := range lcKinds()[:2] {
			t.Run(v+"/"+k.name, func(t *testing.T) {
				t.Parallel()
				rc := f.dialRaw(t)
				rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", k.body, "Connection", v)
				resp, body, err := rc.read(t)
				requireKind(t, k, resp, body, err)
				require.True(t, resp.Close)
				start := time.Now()
				requireClosedSilently(t, rc)
				require.Less(t, time.Since(start), lcIdle/2, "held until the idle timeout")
			})
		}
	}
	// An HTTP/1.0 client that asks to keep its connection, then to close
	// it, is answered with the connection closed.
	rc := f.dialRaw(t)
	rc.send(t, f, "HTTP/1.0", "POST", "/v1/chat/completions", lcKinds()[0].body, "Connection", "Keep-Alive, Close")
	resp, body, err := rc.read(t)
	requireKind(t, lcKinds()[0], resp, body, err)
	require.True(t, resp.Close)
	start := time.Now()
	requireClosedSilently(t, rc)
	require.Less(t, time.Since(start), lcIdle/2, "held until the idle timeout")
}

// Expect: 100-continue is honoured; a body the gateway would refuse is
// refused before the client sends it.
func TestExpectContinue(t *testing.T) {
	f := newLifecycleFixture(t)
	rc := f.dialRaw(t)
	req := rawRequest(f, "POST", "/v1/chat/completions", streamBody("hi [[sim:tokens=3]]"), "Expect", "100-continue")
	head, body, _ := strings.Cut(req, "\r\n\r\n")
	_, err := io.WriteString(rc.c, head+"\r\n\r\n")
	require.NoError(t, err)
	line, err := rc.br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 100 Continue\r\n", line)
	line, err = rc.br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "\r\n", line)
	_, err = io.WriteString(rc.c, body)
	require.NoError(t, err)
	resp, out, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(out), "[DONE]")

	rc = f.dialRaw(t)
	_, err = io.WriteString(rc.c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 10000000\r\nExpect: 100-continue\r\n\r\n")
	require.NoError(t, err)
	resp, out, err = rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, string(out))
	require.Contains(t, string(out), `"payload_too_large"`)
	require.True(t, resp.Close)
}

// An HTTP/1.0 request's Expect: 100-continue is ignored (RFC 9110
// §10.1.1): no 100 Continue is sent, the body is read as it comes.
func TestExpectContinueIsIgnoredOnHTTP10(t *testing.T) {
	f := newLifecycleFixture(t)
	rc := f.dialRaw(t)
	req := rawRequest(f, "POST", "/v1/chat/completions", lcKinds()[0].body, "Expect", "100-continue")
	req = strings.Replace(req, "HTTP/1.1", "HTTP/1.0", 1)
	head, body, _ := strings.Cut(req, "\r\n\r\n")
	_, err := io.WriteString(rc.c, head+"\r\n\r\n")
	require.NoError(t, err)
	requireSilence(t, rc, lcRead/4)
	_, err = io.WriteString(rc.c, body)
	require.NoError(t, err)
	resp, out, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
}

// A client that half-closes after its request reads, like one that left,
// as gone (as it does to nginx): its stream is delivered whole when it ends
// before the departure watcher looks, and otherwise abandoned cleanly. Either
// way the slot comes back and the connection closes.
func TestHalfClosedClientIsServedOrCleanlyAbandoned(t *testing.T) {
	f := newLifecycleFixture(t)
	for _, tokens := range []string{"[[sim:tokens=3]]", "[[sim:tokens=400]] [[sim:itl_ms=10]]"} {
		for _, path := range lcPaths {
			rc := f.dialRaw(t)
			rc.send(t, f, "HTTP/1.1", "POST", path, streamBody("hi "+tokens))
			require.NoError(t, rc.c.(*net.TCPConn).CloseWrite())
			resp, body, _ := rc.read(t)
			require.Equal(t, http.StatusOK, resp.StatusCode, path)
			complete := strings.Contains(string(body), "[DONE]") || strings.Contains(string(body), "event: finish")
			require.True(t, complete || len(body) < 40000, "%s: %d bytes: neither whole nor abandoned", path, len(body))
			requireClosedSilently(t, rc)
		}
	}
	require.Eventually(t, func() bool { return f.chat.gate.InFlight() == 0 && f.chat.open.Load() == 0 },
		2*time.Second, 5*time.Millisecond)
}

// A client that leaves mid-stream: the slot and the reservation come back
// and the ledger row says what happened.
func TestClientThatLeavesMidStreamIsBilledAndFreed(t *testing.T) {
	sink := &recordingSink{}
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(func(p *meter.Plan) { p.MaxConcurrent = 1 }))
	f := newLifecycleFixture(t, withLimits(l, sink, uncapped()))
	for i, path := range lcPaths {
		rc := f.dialRaw(t)
		rc.send(t, f, "HTTP/1.1", "POST", path, streamBody("hi [[sim:tokens=400]] [[sim:itl_ms=10]]"))
		for range 12 { // the head and a few frames
			_, err := rc.br.ReadString('\n')
			require.NoError(t, err)
		}
		require.NoError(t, rc.c.Close())
		require.Eventually(t, func() bool { return len(sink.all()) == i+1 }, 5*time.Second, 5*time.Millisecond, path)
		row := sink.all()[i]
		require.Equal(t, "client_closed_request", row.ErrorCode, path)
		require.True(t, row.Billed, path)
		require.Positive(t, row.OutputTokens, path)
		require.Eventually(t, func() bool { return f.chat.gate.InFlight() == 0 }, 2*time.Second, 5*time.Millisecond)
		// The key's one slot is free again.
		r := f.post(t, path, streamBody("hi [[sim:tokens=2]]"))
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		require.Eventually(t, func() bool { return len(sink.all()) == i+2 }, 5*time.Second, 5*time.Millisecond)
		// A stream's row is written before its last frames go out, so the
		// row is no sign that its slot is back: wait for the stream to end.
		require.Eventually(t, func() bool { return f.chat.gate.InFlight() == 0 }, 2*time.Second, 5*time.Millisecond)
		sink.mu.Lock()
		sink.rows = sink.rows[:i+1]
		sink.mu.Unlock()
	}
}

// A client that leaves a stream while it is quiet is noticed by the
// departure watcher, not by a failed write; its row bills the prompt's
// count, exactly what the whole stream bills, never the window the
// count stopped at when the departure was seen.
func TestClientThatLeavesAQuietStreamIsBilledItsPrompt(t *testing.T) {
	sink := &recordingSink{}
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(nil))
	f := newLifecycleFixture(t, withLimits(l, sink, uncapped()))
	body := streamBody("how are you today [[sim:tokens=2]] [[sim:itl_ms=1500]]")
	for i, path := range []string{"/api/v1/chat", "/v1/chat/completions"} {
		full := f.post(t, path, body)
		require.Equal(t, http.StatusOK, full.status, "%s", full.body)
		require.Eventually(t, func() bool { return len(sink.all()) == 2*i+1 }, 5*time.Second, 5*time.Millisecond)

		rc := f.dialRaw(t)
		rc.send(t, f, "HTTP/1.1", "POST", path, body)
		for {
			line, err := rc.br.ReadString('\n')
			require.NoError(t, err)
			if strings.HasPrefix(line, "data:") {
				break // the first frame; the next is 1.5 s away
			}
		}
		require.NoError(t, rc.c.Close())
		require.Eventually(t, func() bool { return len(sink.all()) == 2*i+2 }, 5*time.Second, 5*time.Millisecond, path)
		rows := sink.all()
		whole, left := rows[2*i], rows[2*i+1]
		require.Equal(t, "client_closed_request", left.ErrorCode, path)
		require.True(t, left.Billed, path)
		require.Positive(t, whole.InputTokens)
		require.Equal(t, whole.InputTokens, left.InputTokens, "%s: the prompt's count, not the window", path)
	}
}

// A client that leaves while its non-streaming answer is awaited is seen
// once the answer comes: the request is client_closed_request in the
// ledger, answered nothing, and billed as a stream whose client left
// before its first token (its prompt, no output).
func TestClientThatLeavesAWaitedAnswerIsClientClosed(t *testing.T) {
	sink := &recordingSink{}
	l := newLimits(t, meter.NewMemoryCounters(meter.NoSeeder{}), testPlan(nil))
	f := newLifecycleFixture(t, withLimits(l, sink, uncapped()))
	body := `{"model":"mira","messages":[{"role":"user","content":"how are you [[sim:tokens=5]] [[sim:ttft_ms=800]]"}]}`
	for i, path := range lcPaths {
		full := f.post(t, path, body)
		require.Equal(t, http.StatusOK, full.status, "%s", full.body)
		require.Eventually(t, func() bool { return len(sink.all()) == 2*i+1 }, 5*time.Second, 5*time.Millisecond)

		rc := f.dialRaw(t)
		rc.send(t, f, "HTTP/1.1", "POST", path, body)
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, rc.c.Close())
		require.Eventually(t, func() bool { return len(sink.all()) == 2*i+2 }, 5*time.Second, 5*time.Millisecond, path)
		rows := sink.all()
		whole, left := rows[2*i], rows[2*i+1]
		require.Equal(t, "client_closed_request", left.ErrorCode, path)
		require.Equal(t, 499, left.Status, path)
		require.True(t, left.Billed, path)
		require.Zero(t, left.OutputTokens, path)
		require.Equal(t, whole.InputTokens, left.InputTokens, path)
		require.Less(t, left.CostPico, whole.CostPico, path)
	}
}

// Errors of the HTTP layer are answered with their own status, in the
// envelope of the wire the path names when the path could be read — even
// when the server had to drop the request it could not read — with the
// request id and version headers, and the connection closes.
func TestHTTPLayerErrorsSpeakTheProductsLanguage(t *testing.T) {
	f := newLifecycleFixture(t)
	key := "Authorization: Bearer " + f.key + "\r\n"
	long := strings.Repeat("a", 17<<10)
	cases := []struct {
		name, req string
		status    int
		code      string
		wire      Envelope
	}{
		{"headers over 16 KiB on /v1", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key + "X-Long: " + long + "\r\nContent-Length: 0\r\n\r\n",
			431, "request_headers_too_large", EnvelopeOpenAI},
		{"headers over 16 KiB on /api", "POST /api/v1/chat HTTP/1.1\r\nHost: gw\r\n" + key + "X-Long: " + long + "\r\nContent-Length: 0\r\n\r\n",
			431, "request_headers_too_large", EnvelopeAPI},
		{"a head over both limits", "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Long: " + strings.Repeat(long, 2) + "\r\n\r\n",
			431, "request_headers_too_large", EnvelopeOpenAI},
		{"target over 8 KiB", "GET /v1/models?q=" + long[:9<<10] + " HTTP/1.1\r\nHost: gw\r\n\r\n", 414, "uri_too_long", EnvelopeOpenAI},
		{"bad chunk size", "POST /api/v1/chat HTTP/1.1\r\nHost: gw\r\n" + key + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
			400, "invalid_request", EnvelopeAPI},
		{"bad chunk size on /v1", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
			400, "invalid_request", EnvelopeOpenAI},
		{"two Content-Lengths", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
			400, "invalid_request", EnvelopeOpenAI},
		{"unknown Transfer-Encoding", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip\r\n\r\nabcd",
			501, "transfer_encoding_not_supported", EnvelopeOpenAI},
		{"no Host", "GET /api/v1/models HTTP/1.1\r\n\r\n", 400, "invalid_request", EnvelopeAPI},
		{"no Host on /v1", "GET /v1/models HTTP/1.1\r\n\r\n", 400, "invalid_request", EnvelopeOpenAI},
		{"NUL in a header", "GET /api/v1/models HTTP/1.1\r\nHost: gw\r\nX-A: a\x00b\r\n\r\n", 400, "invalid_request", EnvelopeAPI},
		{"NUL in a header on /v1/messages", "POST /v1/messages HTTP/1.1\r\nHost: gw\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n",
			400, "invalid_request", EnvelopeAnthropic},
		{"a space in a field name", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key + "X A: b\r\nContent-Length: 0\r\n\r\n",
			400, "invalid_request", EnvelopeOpenAI},
		{"a spaced Content-Length", "POST /api/v1/chat HTTP/1.1\r\nHost: gw\r\n" + key + "Content Length: 60\r\n\r\n",
			400, "invalid_request", EnvelopeAPI},
		{"bare LF", "GET /api/v1/models HTTP/1.1\nHost: gw\n\n", 400, "invalid_request", EnvelopeAPI},
		{"bare LF on /v1", "GET /v1/models HTTP/1.1\nHost: gw\n\n", 400, "invalid_request", EnvelopeOpenAI},
		{"body over the limit", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + key + "Content-Length: 100000\r\n\r\n" + strings.Repeat("x", 100000),
			413, "payload_too_large", EnvelopeOpenAI},
		{"chunked body over the limit on /v1/messages", "POST /v1/messages HTTP/1.1\r\nHost: gw\r\n" + key + "Transfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 100000, strings.Repeat("x", 100000)), 413, "payload_too_large", EnvelopeAnthropic},
		{"a head that stops on /v1", "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Slow: a", 408, "request_timeout", EnvelopeOpenAI},
		{"a body that stops on /v1/messages", "POST /v1/messages HTTP/1.1\r\nHost: gw\r\n" + key + "Content-Length: 100\r\n\r\n{\"model\"",
			408, "request_timeout", EnvelopeAnthropic},
		{"a request line that stops", "POST /v1/chat/compl", 408, "request_timeout", EnvelopeAPI},
		{"not HTTP", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "invalid_request", EnvelopeAPI},
		{"OPTIONS on /v1", "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n", 405, "method_not_allowed", EnvelopeOpenAI},
		{"OPTIONS on /api", "OPTIONS /api/v1/chat HTTP/1.1\r\nHost: gw\r\n\r\n", 405, "method_not_allowed", EnvelopeAPI},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rc := f.dialRaw(t)
			resp, body := rc.exchange(t, c.req)
			require.Equal(t, c.status, resp.StatusCode, string(body))
			require.NotEmpty(t, resp.Header.Get(headerRequestID))
			require.NotEmpty(t, resp.Header.Get(HeaderVersion))
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			switch c.wire {
			case EnvelopeOpenAI:
				require.True(t, strings.HasPrefix(string(body), `{"error":{`), string(body))
				require.Contains(t, string(body), `"code":"`+c.code+`"`)
			case EnvelopeAnthropic:
				require.True(t, strings.HasPrefix(string(body), `{"type":"error","error":{"type":"`), string(body))
			default:
				require.True(t, strings.HasPrefix(string(body), `{"code":"`+c.code+`"`), string(body))
				require.Contains(t, string(body), `"request_id":"`)
			}
			if c.status == 405 {
				require.Equal(t, "POST", resp.Header.Get("Allow"))
				return
			}
			require.True(t, resp.Close)
			requireClosedSilently(t, rc)
		})
	}
	// A header block under the limit — a long token, many headers — is
	// served, and so are fields with spaces in their values, with or
	// without one after the colon.
	rc := f.dialRaw(t)
	rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", lcKinds()[0].body, "X-Long", long[:12<<10], "X-Spaced", "a b  c")
	resp, body, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	req := rawRequest(f, "POST", "/v1/chat/completions", lcKinds()[0].body, "X-Tight", "a b")
	_, err = io.WriteString(rc.c, strings.Replace(req, "X-Tight: a b", "X-Tight:a b", 1))
	require.NoError(t, err)
	resp, body, err = rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
}

// A request that does not arrive whole within the read timeout — a pause
// mid-head, a slow-loris trickle, a body that stops — is answered 408 and
// closed; a connection that never sends a byte is closed without a word.
func TestReadTimeouts(t *testing.T) {
	f := newLifecycleFixture(t)
	t.Run("nothing sent", func(t *testing.T) {
		t.Parallel()
		rc := f.dialRaw(t)
		requireClosedSilently(t, rc)
	})
	t.Run("trickle", func(t *testing.T) {
		t.Parallel()
		rc := f.dialRaw(t)
		head := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Slow: " + strings.Repeat("a", 100)
		go func() {
			for i := range len(head) {
				if _, err := rc.c.Write([]byte{head[i]}); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		resp, body, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, string(body))
		require.Contains(t, string(body), `"code":"request_timeout"`)
		require.True(t, resp.Close)
	})
	t.Run("body stops", func(t *testing.T) {
		t.Parallel()
		rc := f.dialRaw(t)
		resp, body := rc.exchange(t, "POST /api/v1/chat HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{\"model\"")
		require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, string(body))
		require.Contains(t, string(body), `"request_id"`)
	})
}

// A bare-LF head is refused at once, not after the read timeout.
func TestBareLFIsRefusedAtOnce(t *testing.T) {
	f := newChatFixture(t, func(o *fixtureOptions) { o.tcp = true })
	rc := f.dialRaw(t)
	require.NoError(t, rc.c.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, body := rc.exchange(t, "POST /v1/chat/completions HTTP/1.1\nHost: gw\nContent-Length: 2\n\n{}")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "CRLF")
	// A body with bare LFs is not a head.
	rc = f.dialRaw(t)
	body2 := "{\n\"model\": \"mira\",\n\n\"messages\": [{\"role\":\"user\",\"content\":\"hi\"}]}"
	rc.send(t, f, "HTTP/1.1", "POST", "/v1/chat/completions", body2)
	resp, body, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
}

// On the sign-in paths the HTTP layer's refusals come in their OAuth-style
// envelope, the OAuth code in error, and are not cached (docs/signin.md).
func TestHTTPLayerErrorsOnSignInPathsAreOAuthErrors(t *testing.T) {
	f := newLifecycleFixture(t)
	for _, c := range []struct {
		req    string
		status int
		code   string
	}{
		{"POST /api/v1/auth/oauth/token?q=" + strings.Repeat("a", 9<<10) + " HTTP/1.1\r\nHost: gw\r\n\r\n", 414, "uri_too_long"},
		{"POST /api/v2/device/token HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
			400, "invalid_request"},
		{"POST /api/v1/device/code HTTP/1.1\r\nHost: gw\r\nContent-Length: 10000000\r\nExpect: 100-continue\r\n\r\n",
			413, "payload_too_large"},
	} {
		rc := f.dialRaw(t)
		resp, body := rc.exchange(t, c.req)
		require.Equal(t, c.status, resp.StatusCode, string(body))
		require.Contains(t, string(body), `"code":"`+c.code+`","error":"invalid_request"`)
		require.Contains(t, string(body), `"error_description":"`)
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	}
}

// The HTTP-layer errors say what was wrong: a broken chunk is not called a
// malformed header.
func TestHTTPLayerErrorsNameTheProblem(t *testing.T) {
	f := newLifecycleFixture(t)
	rc := f.dialRaw(t)
	_, err := io.WriteString(rc.c, "POST /api/v1/chat HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
	require.NoError(t, err)
	_, body, err := rc.read(t)
	require.NoError(t, err)
	require.Contains(t, string(body), "chunked body is malformed")
}

// Shutdown in two steps. During the grace every request is still served on
// every wire, and its answer closes the connection, so the client's next
// request goes through the load balancer again. Once the grace ends, a
// request on a connection kept from before is refused 503
// server_shutting_down, in its wire's envelope, with Connection: close;
// nothing of it reaches the upstream.
func TestShutdownDrainsKeptConnections(t *testing.T) {
	f := newLifecycleFixture(t)
	plain := lcKinds()[0]
	stream := lcKinds()[1]
	kept := map[string]*rawConn{}
	for _, path := range lcPaths {
		rc := f.dialRaw(t)
		rc.send(t, f, "HTTP/1.1", "POST", path, plain.body)
		resp, body, err := rc.read(t)
		requireKind(t, plain, resp, body, err)
		require.False(t, resp.Close)
		kept[path] = rc
	}

	f.edge.Drain()
	f.chat.StartDrain() // as the gateway's shutdown does
	for _, path := range lcPaths {
		for _, k := range []lcKind{plain, stream} {
			rc := f.dialRaw(t)
			rc.send(t, f, "HTTP/1.1", "POST", path, k.body)
			resp, body, err := rc.read(t)
			requireKind(t, k, resp, body, err)
			require.True(t, resp.Close, "%s %s: an answer during the grace closes its connection", path, k.name)
			requireClosedSilently(t, rc)
		}
	}

	f.edge.StopServing()
	for _, path := range lcPaths {
		rc := kept[path]
		rc.send(t, f, "HTTP/1.1", "POST", path, plain.body)
		resp, body, err := rc.read(t)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
		require.True(t, resp.Close)
		require.Contains(t, string(body), `"server_shutting_down"`)
		require.NotEmpty(t, resp.Header.Get(headerRequestID))
		requireClosedSilently(t, rc)
	}
	var out strings.Builder
	f.set.WritePrometheus(&out)
	require.Contains(t, out.String(), fmt.Sprintf(`gateway_errors_total{code="server_shutting_down"} %d`, len(lcPaths)))
}

// A client still uploading a body over the bound reads the 413 whole, then
// the connection's end, and every byte it sends meanwhile is taken: the
// server shuts its side and drains the rest before closing (a lingering
// close). Closed at once with the upload unread, the socket reset the
// connection, the client's writes failed, and the 413 in its receive queue
// was lost: what SDKs sending a large image saw, as a connection error.
func TestOversizeUploadGetsItsAnswer(t *testing.T) {
	f := newLifecycleFixture(t)
	rc := f.dialRaw(t)
	const size = 4 << 20
	_, err := fmt.Fprintf(rc.c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\n\r\n", size)
	require.NoError(t, err)
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for sent := 0; sent < size; sent += len(chunk) {
		_, err := rc.c.Write(chunk)
		require.NoError(t, err, "after %d bytes of the upload", sent)
	}
	resp, out, err := rc.read(t)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", out)
	require.Contains(t, string(out), `"payload_too_large"`)
	require.True(t, resp.Close)
	_, err = rc.br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server's end, not a reset")
}

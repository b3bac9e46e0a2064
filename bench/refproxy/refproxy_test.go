package refproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// serveUpstream serves h on a loopback listener and returns its base URL.
func serveUpstream(t testing.TB, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true}
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// serveProxy starts a reference proxy to upstream and returns its base URL.
func serveProxy(t testing.TB, upstream string) string {
	t.Helper()
	p, err := New(Config{Upstream: upstream})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Shutdown()
		require.NoError(t, <-done)
	})
	return "http://" + ln.Addr().String()
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name, upstream, wantErr string
	}{
		{"ok", "http://127.0.0.1:8080", ""},
		{"trailing slash", "http://127.0.0.1:8080/", ""},
		{"https default port", "https://example.com", ""},
		{"empty", "", "upstream: required"},
		{"scheme", "ftp://127.0.0.1:21", "is not http or https"},
		{"path", "http://127.0.0.1:8080/v1", "without path"},
		{"no host", "http://", "no host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{Upstream: tc.upstream})
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	_, err := New(Config{Upstream: "http://127.0.0.1:1", MaxConns: -1})
	require.ErrorContains(t, err, "max conns")

	p, err := New(Config{Upstream: "https://example.com"})
	require.NoError(t, err)
	require.Equal(t, "example.com:443", p.client.Addr)
	require.True(t, p.client.IsTLS)
	require.Equal(t, "example.com", p.host)
}

func TestJSONRoundTrip(t *testing.T) {
	upstreamURL := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		h := &ctx.Request.Header
		// What the upstream saw, echoed in headers the test reads back.
		ctx.Response.Header.Set("X-Seen-Method", string(ctx.Method()))
		ctx.Response.Header.Set("X-Seen-URI", string(h.RequestURI()))
		ctx.Response.Header.Set("X-Seen-Host", string(h.Host()))
		ctx.Response.Header.Set("X-Seen-Auth", string(h.Peek("Authorization")))
		ctx.Response.Header.Set("X-Seen-Hop", string(h.Peek("X-Hop"))+"|"+string(h.Peek("Keep-Alive")))
		ctx.Response.Header.Set("X-Request-Id", "req_123")
		ctx.Response.Header.Add("X-Multi", "a")
		ctx.Response.Header.Add("X-Multi", "b")
		ctx.Response.Header.Set("Keep-Alive", "timeout=5")
		ctx.SetStatusCode(fasthttp.StatusCreated)
		ctx.SetContentType("application/json")
		ctx.SetBody(append([]byte(`{"echo":`), append(ctx.PostBody(), '}')...))
	})
	proxyURL := serveProxy(t, upstreamURL)

	body := `{"model":"mira","messages":[{"role":"user","content":"Hello"}]}`
	req, err := http.NewRequest(http.MethodPost, proxyURL+"/v1/chat/completions?x=1&y=%2F", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-test")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "secret")
	req.Header.Set("Keep-Alive", "timeout=9")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	want := `{"echo":` + body + `}`
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, want, string(got))
	require.Equal(t, int64(len(want)), resp.ContentLength, "a known length is kept")
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, "req_123", resp.Header.Get("X-Request-Id"))
	require.Equal(t, []string{"a", "b"}, resp.Header.Values("X-Multi"))
	require.Empty(t, resp.Header.Get("Keep-Alive"), "hop-by-hop response header")
	require.Equal(t, "POST", resp.Header.Get("X-Seen-Method"))
	require.Equal(t, "/v1/chat/completions?x=1&y=%2F", resp.Header.Get("X-Seen-URI"))
	require.Equal(t, strings.TrimPrefix(upstreamURL, "http://"), resp.Header.Get("X-Seen-Host"))
	require.Equal(t, "Bearer sk-test", resp.Header.Get("X-Seen-Auth"))
	require.Equal(t, "|", resp.Header.Get("X-Seen-Hop"), "hop-by-hop request headers and those Connection names")
}

func TestGetWithoutBody(t *testing.T) {
	upstreamURL := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		if ctx.IsGet() && len(ctx.PostBody()) == 0 {
			ctx.SetBodyString(`{"status":"ok"}`)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusBadRequest)
	})
	proxyURL := serveProxy(t, upstreamURL)

	for range 3 { // the upstream connection is reused
		resp, err := http.Get(proxyURL + "/health")
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.JSONEq(t, `{"status":"ok"}`, string(got))
	}
}

// TestSSEIsNotBuffered proves the head and each frame reach the client while
// the upstream is still writing: the upstream sends its head, then waits
// until the client has it; then writes a frame and waits until the client
// has read it before it writes the next one. A proxy that buffered the body
// would deliver nothing, and the upstream would give up.
func TestSSEIsNotBuffered(t *testing.T) {
	const frames = 4
	read := make(chan struct{})
	upstreamURL := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		ctx.Response.ImmediateHeaderFlush = true
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			select { // the head first, alone
			case <-read:
			case <-time.After(10 * time.Second):
				_, _ = w.WriteString("data: the client never saw the head\n\n")
				return
			}
			for i := range frames {
				_, _ = w.WriteString("data: {\"n\":" + string(rune('0'+i)) + "}\n\n")
				if w.Flush() != nil {
					return
				}
				select {
				case <-read:
				case <-time.After(10 * time.Second):
					_, _ = w.WriteString("data: the client never saw the frame\n\n")
					return
				}
			}
			_, _ = w.WriteString("data: [DONE]\n\n")
		})
	})
	proxyURL := serveProxy(t, upstreamURL)

	resp, err := http.Post(proxyURL+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	require.Equal(t, int64(-1), resp.ContentLength)
	read <- struct{}{} // the head arrived before any frame was written

	br := bufio.NewReader(resp.Body)
	frame := func() string {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		blank, err := br.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "\n", blank)
		return line
	}
	for i := range frames {
		require.Equal(t, "data: {\"n\":"+string(rune('0'+i))+"}\n", frame())
		read <- struct{}{} // the upstream may write the next frame
	}
	require.Equal(t, "data: [DONE]\n", frame())
	rest, err := io.ReadAll(br)
	require.NoError(t, err, "a complete stream ends cleanly")
	require.Empty(t, rest)
}

// TestClientGoneClosesUpstream: when the client leaves mid-stream, the
// upstream's connection is closed, so its writes start failing.
func TestClientGoneClosesUpstream(t *testing.T) {
	writeFailed := make(chan struct{})
	upstreamURL := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				_, _ = w.WriteString("data: {}\n\n")
				if w.Flush() != nil {
					close(writeFailed)
					return
				}
			}
		})
	})
	proxyURL := serveProxy(t, upstreamURL)

	conn, err := net.Dial("tcp", strings.TrimPrefix(proxyURL, "http://"))
	require.NoError(t, err)
	_, err = conn.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"))
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 200 OK\r\n", status)
	require.NoError(t, conn.Close())

	select {
	case <-writeFailed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream kept streaming to a client that had gone")
	}
}

// TestBrokenUpstreamBodyStaysBroken: an upstream that dies mid-body leaves
// the client's body cut short rather than cleanly ended.
func TestBrokenUpstreamBodyStaysBroken(t *testing.T) {
	for _, tc := range []struct{ name, head, body string }{
		{"chunked at a chunk boundary", "Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n",
			"a\r\ndata: {}\n\n\r\n"},
		{"chunked mid-chunk", "Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n",
			"14\r\ndata: {}\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream := serveRaw(t, "HTTP/1.1 200 OK\r\n"+tc.head+"\r\n"+tc.body)
			proxyURL := serveProxy(t, upstream)

			resp, err := http.Post(proxyURL+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			got, err := io.ReadAll(resp.Body)
			require.True(t, errors.Is(err, io.ErrUnexpectedEOF), "got %v", err)
			require.True(t, strings.HasPrefix("data: {}\n\n", string(got)), "got %q", got)
		})
	}
}

// TestShortKnownLengthBody: a body of known length that ends early never
// completes the client's response either; the head leaves the proxy with
// the body, so here the client sees the connection close.
func TestShortKnownLengthBody(t *testing.T) {
	upstream := serveRaw(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
	proxyURL := serveProxy(t, upstream)

	_, err := http.Post(proxyURL+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
	require.ErrorIs(t, err, io.EOF)
}

// serveRaw answers one connection's request with raw bytes, then closes it,
// and returns the base URL.
func serveRaw(t *testing.T, raw string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		for { // the request head; its body is left unread
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		_, _ = conn.Write([]byte(raw))
	}()
	return "http://" + ln.Addr().String()
}

func TestUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	proxyURL := serveProxy(t, "http://"+addr)

	resp, err := http.Post(proxyURL+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	require.Equal(t, badGateway, string(got))
	require.Equal(t, 1, strings.Count(string(got), "\n"), "one line")
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
}

func TestHandlerInMemory(t *testing.T) {
	// Handler serves a server of the caller's own.
	upstreamURL := serveUpstream(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"ok":true}`)
	})
	p, err := New(Config{Upstream: upstreamURL})
	require.NoError(t, err)
	t.Cleanup(p.Shutdown)

	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/x")
	p.Handler()(&ctx)
	require.Equal(t, fasthttp.StatusOK, ctx.Response.StatusCode())
	require.True(t, ctx.Response.IsBodyStream())
	var sb strings.Builder
	require.NoError(t, ctx.Response.BodyWriteTo(&sb))
	require.Equal(t, `{"ok":true}`, sb.String())
	ctx.Response.Reset() // closes the body, releasing the upstream response
}

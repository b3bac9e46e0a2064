// Package refproxy is the reference proxy of the bench harness: a bare
// byte-forwarding reverse proxy on fasthttp. It does what any proxy must do
// to add a hop and nothing else: no body parsing, no authentication, no
// accounting, no retries. Loaded beside the upstream itself and the gateway,
// it measures the floor: the latency and throughput any proxy pays for the
// extra hop, so the gateway's own overhead is what it costs above that.
//
// A request is forwarded with its method, request URI (path and query),
// headers minus the hop-by-hop ones, and body, on a pooled keep-alive
// connection to the upstream; the Host header names the upstream. The
// response comes back with its status and headers (minus hop-by-hop ones)
// and its body streamed as it arrives, never buffered whole: a body without
// a length (chunked, such as text/event-stream) is relayed one chunk per
// upstream read, each flushed to the client at once, so server-sent events
// pass through frame by frame. When the upstream cannot be reached or
// answers with a broken head, the client gets 502 with a one-line body; when
// the upstream body breaks after the head was relayed, the client's
// connection is closed without the terminating chunk, so a broken stream
// stays visibly broken.
package refproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Config configures a Proxy.
type Config struct {
	// Upstream is the base URL of the server requests go to:
	// http://host:port (or https://host:port). It must have no path, query
	// or fragment. Required.
	Upstream string
	// MaxConns bounds the connections to the upstream; a request that finds
	// them all busy waits for one. Default 4096.
	MaxConns int
}

// defaultMaxConns is Config.MaxConns when unset.
const defaultMaxConns = 4096

// maxConnWait is how long a request waits for a free upstream connection
// before it is answered 502.
const maxConnWait = 30 * time.Second

// Validate reports the first setting that is wrong.
func (c *Config) Validate() error {
	if _, _, _, err := parseUpstream(c.Upstream); err != nil {
		return err
	}
	if c.MaxConns < 0 {
		return errors.New("max conns: must not be negative")
	}
	return nil
}

// parseUpstream returns the Host header and the dial address of an
// upstream base URL.
func parseUpstream(raw string) (host, addr string, tls bool, err error) {
	if raw == "" {
		return "", "", false, errors.New("upstream: required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", false, fmt.Errorf("cannot parse upstream: %w", err)
	}
	switch u.Scheme {
	case "http":
	case "https":
		tls = true
	default:
		return "", "", false, fmt.Errorf("upstream: scheme %q is not http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return "", "", false, errors.New("upstream: no host")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", "", false, errors.New("upstream: must be a base URL without path, query, fragment or user")
	}
	addr = u.Host
	if u.Port() == "" {
		port := "80"
		if tls {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	return u.Host, addr, tls, nil
}

// Proxy is one reference proxy. It is safe for concurrent use.
type Proxy struct {
	host   string // the Host header sent upstream
	client *fasthttp.HostClient
	server *fasthttp.Server
}

// New returns a proxy to cfg.Upstream.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cannot configure reference proxy: %w", err)
	}
	host, addr, tls, _ := parseUpstream(cfg.Upstream)
	maxConns := cfg.MaxConns
	if maxConns == 0 {
		maxConns = defaultMaxConns
	}
	p := &Proxy{
		host: host,
		client: &fasthttp.HostClient{
			Addr:                     addr,
			IsTLS:                    tls,
			MaxConns:                 maxConns,
			MaxConnWaitTimeout:       maxConnWait,
			NoDefaultUserAgentHeader: true,
			Dial:                     dial,
			// Streamed responses only: the body is relayed as it arrives.
			StreamResponseBody: true,
			// The request URI goes upstream as the client wrote it.
			DisablePathNormalizing: true,
		},
	}
	p.server = &fasthttp.Server{
		Handler:               p.serve,
		Name:                  "refproxy",
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		MaxRequestBodySize:    64 << 20,
		ReadBufferSize:        16 << 10,
		CloseOnShutdown:       true,
	}
	return p, nil
}

// Handler returns the proxy's request handler, for a server of the caller's
// own (or a test's in-memory listener).
func (p *Proxy) Handler() fasthttp.RequestHandler { return p.serve }

// Serve accepts connections on ln until Shutdown is called or ln fails.
func (p *Proxy) Serve(ln net.Listener) error {
	if err := p.server.Serve(ln); err != nil {
		return fmt.Errorf("cannot serve reference proxy: %w", err)
	}
	return nil
}

// Shutdown stops accepting connections, closes the open ones, waits for the
// requests in flight to end, and closes idle upstream connections.
func (p *Proxy) Shutdown() {
	_ = p.server.Shutdown()
	p.client.CloseIdleConnections()
}

// badGateway is the body of every 502.
const badGateway = "bad gateway: cannot reach the upstream\n"

func (p *Proxy) serve(ctx *fasthttp.RequestCtx) {
	req := fasthttp.AcquireRequest()
	ctx.Request.Header.CopyTo(&req.Header)
	stripHopByHop(&req.Header)
	req.Header.ResetConnectionClose()
	req.Header.SetHost(p.host)
	if uri := ctx.Request.Header.RequestURI(); len(uri) == 0 || uri[0] != '/' {
		// Absolute-form or asterisk-form: send origin-form upstream.
		req.Header.SetRequestURIBytes(ctx.URI().RequestURI())
	}
	// The body is only read while Do writes the request, before serve
	// returns, so the client's buffer can be lent without a copy.
	req.SetBodyRaw(ctx.Request.Body())

	resp := fasthttp.AcquireResponse()
	resp.StreamBody = true
	err := p.client.Do(req, resp)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		ctx.Response.Reset()
		ctx.SetStatusCode(fasthttp.StatusBadGateway)
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString(badGateway)
		return
	}

	resp.Header.CopyTo(&ctx.Response.Header)
	ctx.Response.Header.SetNoDefaultContentType(true) // CopyTo reset it
	stripHopByHop(&ctx.Response.Header)
	ctx.Response.Header.ResetConnectionClose()
	if !resp.IsBodyStream() {
		// HEAD, 204, 304: nothing follows the head.
		fasthttp.ReleaseResponse(resp)
		return
	}
	// Known length: relayed as it is read, with the upstream's length; the
	// head leaves with the body. Unknown length (a stream): the head is
	// flushed at once, as the upstream sent it, then the body goes chunk by
	// chunk, each flushed as it arrives. Either way the response (and its
	// upstream connection) is released when the server closes the body
	// after writing it.
	b := acquireBody(resp)
	n := resp.Header.ContentLength()
	ctx.Response.ImmediateHeaderFlush = n < 0
	ctx.Response.SetBodyStream(b, n)
}

// body relays an upstream response's body stream to the client's response.
// fasthttp's server reads it while it writes the client's response and
// closes it when done, with the write's error if any.
type body struct {
	resp    *fasthttp.Response
	r       io.Reader
	chunked bool
	conn    *conn // the upstream connection, when known
}

var bodyPool = sync.Pool{New: func() any { return new(body) }}

func acquireBody(resp *fasthttp.Response) *body {
	b := bodyPool.Get().(*body)
	b.resp = resp
	b.r = resp.BodyStream()
	b.chunked = resp.Header.ContentLength() == -1
	if a, ok := resp.LocalAddr().(*connAddr); ok {
		b.conn = a.c
	}
	return b
}

// Read reads what the upstream has sent so far, at most len(p) bytes.
//
// fasthttp's client reports a chunked body cut at a chunk boundary (the
// upstream closed without the last chunk) as a clean io.EOF; a chunked body
// only ends by its last chunk, so an end that came with a failed connection
// read is turned into io.ErrUnexpectedEOF, and the client's stream is cut
// in turn instead of being terminated as if complete.
func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF && b.chunked && b.conn != nil && b.conn.failed.Load() {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Close ends the upstream body: a body read to its end leaves its
// connection to be reused, one cut short closes it, which is what tells the
// upstream that its client has gone.
func (b *body) Close() error {
	err := b.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(b.resp)
	*b = body{}
	bodyPool.Put(b)
	return err
}

// conn is an upstream connection that remembers whether a read failed
// (end of stream, reset, timeout), so a body can tell a cut stream from a
// complete one. Its LocalAddr leads back to it from a response.
type conn struct {
	net.Conn
	laddr  connAddr
	failed atomic.Bool
}

type connAddr struct {
	net.Addr
	c *conn
}

func dial(addr string) (net.Conn, error) {
	nc, err := fasthttp.Dial(addr)
	if err != nil {
		return nil, err
	}
	c := &conn{Conn: nc}
	c.laddr = connAddr{Addr: nc.LocalAddr(), c: c}
	return c, nil
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.failed.Store(true)
	}
	return n, err
}

func (c *conn) LocalAddr() net.Addr { return &c.laddr }

// header is what stripHopByHop needs of a request or response header.
type header interface {
	Peek(key string) []byte
	Del(key string)
	DelBytes(key []byte)
}

// hopByHop are the headers that belong to one connection (RFC 9110 7.6.1),
// never forwarded.
var hopByHop = [...]string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// stripHopByHop deletes the hop-by-hop headers, and those the Connection
// header names.
func stripHopByHop(h header) {
	if conn := h.Peek("Connection"); len(conn) > 0 {
		// Deleting headers moves the bytes Peek returned: work on a copy.
		var buf [128]byte
		names := append(buf[:0], conn...)
		for len(names) > 0 {
			var name []byte
			name, names, _ = bytes.Cut(names, []byte{','})
			if name = bytes.TrimSpace(name); len(name) > 0 {
				h.DelBytes(name)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}

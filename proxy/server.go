package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// ServerConfig is the HTTP/1.1 listener's limits and timeouts.
type ServerConfig struct {
	// ReadTimeout bounds reading one request, from its first byte to its
	// last (a new connection's first byte must also come within it).
	// Default 30s.
	ReadTimeout time.Duration
	// IdleTimeout bounds the silence of a kept connection between two
	// requests; it then closes without a word. Default 120s.
	IdleTimeout time.Duration
	// MaxBodySize is the largest request body. Default 8 MiB.
	MaxBodySize int
	// MaxHeaderBytes bounds a request's header fields (the block after the
	// request line). Default 16 KiB.
	MaxHeaderBytes int
	// MaxURIBytes bounds the request target. Default 8 KiB.
	MaxURIBytes int
	// Logger receives the server's own failures (a panic outside any
	// route, an accept error).
	Logger fasthttp.Logger
	// LargeBodies are routes that read a body larger than MaxBodySize
	// (file uploads), each with its own bound and read timeout; every
	// other route keeps MaxBodySize.
	LargeBodies []LargeBody
}

// LargeBody admits a larger request body on one route: method and exact
// path (without the query).
type LargeBody struct {
	Method, Path string
	// MaxBodySize is the route's body bound, bytes.
	MaxBodySize int
	// ReadTimeout replaces ReadTimeout for the route's requests; zero
	// keeps it.
	ReadTimeout time.Duration
}

func (c *ServerConfig) defaults() {
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 120 * time.Second
	}
	if c.MaxBodySize <= 0 {
		c.MaxBodySize = 8 << 20
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = 16 << 10
	}
	if c.MaxURIBytes <= 0 {
		c.MaxURIBytes = 8 << 10
	}
}

// requestLineRoom is what a request line takes besides its target: the
// longest method, two spaces, the version and CRLF.
const requestLineRoom = 32

// readBufferSize is a connection's read buffer: the longest request line
// and header block the limits allow (NewServer).
func (c *ServerConfig) readBufferSize() int {
	return c.MaxHeaderBytes + c.MaxURIBytes + requestLineRoom
}

// NewServer returns the server for the route table: every request passes
// the HTTP checks (a target or header block too long, ambiguous framing)
// before its route, and errors of the HTTP layer are answered in the
// envelope of the path's wire. chat, when not nil, has connections whose
// stream ended go on serving the client's next request.
//
// The read buffer holds the longest request line and header block the
// limits allow, so a request within them is always read whole and the
// edge, which knows the path, answers one beyond them; only a head longer
// than both limits together is refused by the server, in the envelope of
// the path its connection kept (requestWire).
//
// Connections are served by two fasthttp servers of the same
// configuration. The listener's connections keep their buffers while idle,
// as the reference proxy's do: releasing them between requests
// (ReduceMemoryUsage) costs a system call per request, about 8% of the
// gateway's CPU on non-streaming traffic. A stream, though, takes its
// connection over, and fasthttp does not take a taken-over connection's
// buffer back: on one server every stream would leave 24.6 KiB to the
// collector and the connection's next request would allocate a new one,
// most of the bytes the gateway allocates on short streams. So the
// connections a stream hands back are served by the twin, which releases
// their buffers between requests: a stream then takes its connection
// over holding none, and an idle streaming client's connection holds none
// either. Its price is the system call per request, on connections that
// have streamed (docs/performance.md).
func NewServer(cfg ServerConfig, rt *Router, chat *Chat) *Server {
	cfg.defaults()
	e := rt.edge
	e.maxHeaderBytes, e.maxURIBytes, e.maxBodySize = cfg.MaxHeaderBytes, cfg.MaxURIBytes, cfg.MaxBodySize
	e.largeBodies = cfg.LargeBodies
	h := rt.Handler()
	s := &Server{accepted: newHTTPServer(cfg, e, h), kept: newHTTPServer(cfg, e, h)}
	s.kept.ReduceMemoryUsage = true
	s.keptLn.closed = make(chan struct{})
	s.keptLn.accepting = make(chan struct{})
	if chat != nil {
		chat.KeepAlive(s.kept.ServeConn, cfg.IdleTimeout)
	}
	return s
}

func newHTTPServer(cfg ServerConfig, e *Edge, h fasthttp.RequestHandler) *fasthttp.Server {
	s := &fasthttp.Server{
		Handler:               h,
		Name:                  "gateway",
		NoDefaultServerHeader: true,
		ReadTimeout:           cfg.ReadTimeout,
		IdleTimeout:           cfg.IdleTimeout,
		MaxRequestBodySize:    cfg.MaxBodySize,
		ReadBufferSize:        cfg.readBufferSize(),
		CloseOnShutdown:       true,
		KeepHijackedConns:     true, // streams own their connections (ChatConfig.ConnsKept)
		Logger:                cfg.Logger,
		ErrorHandler:          e.ParseError,
		ExpectHandler:         e.expect,
		HeaderReceived:        e.requestConfig,
		// A multipart body is read as bytes like any other: fasthttp
		// would otherwise spool its files to disk before the route (and
		// its key check) runs.
		DisablePreParseMultipartForm: true,
	}
	return s
}

// Server is the gateway's HTTP/1.1 server (NewServer): fasthttp's server
// for the connections it accepts, and its twin for the connections
// streams hand back. It offers only serving and shutting down, which
// start and stop both: the twin has no listener of its own.
type Server struct {
	accepted, kept *fasthttp.Server
	// keptLn is the twin's listener, which accepts nothing: fasthttp's
	// shutdown closes only the connections of a server that is serving
	// a listener.
	keptLn    parkedListener
	startKept sync.Once
}

// Serve serves the connections ln accepts until the server shuts down.
func (s *Server) Serve(ln net.Listener) error {
	s.startKept.Do(func() {
		go func() { _ = s.kept.Serve(&s.keptLn) }()
		// Serving has begun once the twin waits to accept: from then
		// on its shutdown closes the connections it serves.
		select {
		case <-s.keptLn.accepting:
		case <-s.keptLn.closed:
		}
	})
	return s.accepted.Serve(ln)
}

// Shutdown is ShutdownWithContext without a deadline.
func (s *Server) Shutdown() error { return s.ShutdownWithContext(context.Background()) }

// ShutdownWithContext stops both servers as fasthttp's does one: the
// listener closes, idle connections close, and it waits, within ctx, for
// the requests in flight.
func (s *Server) ShutdownWithContext(ctx context.Context) error {
	kept := make(chan error, 1)
	go func() { kept <- s.kept.ShutdownWithContext(ctx) }()
	err := s.accepted.ShutdownWithContext(ctx)
	if kerr := <-kept; err == nil {
		err = kerr
	}
	s.keptLn.Close()
	return err
}

// WaitIdle waits, within ctx, until neither server holds a connection: the
// requests a shutdown that timed out left running have been answered. It
// reports whether they all were.
func (s *Server) WaitIdle(ctx context.Context) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for s.accepted.GetOpenConnectionsCount()+s.kept.GetOpenConnectionsCount() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// parkedListener accepts no connection; Accept waits until it is closed.
type parkedListener struct {
	accepting, closed chan struct{}
	waitOnce, once    sync.Once
}

func (l *parkedListener) Accept() (net.Conn, error) {
	l.waitOnce.Do(func() { close(l.accepting) })
	<-l.closed
	return nil, io.EOF
}

func (l *parkedListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *parkedListener) Addr() net.Addr { return parkedAddr{} }

type parkedAddr struct{}

func (parkedAddr) Network() string { return "parked" }
func (parkedAddr) String() string  { return "parked" }

// HTTP-layer refusals. Their codes are the gateway's own (the spec does
// not list the HTTP layer's); docs/http.md lists them.
var (
	errHeadersTooLarge = &codec.Error{Code: codec.CodeRequestHeadersTooLarge}
	errURITooLong      = &codec.Error{Code: codec.CodeURITooLong}
	errRequestTimeout  = &codec.Error{Code: codec.CodeRequestTimeout}
	errTransferCoding  = &codec.Error{Code: codec.CodeTransferEncodingNotSupported}
	errAmbiguousLength = codec.NewError(codec.CodeInvalidRequest,
		"The request has both Content-Length and Transfer-Encoding; send one.")
	errDuplicateLength = codec.NewError(codec.CodeInvalidRequest, "The request has more than one Content-Length.")
	errBadChunk        = codec.NewError(codec.CodeInvalidRequest, "The request's chunked body is malformed.")
	errHostRequired    = codec.NewError(codec.CodeInvalidRequest, "An HTTP/1.1 request must carry one Host header.")
	errBadContentLen   = codec.NewError(codec.CodeInvalidRequest, "The request's Content-Length is not a number.")
	errMalformedHTTP   = codec.NewError(codec.CodeInvalidRequest,
		"The request is not valid HTTP/1.1: a malformed request line or header field.")
	errBareLine   = codec.NewError(codec.CodeInvalidRequest, "The request's lines must end with CRLF.")
	errSpacedName = codec.NewError(codec.CodeInvalidRequest, "A header field name has a space in it.")
)

// guard applies the checks of the HTTP layer that the parser leaves to the
// server, before the route: the target's and header block's lengths, and
// the head requestConfig refused. Each costs a compare on an ordinary
// request; the head is read again only on a request that closes its
// connection.
func (e *Edge) guard(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h := &ctx.Request.Header
		var cerr *codec.Error
		drain := e.drain.Load()
		switch {
		case drain == drainClosing:
			// The listener has stopped: a request on a kept connection
			// is refused before it starts, so the client may send it
			// again elsewhere, and the connection closes.
			cerr = codec.ErrServerShuttingDown
		case len(h.RequestURI()) > e.maxURIBytes:
			cerr = errURITooLong
		case len(h.RawHeaders()) > e.maxHeaderBytes:
			cerr = errHeadersTooLarge
		case h.ConnectionClose():
			// requestConfig closes the connection of every head it
			// refuses.
			cerr, _ = checkHead(h.RawHeaders())
		}
		if cerr != nil {
			e.refuse(ctx, envelopeOf(string(ctx.Path())), cerr, true)
			return
		}
		next(ctx)
		if e.drain.Load() != drainServing {
			// The client's next request goes through the load balancer
			// again, to a process that is not leaving; and a request
			// that ends after the grace leaves no connection for the
			// shutdown to wait for.
			ctx.SetConnectionClose()
		}
	}
}

// The stages of shutdown the edge knows (Edge.drain).
const (
	drainServing int32 = iota
	drainDraining
	drainClosing
)

// Drain starts shutdown's grace: requests are still served, each answer
// closes its connection.
func (e *Edge) Drain() { e.drain.CompareAndSwap(drainServing, drainDraining) }

// StopServing ends the grace: from now on a request that arrives on a kept
// connection is answered 503 server_shutting_down with Connection: close
// and never starts. Requests and streams already running finish.
func (e *Edge) StopServing() { e.drain.Store(drainClosing) }

// expect answers a request that waits for 100 Continue: one whose head or
// body would be refused is refused before the client sends the body. An
// HTTP/1.0 request's Expect is dropped before (requestConfig).
func (e *Edge) expect(ctx *fasthttp.RequestCtx) int {
	h := &ctx.Request.Header
	var cerr *codec.Error
	if h.ConnectionClose() {
		cerr, _ = checkHead(h.RawHeaders())
	}
	limit := e.maxBodySize
	if lb := e.largeBody(h); lb != nil {
		limit = lb.MaxBodySize
	}
	if cerr == nil && h.ContentLength() > limit {
		cerr = codec.ErrPayloadTooLarge
	}
	if cerr != nil {
		e.refuse(ctx, envelopeOf(string(ctx.Path())), cerr, true)
		return ctx.Response.StatusCode()
	}
	return fasthttp.StatusContinue
}

// The field names and values checkHead reads.
var (
	fieldTransferEncoding = []byte("transfer-encoding")
	fieldContentLength    = []byte("content-length")
	fieldConnection       = []byte("connection")
	codingChunked         = []byte("chunked")
	optionClose           = []byte("close")
)

// checkHead reads a request's header block as it arrived, for what the
// parser lets through or forgets: a Transfer-Encoding beside a
// Content-Length (RFC 9112 §6.1: a hop before this one may have framed the
// request the other way; fasthttp frames it by the chunks and, once an
// empty chunked body is read, keeps neither field), a Transfer-Encoding
// other than chunked (fasthttp ignores identity, and joins a folded
// value), a space inside a field name (a name is a token, RFC 9110 §5.1),
// and close among the Connection options in any case (RFC 9110 §7.6.1;
// fasthttp reads only the value "close"). cerr refuses the head; close
// says the connection ends after the answer. It costs two IndexByte calls
// per line (its end, its first space), and a third on a line whose first
// space does not follow its colon.
func checkHead(raw []byte) (cerr *codec.Error, close bool) {
	var te, cl bool
	var coding []byte
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
			continue // a folded line goes on with the field above it
		}
		if sp := bytes.IndexByte(line, ' '); sp > 0 && line[sp-1] != ':' && bytes.IndexByte(line[:sp], ':') < 0 {
			return errSpacedName, true
		}
		switch line[0] | 0x20 {
		case 't':
			if v, ok := fieldValue(line, fieldTransferEncoding); ok {
				te, coding = true, v
			}
		case 'c':
			if _, ok := fieldValue(line, fieldContentLength); ok {
				cl = true
			} else if v, ok := fieldValue(line, fieldConnection); ok && hasOption(v, optionClose) {
				close = true
			}
		}
	}
	switch {
	case te && cl:
		return errAmbiguousLength, true
	case te && !bytes.EqualFold(coding, codingChunked):
		return errTransferCoding, true
	}
	return nil, close
}

// fieldValue returns the value of the header line when the line is the
// field name's (in any case), without the whitespace around it.
func fieldValue(line, name []byte) ([]byte, bool) {
	if len(line) <= len(name) || line[len(name)] != ':' || !bytes.EqualFold(line[:len(name)], name) {
		return nil, false
	}
	return trimOWS(line[len(name)+1:]), true
}

// hasOption reports whether the comma-separated list names opt, in any
// case.
func hasOption(list, opt []byte) bool {
	for len(list) > 0 {
		var o []byte
		o, list, _ = bytes.Cut(list, []byte{','})
		if bytes.EqualFold(trimOWS(o), opt) {
			return true
		}
	}
	return false
}

// trimOWS trims spaces, tabs and a line's CR from both ends of b.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// refuse answers cerr as the edge answers any error: the envelope of the
// path's wire, a fresh request id and the version; close ends the
// connection after it.
func (e *Edge) refuse(ctx *fasthttp.RequestCtx, wire Envelope, cerr *codec.Error, close bool) {
	var id [36]byte
	rid := hotpath.AppendRequestID(id[:0], time.Now())
	setRequestID(&ctx.Response.Header, wire, rid)
	var v [10]byte
	ctx.Response.Header.SetBytesV(HeaderVersion, codec.CurrentVersion.AppendTo(v[:0]))
	e.errors[cerr.Code].Inc()
	WriteError(ctx, wire, cerr, rid)
	if close {
		ctx.SetConnectionClose()
	}
}

// ParseError answers a request the server could not read, as
// fasthttp.Server.ErrorHandler: in the envelope of the path's wire when the
// path was read (the server has dropped the request by now: the path is
// the one the connection kept, requestWire), with the status the failure
// calls for, and the connection closes. A connection on which nothing of a
// request arrived, or whose client left mid-request, is closed without a
// word: there is no one to answer, and bytes written to an idle connection
// would be read as the answer to the client's next request.
func (e *Edge) ParseError(ctx *fasthttp.RequestCtx, err error) {
	cerr, quiet := classifyReadError(ctx, err)
	if quiet {
		if cerr != nil {
			e.errors[cerr.Code].Inc()
		}
		_ = ctx.Conn().Close()
		return
	}
	// The request's rest may still be on its way: the connection closes
	// lingering, so that the answer reaches the client. Not after a read
	// timeout: a client too slow to send its request in time would only
	// hold the connection longer.
	if lc, ok := ctx.Conn().(interface{ lingerOnClose() }); ok && cerr.Code != codec.CodeRequestTimeout {
		lc.lingerOnClose()
	}
	e.refuse(ctx, requestWire(ctx.Conn()), cerr, true)
}

// requestWire is the wire of the path in the request line c has read of
// the request being read: the gateway's own when no path arrived whole.
// The target is read as the route would have read it.
func requestWire(c net.Conn) Envelope {
	rt, ok := c.(interface{ requestTarget() []byte })
	if !ok {
		return EnvelopeAPI
	}
	target := rt.requestTarget()
	if len(target) == 0 {
		return EnvelopeAPI
	}
	u := fasthttp.AcquireURI()
	defer fasthttp.ReleaseURI(u)
	if u.Parse(nil, target) != nil {
		return EnvelopeAPI
	}
	return envelopeOf(string(u.Path()))
}

// classifyReadError maps a read failure to its answer; quiet means nothing
// is written (cerr, when set, is only counted).
func classifyReadError(ctx *fasthttp.RequestCtx, err error) (cerr *codec.Error, quiet bool) {
	var small *fasthttp.ErrSmallBuffer
	// The server resets the request before it reports a failure, so
	// what was read is known from the error and the connection only.
	msg := err.Error()
	switch {
	case errors.As(err, &small):
		return errHeadersTooLarge, false
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return codec.ErrPayloadTooLarge, false
	case errors.Is(err, errBareLF):
		return errBareLine, false
	case isTimeout(err):
		if !requestStarted(ctx.Conn()) {
			// The timeout came before the first byte of a request.
			return nil, true
		}
		return errRequestTimeout, false
	case clientLeft(err):
		return codec.ErrClientClosedRequest, true
	case errors.Is(err, fasthttp.ErrDuplicateContentLength):
		return errDuplicateLength, false
	case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding), strings.Contains(msg, "unsupported transfer-encoding"),
		strings.Contains(msg, "too many transfer-encoding"):
		return errTransferCoding, false
	case strings.Contains(msg, "host header"):
		return errHostRequired, false
	case errors.As(err, new(fasthttp.ErrBrokenChunk)), strings.Contains(msg, "hex number"), strings.Contains(msg, "chunk"):
		return errBadChunk, false
	case strings.Contains(msg, "content-length"), errors.Is(err, fasthttp.ErrNonNumericChars):
		return errBadContentLen, false
	}
	return errMalformedHTTP, false
}

// clientLeft reports a read that ended because the client closed or reset
// its connection.
func clientLeft(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE)
}

// requestStarted reports whether a byte of a request arrived on c since
// its last response; a connection that cannot tell says yes.
func requestStarted(c net.Conn) bool {
	if rs, ok := c.(interface{ requestStarted() bool }); ok {
		return rs.requestStarted()
	}
	return true
}

// keptConn is a client connection that a stream handed back to the server
// for the client's next request. The bytes the server had read ahead of the
// stream's request come first; then, until the next request's first byte
// arrives, the connection is idle like any kept connection: the server's
// first-request read timeout is replaced by the idle timeout.
type keptConn struct {
	net.Conn
	ahead   []byte
	idle    time.Duration
	started bool
	serve   func(net.Conn) error // serves the connection's next requests
}

// run serves the connection's next requests, on a worker.
func (c *keptConn) run() { _ = c.serve(c) }

func (c *keptConn) Read(p []byte) (int, error) {
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		c.started = true
		// The bytes read ahead begin the next request's head: the
		// socket's checks, and its record of the request line, see them
		// first.
		if ec, ok := c.Conn.(*edgeConn); ok && !ec.scan(p[:n]) {
			return 0, errBareLF
		}
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.started = true
	}
	return n, err
}

func (c *keptConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.deadline(t))
}

func (c *keptConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(c.deadline(t))
}

func (c *keptConn) requestStarted() bool { return c.started }

// requestTarget is the socket's (edgeConn), which the bytes read ahead
// pass through.
func (c *keptConn) requestTarget() []byte {
	if rt, ok := c.Conn.(interface{ requestTarget() []byte }); ok {
		return rt.requestTarget()
	}
	return nil
}

// deadline is the read deadline in force for t: the idle bound while the
// next request has not begun.
func (c *keptConn) deadline(t time.Time) time.Time {
	if c.started || len(c.ahead) > 0 || t.IsZero() {
		return t
	}
	return time.Now().Add(c.idle)
}

// aLongTimeAgo is a read deadline that has passed: a read then returns
// what is buffered above the socket, or a timeout at once.
var aLongTimeAgo = time.Unix(1, 0)

// takeOver returns the socket under a connection the server hijacked, and
// appends to ahead every byte the server had read past the request — a
// pipelined request, or the start of one — so that none is lost when the
// connection is handed back. buf is scratch space.
func takeOver(conn net.Conn, ahead, buf []byte) (net.Conn, []byte) {
	ahead = readPending(conn, ahead, buf)
	if u, ok := conn.(interface{ UnsafeConn() net.Conn }); ok {
		conn = u.UnsafeConn()
	}
	if k, ok := conn.(*keptConn); ok {
		ahead = append(ahead, k.ahead...)
		conn = k.Conn
	}
	return conn, ahead
}

// readPending appends to ahead what conn has already received, reading
// through buf without waiting for more.
func readPending(conn net.Conn, ahead, buf []byte) []byte {
	if err := conn.SetReadDeadline(aLongTimeAgo); err == nil {
		for {
			n, err := conn.Read(buf)
			ahead = append(ahead, buf[:n]...)
			if err != nil || n == 0 {
				break
			}
		}
		_ = conn.SetReadDeadline(time.Time{})
	}
	return ahead
}

// largeBody returns the LargeBody rule of the request's route, or nil.
func (e *Edge) largeBody(h *fasthttp.RequestHeader) *LargeBody {
	if len(e.largeBodies) == 0 {
		return nil
	}
	uri := h.RequestURI()
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	method := h.Method()
	for i := range e.largeBodies {
		lb := &e.largeBodies[i]
		if string(uri) == lb.Path && string(method) == lb.Method {
			return lb
		}
	}
	return nil
}

// requestConfig runs as soon as a request's head is read, before its
// body. It holds the head to the rules checkHead reads: a head they refuse
// has no body read — nothing after it on the connection is trusted — and
// its connection closes, which has the guard (or expect) refuse it; a
// Connection that names close closes it too. It ignores an HTTP/1.0
// request's Expect (RFC 9110 §10.1.1: the server would send it 100
// Continue), and gives a large-body route its own bound and read timeout.
func (e *Edge) requestConfig(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	cerr, close := checkHead(h.RawHeaders())
	if cerr != nil {
		h.SetContentLength(0)
	}
	if close && !h.ConnectionClose() {
		h.SetConnectionClose()
	}
	if !h.IsHTTP11() && len(h.Peek(fasthttp.HeaderExpect)) > 0 {
		h.Del(fasthttp.HeaderExpect)
	}
	if lb := e.largeBody(h); lb != nil {
		return fasthttp.RequestConfig{MaxRequestBodySize: lb.MaxBodySize, ReadTimeout: lb.ReadTimeout}
	}
	return fasthttp.RequestConfig{}
}

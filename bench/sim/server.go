package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
)

// Config is the simulator's configuration. The zero value is usable.
type Config struct {
	// TTFT is the time to first token of every reply unless a request's
	// [[sim:ttft_ms=N]] says otherwise. Default 0.
	TTFT time.Duration
	// ITL is the inter-token latency: the pause between two token chunks of
	// a stream. Default 0.
	ITL time.Duration
	// Seed is mixed into every request's seed, so two simulators with
	// different seeds answer the same body differently. Default 0.
	Seed uint64
	// Log receives the simulator's own diagnostics, never a prompt or a
	// reply. Default: discard.
	Log *slog.Logger
}

// Validate reports the first setting that is wrong.
func (c *Config) Validate() error {
	if c.TTFT < 0 {
		return errors.New("ttft: must not be negative")
	}
	if c.ITL < 0 {
		return errors.New("itl: must not be negative")
	}
	return nil
}

// Server is one simulator. It is safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	srv     *fasthttp.Server
	created int64 // the "created" of every completion: the server's start

	done     chan struct{} // closed by Shutdown: hangs and stalls end
	doneOnce sync.Once

	mu       sync.Mutex
	attempts map[uint64]int // fail_first attempts per body seed
}

// maxAttemptKeys bounds the fail_first table; when full it starts over.
const maxAttemptKeys = 1 << 16

// New returns a simulator with cfg. A negative TTFT or ITL is taken as 0;
// call cfg.Validate first to refuse it instead.
func New(cfg Config) *Server {
	cfg.TTFT = max(cfg.TTFT, 0)
	cfg.ITL = max(cfg.ITL, 0)
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:      cfg,
		log:      log,
		created:  time.Now().Unix(),
		done:     make(chan struct{}),
		attempts: map[uint64]int{},
	}
	s.srv = &fasthttp.Server{
		Handler:              s.handle,
		Name:                 "gateway-sim",
		MaxRequestBodySize:   64 << 20,
		ReadTimeout:          time.Minute,
		IdleTimeout:          2 * time.Minute,
		NoDefaultContentType: true,
		CloseOnShutdown:      true,
		Logger:               fasthttpLogger{log},
	}
	return s
}

// Listen starts a simulator with cfg serving on a new TCP listener at addr
// ("127.0.0.1:0" picks a free port). The listener's Addr is where it
// answers; Shutdown stops it.
func Listen(addr string, cfg Config) (*Server, net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	s := New(cfg)
	go func() {
		if err := s.Serve(ln); err != nil {
			s.log.Error("simulator stopped serving", "err", err)
		}
	}()
	return s, ln, nil
}

// Handler returns the simulator's request handler, to mount in a server of
// the caller's own. Hijacking faults (reset, hang, stall, drop) need that
// server to be a fasthttp.Server.
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

// Serve answers requests on ln until Shutdown. It returns nil after
// Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	select {
	case <-s.done:
		return nil
	default:
		return err
	}
}

// Shutdown stops the simulator: hanging and stalled requests end, streams
// stop at their next token, the listener closes, and it returns once no
// connection is in use, or after ten seconds.
func (s *Server) Shutdown() {
	s.doneOnce.Do(func() { close(s.done) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.srv.ShutdownWithContext(ctx); err != nil {
		s.log.Warn("simulator shutdown incomplete", "err", err)
	}
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	post := ctx.IsPost()
	switch path {
	case "/v1/chat/completions":
		if post {
			s.chat(ctx)
			return
		}
	case "/v1/embeddings":
		if post {
			s.embeddings(ctx)
			return
		}
	case "/rerank", "/v1/rerank":
		if post {
			s.rerank(ctx)
			return
		}
	case "/v1/models":
		if ctx.IsGet() {
			writeJSON(ctx, fasthttp.StatusOK, []byte(`{"object":"list","data":[{"id":"sim","object":"model","created":0,"owned_by":"gateway-sim"}]}`))
			return
		}
	case "/health":
		if ctx.IsGet() {
			writeJSON(ctx, fasthttp.StatusOK, []byte(`{"status":"ok"}`))
			return
		}
	default:
		writeError(ctx, fasthttp.StatusNotFound, "no route for "+strconv.Quote(path), "invalid_request_error", "", "not_found")
		return
	}
	ctx.Response.Header.Set("Allow", allowed(path))
	writeError(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed", "invalid_request_error", "", "method_not_allowed")
}

func allowed(path string) string {
	if path == "/v1/models" || path == "/health" {
		return "GET"
	}
	return "POST"
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// appendError appends an OpenAI error body. An empty param or code is
// written as null.
func appendError(dst []byte, msg, typ, param, code string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = codec.AppendJSONString(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = codec.AppendJSONString(dst, typ)
	dst = append(dst, `,"param":`...)
	if param == "" {
		dst = append(dst, "null"...)
	} else {
		dst = codec.AppendJSONString(dst, param)
	}
	dst = append(dst, `,"code":`...)
	if code == "" {
		dst = append(dst, "null"...)
	} else {
		dst = codec.AppendJSONString(dst, code)
	}
	return append(dst, "}}"...)
}

func writeError(ctx *fasthttp.RequestCtx, status int, msg, typ, param, code string) {
	writeJSON(ctx, status, appendError(nil, msg, typ, param, code))
}

// badRequest answers 400 invalid_request_error.
func badRequest(ctx *fasthttp.RequestCtx, param, msg string) {
	writeError(ctx, fasthttp.StatusBadRequest, msg, "invalid_request_error", param, "invalid_request")
}

// statusError answers status with the error body an OpenAI-compatible server
// typically sends for it.
func statusError(ctx *fasthttp.RequestCtx, status int) {
	typ, code := "server_error", "server_error"
	switch {
	case status == 401:
		typ, code = "authentication_error", "invalid_api_key"
	case status == 403:
		typ, code = "permission_error", "forbidden"
	case status == 404:
		typ, code = "invalid_request_error", "model_not_found"
	case status == 408 || status == 504:
		typ, code = "timeout_error", "timeout"
	case status == 429:
		typ, code = "requests", "rate_limit_exceeded"
	case status == 503:
		typ, code = "server_error", "overloaded"
	case status < 500:
		typ, code = "invalid_request_error", "invalid_request"
	}
	msg := "simulated " + strconv.Itoa(status) + " " + fasthttp.StatusMessage(status)
	writeError(ctx, status, msg, typ, "", code)
}

// attempt counts one attempt of the body with this seed and reports whether
// it is still among the first n, which fail.
func (s *Server) attempt(seed uint64, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.attempts) >= maxAttemptKeys {
		clear(s.attempts)
	}
	s.attempts[seed]++
	return s.attempts[seed] <= n
}

// applyErrors answers the directives that turn a request into an error or
// a connection fault, in this order: fault=reset, fault=hang, status,
// fail_first, then the error faults. It reports whether it answered.
func (s *Server) applyErrors(ctx *fasthttp.RequestCtx, d *directives, seed uint64, promptTokens, budget int) bool {
	switch d.fault {
	case faultReset:
		s.reset(ctx)
		return true
	case faultHang:
		s.hang(ctx)
		return true
	}
	if d.status != 0 {
		statusError(ctx, d.status)
		return true
	}
	if d.failFirst > 0 && s.attempt(seed, d.failFirst) {
		writeError(ctx, fasthttp.StatusServiceUnavailable, "The server is overloaded; retry later (simulated).", "server_error", "", "overloaded")
		return true
	}
	switch d.fault {
	case faultRateLimited, faultRateLimitedBare:
		if d.fault == faultRateLimited {
			ctx.Response.Header.Set("Retry-After", "1")
		}
		writeError(ctx, fasthttp.StatusTooManyRequests, "Rate limit reached for requests (simulated). Please try again later.", "requests", "", "rate_limit_exceeded")
		return true
	case faultContextLength:
		const window = 8192
		asked := max(promptTokens+budget, window+1)
		msg := "This model's maximum context length is " + strconv.Itoa(window) + " tokens. However, you requested " +
			strconv.Itoa(asked) + " tokens (" + strconv.Itoa(promptTokens) + " in the messages, " +
			strconv.Itoa(asked-promptTokens) + " in the completion). Please reduce the length of the messages or completion."
		writeError(ctx, fasthttp.StatusBadRequest, msg, "invalid_request_error", "messages", "context_length_exceeded")
		return true
	case faultContentFilter:
		writeError(ctx, fasthttp.StatusBadRequest, "The response was filtered due to the prompt triggering the content management policy (simulated).",
			"invalid_request_error", "prompt", "content_filter")
		return true
	}
	return false
}

// reset closes the connection without writing a byte. On TCP it sets a zero
// linger first, so the peer sees a reset rather than an orderly close.
func (s *Server) reset(ctx *fasthttp.RequestCtx) {
	raw := ctx.Conn()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {
		if tc, ok := raw.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = raw.Close()
	})
}

// hang never answers: it holds the connection until the client closes it
// or the simulator shuts down.
func (s *Server) hang(ctx *fasthttp.RequestCtx) {
	raw := ctx.Conn()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { s.holdUntilGone(c, raw) })
}

// holdUntilGone reads c (the hijacked connection) until the client closes
// it, or until shutdown, then closes raw. It returns only once its reader
// has stopped, because the hijacked connection is recycled after the hijack
// handler returns.
func (s *Server) holdUntilGone(c, raw net.Conn) {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		var buf [512]byte
		for {
			if _, err := c.Read(buf[:]); err != nil {
				return
			}
		}
	}()
	select {
	case <-gone:
	case <-s.done:
	}
	_ = raw.Close()
	<-gone
}

// sleep waits d, or less when the simulator shuts down; it reports whether
// the whole wait happened.
func (s *Server) sleep(t *time.Timer, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-s.done:
			return false
		default:
			return true
		}
	}
	t.Reset(d)
	select {
	case <-t.C:
		return true
	case <-s.done:
		t.Stop()
		return false
	}
}

// fasthttpLogger sends fasthttp's own messages to the simulator's log.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...))
}

// maxPromptTokens is the simulator's own context window: the largest any
// tier advertises. Its count stops there, so a prompt of any size costs at
// most this many tokens' worth of counting, and a longer prompt is refused
// the way a provider refuses it.
const maxPromptTokens = 262144

// contextTooLong answers a prompt over maxPromptTokens; counted is where
// the count stopped, some number above the window.
func contextTooLong(ctx *fasthttp.RequestCtx, counted int) {
	msg := "This model's maximum context length is " + strconv.Itoa(maxPromptTokens) +
		" tokens. However, your messages resulted in more than " + strconv.Itoa(counted-1) +
		" tokens. Please reduce the length of the messages."
	writeError(ctx, fasthttp.StatusBadRequest, msg, "invalid_request_error", "messages", "context_length_exceeded")
}

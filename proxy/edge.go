// Package proxy is the gateway's data plane and its HTTP edge: the rules
// every route shares (request ids, version pins, authentication, scopes,
// error envelopes, panic recovery, metrics), the model catalogue, and the
// chat and specialised routes.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
)

// Handler serves one route after the edge has identified the request. It
// writes its own success response and returns a *codec.Error (or any error,
// answered as internal_error) for the edge to write in the route's envelope.
type Handler func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error

// Header names the edge reads and writes.
const (
	headerRequestID = "X-Request-Id"
	// headerAnthropicRequestID is where Anthropic's API and SDKs carry the
	// request id (the SDKs' _request_id); the Anthropic wire sets both.
	headerAnthropicRequestID = "Request-Id"
	HeaderVersion            = "Gateway-Version"
	HeaderAuthorization      = "Authorization"
	// HeaderAPIKey carries the key on the Anthropic-compatible routes.
	HeaderAPIKey          = "X-Api-Key"
	headerWWWAuthenticate = "WWW-Authenticate"
	headerRetryAfter      = "Retry-After"
	headerCacheControl    = "Cache-Control"
	headerPragma          = "Pragma"
	headerTraceparent     = "traceparent"
	headerTracestate      = "tracestate"
)

// Edge applies the cross-cutting rules to every route.
type Edge struct {
	verifier  *hotpath.Verifier
	limits    *meter.Limits
	usage     hotpath.UsageSink
	log       *slog.Logger
	set       *metrics.Set
	accessLog bool
	tracer    trace.Tracer       // nil: tracing is off
	errors    []*metrics.Counter // by codec.Code
	panics    *metrics.Counter
	// drain is where shutdown stands: serving, draining (every answer
	// closes its connection) or closing (new requests are refused).
	drain atomic.Int32

	// The HTTP layer's limits (ServerConfig), checked before the route.
	maxHeaderBytes, maxURIBytes, maxBodySize int
	largeBodies                              []LargeBody
}

// EdgeConfig configures an Edge.
type EdgeConfig struct {
	// Verifier checks keys and service tokens. Required.
	Verifier *hotpath.Verifier
	// Log receives error lines (and access lines with AccessLog). Required.
	Log *slog.Logger
	// Metrics is where the edge registers its metrics. Required.
	Metrics *metrics.Set
	// AccessLog writes one line per request: request id, trace id, method,
	// route, status, duration and key id; never a path's query, a body or a
	// key.
	AccessLog bool
	// Limits meters user routes in per-minute windows; nil meters nothing.
	Limits *meter.Limits
	// Usage receives one ledger row per user request; nil records nothing.
	Usage hotpath.UsageSink
	// Tracer exports a span per request (and per admission) when set;
	// nil, the default, turns tracing off, and then the request's path
	// costs nothing more than a nil check.
	Tracer trace.Tracer
}

// NewEdge returns an edge and registers its metrics.
func NewEdge(cfg EdgeConfig) *Edge {
	e := &Edge{verifier: cfg.Verifier, log: cfg.Log, set: cfg.Metrics, accessLog: cfg.AccessLog,
		limits: cfg.Limits, usage: cfg.Usage, tracer: cfg.Tracer}
	var sc ServerConfig
	sc.defaults()
	e.maxHeaderBytes, e.maxURIBytes, e.maxBodySize = sc.MaxHeaderBytes, sc.MaxURIBytes, sc.MaxBodySize
	for c := codec.Code(0); c == 0 || c.Valid(); c++ {
		if c == 0 {
			e.errors = append(e.errors, nil)
			continue
		}
		e.errors = append(e.errors, e.set.NewCounter(fmt.Sprintf(`gateway_errors_total{code=%q}`, c.String())))
	}
	e.panics = e.set.NewCounter("gateway_panics_total")
	return e
}

type routeMetrics struct {
	byClass  [6]*metrics.Counter // 1xx..5xx by status/100
	duration *metrics.Histogram
}

func (e *Edge) newRouteMetrics(name string) *routeMetrics {
	m := &routeMetrics{}
	for i := 1; i <= 5; i++ {
		m.byClass[i] = e.set.GetOrCreateCounter(fmt.Sprintf(`gateway_requests_total{route=%q,status="%dxx"}`, name, i))
	}
	m.duration = e.set.GetOrCreateHistogram(fmt.Sprintf(`gateway_request_duration_seconds{route=%q}`, name))
	return m
}

// Wrap returns the fasthttp handler for one route. Metrics are registered
// here, once, never looked up per request.
func (e *Edge) Wrap(method string, a hotpath.Access, wire Envelope, h Handler) fasthttp.RequestHandler {
	end := &routeEnd{e: e, m: e.newRouteMetrics(a.Name), a: a, method: method}
	traced := e.tracer != nil && !a.Untraced
	return func(ctx *fasthttp.RequestCtx) {
		c := hotpath.AcquireCall()
		c.Start, c.Ender = time.Now(), end
		c.SetID(ctx.Request.Header.Peek(headerRequestID))
		c.SetTrace(ctx.Request.Header.Peek(headerTraceparent))
		if traced {
			e.startTrace(ctx, c, a)
		}
		setRequestID(&ctx.Response.Header, wire, c.ID())
		if err := e.serve(ctx, c, a, wire, h); err != nil {
			e.writeError(ctx, c, wire, err)
		}
		if c.Detached {
			return // the handler ends it
		}
		end.finish(c, ctx.Method(), ctx.Response.StatusCode())
	}
}

// setRequestID names the request in the answer's head: X-Request-Id, and
// on the Anthropic wire request-id too, where its SDKs read it.
func setRequestID(h *fasthttp.ResponseHeader, wire Envelope, id []byte) {
	h.SetBytesV(headerRequestID, id)
	if wire == EnvelopeAnthropic {
		h.SetBytesV(headerAnthropicRequestID, id)
	}
}

// routeEnd ends one route's requests: it counts them, logs them and records
// their ledger rows.
type routeEnd struct {
	e      *Edge
	m      *routeMetrics
	a      hotpath.Access
	method string
}

// End ends a request its handler took over (hotpath.Call.Detached).
func (r *routeEnd) End(c *hotpath.Call, status int, err *codec.Error) {
	if err != nil {
		r.e.countError(c, err)
	}
	r.finish(c, nil, status)
}

// finish counts, logs and records the request and releases c. method is
// the request's, or nil for the route's own.
func (r *routeEnd) finish(c *hotpath.Call, method []byte, status int) {
	e, m, a := r.e, r.m, r.a
	if cls := status / 100; cls >= 1 && cls <= 5 {
		m.byClass[cls].Inc()
	}
	m.duration.UpdateDuration(c.Start)
	if c.TraceCtx != nil {
		endTrace(c, status)
	}
	if e.accessLog {
		if method == nil {
			method = []byte(r.method)
		}
		e.logAccess(method, c, a, status)
	}
	r.Record(c, status, nil)
	hotpath.ReleaseCall(c)
}

// Record writes the request's ledger row, once: on a route with a ledger,
// for a request whose key was verified. A non-streaming answer's row is
// written when the handler returns, before fasthttp writes the body; a
// stream's, before its last frame goes out (hotpath.Ender).
func (r *routeEnd) Record(c *hotpath.Call, status int, err *codec.Error) {
	e, a := r.e, r.a
	if c.Recorded || e.usage == nil || c.User == nil || a.Unlogged {
		return
	}
	c.Recorded = true
	u := &c.Usage
	fillUsage(u, c, a.Name)
	u.Status, u.DurationUS = status, time.Since(c.Start).Microseconds()
	switch {
	case err != nil:
		u.ErrorCode = err.Code.String()
	case c.ErrorCode != 0:
		u.ErrorCode = c.ErrorCode.String()
	}
	e.usage.Record(u)
}

func (e *Edge) serve(ctx *fasthttp.RequestCtx, c *hotpath.Call, a hotpath.Access, wire Envelope, h Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e.panics.Inc()
			e.log.Error("handler panicked", "request_id", c.IDString(), "trace_id", string(c.TraceID()), "route", a.Name,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = codec.ErrInternal
		}
	}()
	if cerr := pinVersion(ctx, c); cerr != nil {
		return cerr
	}
	var w window
	if c.TraceCtx != nil && a.Auth != hotpath.AuthNone {
		err = e.tracedAuthorize(ctx, c, a, wire, &w)
	} else {
		err = e.authorize(ctx, c, a, wire, &w)
	}
	if err != nil {
		return err
	}
	if w.metered {
		// The window's headers go on once the handler has answered. A
		// restriction the handler enforces (a read-only key on a write, a
		// body field asking for a family the key lacks) is the key check's
		// 403 all the same, and the spec lists it among the answers
		// without them; the window was taken before the handler ran, so
		// the request still counts in it.
		defer func() {
			if err == nil || !keyCheckRefusal(err) {
				setRateHeaders(ctx, w.st)
			}
		}()
	}
	if cerr := checkContentEncoding(ctx); cerr != nil {
		if a.Rate == hotpath.RateByHandler {
			// These routes count in the window at their own admission,
			// which a refused body never reaches: the answer shows the
			// window read without counting.
			if w = e.peekWindow(c); w.metered {
				setRateHeaders(ctx, w.st)
			}
		}
		return cerr
	}
	return h(ctx, c)
}

// window is the per-minute window a request counted in at the edge, for
// its answer's headers.
type window struct {
	st      meter.RateState
	metered bool
}

// peekWindow reads the caller's request window without counting in it.
func (e *Edge) peekWindow(c *hotpath.Call) (w window) {
	if e.limits != nil && c.User != nil {
		w.st, w.metered, _ = e.limits.Hit(context.Background(), c.Start, c.User, hotpath.RatePeek)
	}
	return w
}

// keyCheckRefusal reports whether err is one of the key check's 403s.
func keyCheckRefusal(err error) bool {
	var cerr *codec.Error
	return errors.As(err, &cerr) && (cerr.Code == codec.CodeKeyScopeForbidden || cerr.Code == codec.CodeKeyReadOnly)
}

// authorize checks the caller's key or service token, its scope, and the
// route's per-minute window, which it leaves in w for the answer's headers
// (a refusal of the window carries them at once).
func (e *Edge) authorize(ctx *fasthttp.RequestCtx, c *hotpath.Call, a hotpath.Access, wire Envelope, w *window) error {
	switch a.Auth {
	case hotpath.AuthUser:
		var (
			p    *hotpath.Principal
			cerr *codec.Error
		)
		if key := ctx.Request.Header.Peek(HeaderAPIKey); wire == EnvelopeAnthropic && len(key) > 0 &&
			len(ctx.Request.Header.Peek(HeaderAuthorization)) == 0 {
			// Anthropic's clients send the key in x-api-key.
			p, cerr = e.verifier.VerifyUserToken(key)
		} else {
			p, cerr = e.verifier.VerifyUser(ctx.Request.Header.Peek(HeaderAuthorization))
		}
		if cerr != nil {
			return cerr
		}
		if !p.Scopes.Has(a.Family) {
			return scopeForbidden(a.Family)
		}
		c.User = p
		if a.Billable && p.ReadOnly {
			return codec.ErrKeyReadOnly
		}
		if e.limits != nil && a.Rate != hotpath.RateNone && a.Rate != hotpath.RateByHandler {
			st, metered, refusal := e.limits.Hit(context.Background(), c.Start, p, a.Rate)
			if refusal != nil {
				if metered {
					setRateHeaders(ctx, st)
				}
				return refusal
			}
			*w = window{st, metered}
		}
	case hotpath.AuthService:
		s, cerr := e.verifier.VerifyService(ctx.Request.Header.Peek(HeaderAuthorization))
		if cerr != nil {
			return cerr
		}
		if !s.Scopes.Has(a.Family) {
			return scopeForbidden(a.Family)
		}
		c.Service = s
	}
	return nil
}

// Rate-limit headers.
const (
	headerRateLimit     = "X-RateLimit-Limit"
	headerRateRemaining = "X-RateLimit-Remaining"
	headerRateReset     = "X-RateLimit-Reset"
)

// The rate-limit header names as the spec spells them. Names are
// case-insensitive, but fasthttp would write "X-Ratelimit-Limit"; these are
// set as given.
var (
	rateLimitKey     = []byte(headerRateLimit)
	rateRemainingKey = []byte(headerRateRemaining)
	rateResetKey     = []byte(headerRateReset)
)

// setRateHeaders describes the per-minute request window. A window not yet
// opened resets a full window from now.
func setRateHeaders(ctx *fasthttp.RequestCtx, st meter.RateState) {
	var b [20]byte
	h := &ctx.Response.Header
	h.SetCanonical(rateLimitKey, appendInt(b[:0], int(st.Limit)))
	h.SetCanonical(rateRemainingKey, appendInt(b[:0], int(st.Remaining)))
	reset := st.ResetAt
	if reset == 0 {
		reset = time.Now().Add(meter.RateWindow).Unix()
	}
	h.SetCanonical(rateResetKey, appendInt(b[:0], int(reset)))
}

// fillUsage fills the caller's side of a ledger row: who, when, which route.
func fillUsage(r *hotpath.UsageRecord, c *hotpath.Call, route string) {
	p := c.User
	r.RequestID, r.At, r.Route = c.IDString(), c.Start, route
	r.KeyID, r.UserID, r.OrgID, r.WorkspaceID, r.Bucket = p.KeyID, p.UserID, p.OrgID, p.WorkspaceID, p.Kind.Bucket()
}

var scopeErrors = func() (out [32]*codec.Error) {
	for f := hotpath.FamilyChat; f.String() != "unknown"; f++ {
		out[f] = &codec.Error{Code: codec.CodeKeyScopeForbidden,
			Message: "This key's allowed scopes do not include " + f.String() + ".",
			Detail:  codec.Detail{RequiredScope: f.String()}}
	}
	return out
}()

// scopeForbidden is the preallocated 403 naming the family a key lacks.
func scopeForbidden(f hotpath.Family) *codec.Error { return scopeErrors[f] }

// pinVersion reads Gateway-Version and echoes the version that serves the
// request. A request without a pin is served as the current version.
func pinVersion(ctx *fasthttp.RequestCtx, c *hotpath.Call) *codec.Error {
	c.Version = codec.CurrentVersion
	var buf [10]byte
	defer func() { ctx.Response.Header.SetBytesV(HeaderVersion, c.Version.AppendTo(buf[:0])) }()
	pin := ctx.Request.Header.Peek(HeaderVersion)
	if len(pin) == 0 {
		return nil
	}
	v, ok := codec.ParseVersion(bytes.TrimSpace(pin))
	if !ok {
		return codec.ErrBadVersion
	}
	if v > codec.CurrentVersion {
		return codec.ErrUnknownVersion
	}
	c.Version, c.Pinned = v, true
	return nil
}

// writeError answers err in the route's envelope. Errors that are not
// *codec.Error are logged with the request id and answered internal_error.
func (e *Edge) writeError(ctx *fasthttp.RequestCtx, c *hotpath.Call, wire Envelope, err error) {
	var cerr *codec.Error
	if !errors.As(err, &cerr) {
		e.log.Error("request failed", "request_id", c.IDString(), "trace_id", string(c.TraceID()), "err", err)
		cerr = codec.ErrInternal
	}
	e.countError(c, cerr)
	WriteError(ctx, wire, cerr, c.ID())
}

// countError counts cerr as the request's answer.
func (e *Edge) countError(c *hotpath.Call, cerr *codec.Error) {
	if int(cerr.Code) < len(e.errors) && e.errors[cerr.Code] != nil {
		e.errors[cerr.Code].Inc()
	}
	c.ErrorCode = cerr.Code
}

// WriteError writes cerr as the whole response in the wire's envelope, with
// the headers its code calls for.
func WriteError(ctx *fasthttp.RequestCtx, wire Envelope, cerr *codec.Error, requestID []byte) {
	writeError(&ctx.Response, wire, cerr, requestID)
}

func writeError(resp *fasthttp.Response, wire Envelope, cerr *codec.Error, requestID []byte) {
	status := cerr.Status()
	resp.ResetBody()
	resp.SetStatusCode(status)
	resp.Header.SetContentType("application/json")
	if status == fasthttp.StatusUnauthorized {
		resp.Header.Set(headerWWWAuthenticate, "Bearer")
	}
	if cerr.Detail.RetryAfter > 0 {
		var b [20]byte
		resp.Header.SetBytesV(headerRetryAfter, appendInt(b[:0], cerr.Detail.RetryAfter))
	}
	b := bytebufferpool.Get()
	switch wire {
	case EnvelopeOpenAI:
		b.B = codec.AppendOpenAIError(b.B, cerr)
	case EnvelopeAnthropic:
		// Anthropic's status for the code: 529 for an overloaded model.
		_, st := cerr.Code.AnthropicType()
		resp.SetStatusCode(st)
		b.B = codec.AppendAnthropicError(b.B, cerr, requestID)
	case EnvelopeOAuth:
		// An OAuth client reads the OAuth code in error, and caches no
		// answer of a token endpoint (RFC 6749 section 5.1), refusals
		// included.
		resp.Header.Set(headerCacheControl, "no-store")
		resp.Header.Set(headerPragma, "no-cache")
		b.B = codec.AppendV1Error(b.B, codec.AsOAuth(cerr), requestID)
	default:
		b.B = codec.AppendV1Error(b.B, cerr, requestID)
	}
	resp.SetBody(b.B)
	bytebufferpool.Put(b)
}

func appendInt(dst []byte, n int) []byte {
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			break
		}
	}
	return append(dst, tmp[i:]...)
}

func (e *Edge) logAccess(method []byte, c *hotpath.Call, a hotpath.Access, status int) {
	keyID := ""
	if c.User != nil {
		keyID = c.User.KeyID
	} else if c.Service != nil {
		keyID = c.Service.ID
	}
	e.log.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("request_id", c.IDString()),
		slog.String("trace_id", string(c.TraceID())),
		slog.String("method", string(method)),
		slog.String("route", a.Name),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(c.Start)),
		slog.String("key_id", keyID))
}

package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// TracerName is the instrumentation scope of the spans the data plane
// exports.
const TracerName = "github.com/edgegw/gateway/proxy"

// The spans and span events the data plane exports (docs/observability.md
// names what each covers). Attributes name the route, wire, tier, status,
// error code, request id and the first characters of the key's id; never
// a prompt, a reply, a title or a key.
const (
	SpanEdge       = "gateway.edge"
	SpanAdmission  = "gateway.admission"
	SpanUpstream   = "gateway.upstream"
	SpanStream     = "gateway.stream"
	EventFirstByte = "first_byte"
	EventFirstSent = "first_token_sent"
)

// Attribute keys.
const (
	attrRoute       = attribute.Key("gateway.route")
	attrWire        = attribute.Key("gateway.wire")
	attrTier        = attribute.Key("gateway.tier")
	attrRequestID   = attribute.Key("gateway.request_id")
	attrKeyPrefix   = attribute.Key("gateway.key_id_prefix")
	attrErrorCode   = attribute.Key("gateway.error_code")
	attrStage       = attribute.Key("gateway.admission.stage")
	attrAttempt     = attribute.Key("gateway.upstream.attempt")
	attrComplete    = attribute.Key("gateway.stream.complete")
	attrMethod      = attribute.Key("http.request.method")
	attrStatus      = attribute.Key("http.response.status_code")
	attrErrorType   = attribute.Key("error.type")
	keyPrefixLength = 8
)

// remoteParent is the span context a valid traceparent names (the
// caller checked it with codec.ValidTraceparent).
func remoteParent(tp []byte) trace.SpanContext {
	var cfg trace.SpanContextConfig
	unhex(cfg.TraceID[:], tp[3:35])
	unhex(cfg.SpanID[:], tp[36:52])
	var f [1]byte
	unhex(f[:], tp[53:55])
	cfg.TraceFlags, cfg.Remote = trace.TraceFlags(f[0]), true
	return trace.NewSpanContext(cfg)
}

// unhex decodes lowercase hex src (2×len(dst) digits) into dst.
func unhex(dst, src []byte) {
	for i := range dst {
		dst[i] = nibble(src[2*i])<<4 | nibble(src[2*i+1])
	}
}

func nibble(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// keyPrefix is the first characters of the caller's key id (a record id,
// never the key), enough to find the key in the admin tools.
func keyPrefix(c *hotpath.Call) string {
	id := ""
	if c.User != nil {
		id = c.User.KeyID
	} else if c.Service != nil {
		id = c.Service.ID
	}
	return id[:min(len(id), keyPrefixLength)]
}

// startTrace opens the request's edge span: a child of the client's
// traceparent when it sent one, a new trace otherwise. The request's
// traceparent then names the edge span, so the upstream and the access log
// join the exported trace.
func (e *Edge) startTrace(ctx *fasthttp.RequestCtx, c *hotpath.Call, a hotpath.Access) {
	parent := context.Background()
	if c.TraceFromClient() {
		parent = trace.ContextWithRemoteSpanContext(parent, remoteParent(c.Traceparent()))
	}
	tctx, sp := e.tracer.Start(parent, SpanEdge, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(c.Start))
	if sp.IsRecording() {
		sp.SetAttributes(attrRoute.String(a.Name), attrRequestID.String(c.IDString()),
			attrMethod.String(string(ctx.Method())))
	}
	sc := sp.SpanContext()
	c.SetTraceContext(sc.TraceID(), sc.SpanID(), sc.IsSampled())
	c.TraceCtx = tctx
}

// endTrace ends the edge span with the request's outcome, and names it in
// the ledger row so the ledger write's span links to it.
func endTrace(c *hotpath.Call, status int) {
	sp := trace.SpanFromContext(c.TraceCtx)
	if sp.IsRecording() {
		sp.SetAttributes(attrStatus.Int(status))
		if p := keyPrefix(c); p != "" {
			sp.SetAttributes(attrKeyPrefix.String(p))
		}
		if c.Usage.Tier != "" {
			sp.SetAttributes(attrTier.String(c.Usage.Tier))
		}
		if c.ErrorCode != 0 {
			sp.SetAttributes(attrErrorCode.String(c.ErrorCode.String()))
		}
		if status >= 500 {
			sp.SetStatus(codes.Error, c.ErrorCode.String())
		}
		if sc := sp.SpanContext(); sc.IsSampled() {
			c.Usage.TraceID, c.Usage.SpanID = sc.TraceID(), sc.SpanID()
		}
	}
	sp.End()
}

// tracedAuthorize is authorize inside an admission span.
func (e *Edge) tracedAuthorize(ctx *fasthttp.RequestCtx, c *hotpath.Call, a hotpath.Access, wire Envelope, w *window) error {
	_, sp := e.tracer.Start(c.TraceCtx, SpanAdmission)
	err := e.authorize(ctx, c, a, wire, w)
	if sp.IsRecording() {
		sp.SetAttributes(attrStage.String("key"))
		endWithError(sp, err)
	}
	sp.End()
	return err
}

// endWithError records err's code on sp.
func endWithError(sp trace.Span, err error) {
	if err == nil {
		return
	}
	var cerr *codec.Error
	if !errors.As(err, &cerr) || cerr == nil {
		sp.SetStatus(codes.Error, codec.CodeInternalError.String())
		return
	}
	sp.SetAttributes(attrErrorCode.String(cerr.Code.String()))
	if cerr.Status() >= 500 {
		sp.SetStatus(codes.Error, cerr.Code.String())
	}
}

// traceWire names the chat wire on the edge span.
func (t *turn) traceWire() {
	if sp := trace.SpanFromContext(t.tctx); sp.IsRecording() {
		sp.SetAttributes(attrWire.String(t.wire.wireName()))
	}
}

// wireName is the wire's name in span attributes.
func (w chatWire) wireName() string {
	switch w {
	case chatV1:
		return "v1"
	case chatV2:
		return "v2"
	case chatAnthropic:
		return "anthropic"
	case chatResponses:
		return "responses"
	}
	return "openai"
}

// tracedAdmit is admit inside an admission span.
func (t *turn) tracedAdmit(ctx *fasthttp.RequestCtx, c *hotpath.Call) *codec.Error {
	_, sp := t.ch.cfg.Tracer.Start(t.tctx, SpanAdmission)
	cerr := t.admit(ctx, c)
	if sp.IsRecording() {
		sp.SetAttributes(attrStage.String("chat"), attrTier.String(t.up.Tier.Name))
		if cerr != nil {
			endWithError(sp, cerr)
		}
	}
	sp.End()
	return cerr
}

// startUpstream opens the span of one upstream attempt and puts its
// traceparent on req, so the upstream's spans are its children.
func (t *turn) startUpstream(req *fasthttp.Request, attempt int) trace.Span {
	_, sp := t.ch.cfg.Tracer.Start(t.tctx, SpanUpstream, trace.WithSpanKind(trace.SpanKindClient))
	if sp.IsRecording() {
		sp.SetAttributes(attrTier.String(t.up.Tier.Name), attrAttempt.Int(attempt))
	}
	var b [codec.TraceparentLen]byte
	sc := sp.SpanContext()
	req.Header.SetBytesV(headerTraceparent, codec.AppendTraceparentIDs(b[:0], sc.TraceID(), sc.SpanID(), sc.IsSampled()))
	return sp
}

// endUpstream ends an attempt's span with what the attempt said.
func endUpstream(sp trace.Span, resp *fasthttp.Response, err error, v verdict) {
	if sp.IsRecording() {
		if err == nil {
			sp.SetAttributes(attrStatus.Int(resp.StatusCode()))
		} else {
			kind := "connect"
			if isTimeout(err) {
				kind = "timeout"
			}
			sp.SetAttributes(attrErrorType.String(kind))
		}
		if v.err != nil {
			sp.SetAttributes(attrErrorCode.String(v.err.Code.String()))
			sp.SetStatus(codes.Error, v.err.Code.String())
		}
	}
	sp.End()
}

// startStream opens a stream's span, from the upstream's response head to
// the stream's end.
func (t *turn) startStream() {
	_, t.sspan = t.ch.cfg.Tracer.Start(t.tctx, SpanStream)
}

// streamEvent marks a moment of the stream on its span.
func (t *turn) streamEvent(name string) {
	t.sspan.AddEvent(name, trace.WithTimestamp(time.Now()))
}

// endStream ends a stream's span with its outcome.
func (t *turn) endStream(status int, cerr *codec.Error, complete bool) {
	sp := t.sspan
	t.sspan = nil
	if sp.IsRecording() {
		sp.SetAttributes(attrStatus.Int(status), attrComplete.Bool(complete))
		if cerr != nil {
			endWithError(sp, cerr)
		}
	}
	sp.End()
}

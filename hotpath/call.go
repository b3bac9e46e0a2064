package hotpath

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/edgegw/gateway/codec"
)

// MaxRequestIDLen is the longest X-Request-Id the gateway reuses.
const MaxRequestIDLen = 128

// Call is the per-request state shared by every route: who is calling, under
// which id and version. Calls are pooled; AcquireCall and ReleaseCall pair up,
// and nothing may keep a Call or its ID slice after ReleaseCall.
type Call struct {
	id    [MaxRequestIDLen]byte
	idLen uint8
	// trace is the request's W3C traceparent: the client's, or one made
	// here; traceFromClient says which.
	trace           [codec.TraceparentLen]byte
	traceFromClient bool

	// Version is the version serving the request: the pin, or the current one.
	Version codec.Version
	// Pinned reports whether the client sent a Gateway-Version pin.
	Pinned bool
	// Start is when the gateway began handling the request.
	Start time.Time

	// User is the verified user key on user routes; nil elsewhere.
	User *Principal
	// Service is the verified service token on service routes; nil elsewhere.
	Service *ServiceToken

	// Usage is the request's ledger row as the route fills it in (tier,
	// tokens, cost, billed). The edge completes and records it when the
	// request ends.
	Usage UsageRecord
	// ErrorCode is the code the request was answered with; 0 on success.
	ErrorCode codec.Code

	// Detached says the handler took the request over and answers it after
	// returning (a stream owns its connection): the edge then leaves the
	// request's ending — its metrics, access log line and ledger row, and
	// this Call's release — to the handler, which calls Ender.End once.
	Detached bool
	// Ender ends the request on its route; the edge sets it.
	Ender Ender
	// TraceCtx carries the request's exported span (OpenTelemetry) for
	// the spans of its stages; nil when tracing is off, and then nothing
	// on the request's path looks further.
	TraceCtx context.Context
	// Recorded says the request's ledger row was written already
	// (Ender.Record): ending it does not write it again.
	Recorded bool
}

// Ender ends a request a handler took over: status is what the client was
// answered, and a non-nil err the error it was answered with.
type Ender interface {
	End(c *Call, status int, err *codec.Error)
	// Record writes the request's ledger row now, as End would: a handler
	// that answers after returning calls it before the answer's last byte
	// goes out, so that no client holds a complete answer whose row a
	// crash could still lose. End then does not write the row again.
	Record(c *Call, status int, err *codec.Error)
}

var callPool = sync.Pool{New: func() any { return new(Call) }}

// AcquireCall returns an empty Call from the pool.
func AcquireCall() *Call { return callPool.Get().(*Call) }

// ReleaseCall resets c and returns it to the pool.
func ReleaseCall(c *Call) {
	*c = Call{}
	callPool.Put(c)
}

// ID returns the request id. The slice aliases the Call and is valid until
// ReleaseCall.
func (c *Call) ID() []byte { return c.id[:c.idLen] }

// IDString returns a copy of the request id that outlives the Call.
func (c *Call) IDString() string { return string(c.ID()) }

// SetID reuses a client's request id when it is valid, and otherwise mints
// one at c.Start, which must be set. It allocates nothing.
func (c *Call) SetID(fromClient []byte) {
	if len(fromClient) > 0 && codec.ValidRequestID(fromClient) {
		c.idLen = uint8(copy(c.id[:], fromClient))
		return
	}
	c.idLen = uint8(len(AppendRequestID(c.id[:0], c.Start)))
}

// SetTrace keeps the client's traceparent when it is valid (a later
// version is carried as version 00, its first four fields), and otherwise
// starts a trace of the request's own with a fresh random trace id.
func (c *Call) SetTrace(fromClient []byte) {
	if codec.ValidTraceparent(fromClient) {
		copy(c.trace[:], fromClient[:codec.TraceparentLen])
		c.trace[0], c.trace[1] = '0', '0'
		c.traceFromClient = true
		return
	}
	codec.AppendTraceparent(c.trace[:0], rand.Uint64(), rand.Uint64(), rand.Uint64())
	c.traceFromClient = false
}

// SetTraceContext makes the request's traceparent name the span that
// serves it (trace id, span id and the sampled flag), so the upstream and
// the logs join the exported trace. Whether the trace came from the
// client is unchanged.
func (c *Call) SetTraceContext(traceID [16]byte, spanID [8]byte, sampled bool) {
	codec.AppendTraceparentIDs(c.trace[:0], traceID, spanID, sampled)
}

// Traceparent is the request's traceparent, sent on to its upstream. The
// slice aliases the Call and is valid until ReleaseCall.
func (c *Call) Traceparent() []byte { return c.trace[:] }

// TraceID is the request's trace id, 32 hex digits (aliasing the Call).
func (c *Call) TraceID() []byte { return c.trace[3:35] }

// TraceFromClient reports whether the trace came from the client's
// traceparent (and so its tracestate is carried on too).
func (c *Call) TraceFromClient() bool { return c.traceFromClient }

// AppendRequestID appends a fresh request id minted at now: a version-7
// UUID, time-ordered, so that the ledger's index of request ids grows at
// its right edge (docs/ledger.md). The random bits come from the runtime's
// per-thread ChaCha8 generator: unpredictable enough for an identifier,
// and free of locks and allocations.
func AppendRequestID(dst []byte, now time.Time) []byte {
	return codec.AppendUUIDv7(dst, now.UnixMilli(), rand.Uint64(), rand.Uint64())
}

// Auth is what a route demands of its caller.
type Auth uint8

const (
	// AuthNone routes are public: health, readiness, status, sign-in.
	AuthNone Auth = iota
	// AuthUser routes need a gw_live_ user key.
	AuthUser
	// AuthService routes need a gw_svc_ service token.
	AuthService
)

// Access describes a route to the edge that serves it: its name in metrics
// and logs, who may call it, and the endpoint family a scoped key must hold.
type Access struct {
	Name   string
	Auth   Auth
	Family Family
	// Rate is the per-minute window a user route counts in; the zero value
	// is the shared request window.
	Rate RateBucket
	// Billable routes are refused to read-only keys (key_read_only), with
	// the key check, before the limiter.
	Billable bool
	// Unlogged routes write no ledger row: reads of the caller's own
	// limits, which must cost and write nothing.
	Unlogged bool
	// Untraced routes export no span: the probes load balancers poll,
	// which would fill a trace store with nothing worth reading.
	Untraced bool
}

// RateBucket selects which per-minute window a route counts in.
type RateBucket uint8

// The buckets.
const (
	// RateRequests is the request window every metered route shares.
	RateRequests RateBucket = iota
	// RateTokenCount is token counting's own window.
	RateTokenCount
	// RateNone marks a route that is not metered.
	RateNone
	// RatePeek checks the request window without counting in it: a full
	// window refuses, but the route itself opens and uses nothing.
	RatePeek
	// RateByHandler routes count in the request window themselves, in the
	// same step as the rest of their admission (chat: AdmitChat).
	RateByHandler
)

package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/bytedance/sonic"
	"github.com/bytedance/sonic/encoder"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// ChatConfig configures the three chat routes.
type ChatConfig struct {
	// Tiers is the tier table, in the order auto prefers them when sizes tie.
	Tiers []hotpath.Tier
	// Upstreams binds every tier by name. Required for every tier.
	Upstreams map[string]*Upstream
	// Idempotency stores replays for Idempotency-Key on the OpenAI route;
	// nil turns the header off.
	Idempotency hotpath.IdempotencyStore
	// MaxInFlight is the ceiling on chat requests in flight across the three
	// routes, streams included. Default 10000.
	MaxInFlight int
	// Log receives failures (never content). Required.
	Log *slog.Logger
	// Metrics is where the chat metrics are registered. Required.
	Metrics *metrics.Set
	// Limits admits each request against the key's concurrency ceiling and
	// budgets; nil admits everything.
	Limits *meter.Limits
	// Usage receives a stream's ledger row when the stream ends (the edge
	// records every other row); nil records nothing.
	Usage hotpath.UsageSink
	// KeepAliveInterval is how long a stream may send the client nothing
	// before it sends an SSE comment (": keep-alive"). Default 15s;
	// negative sends none.
	KeepAliveInterval time.Duration
	// Aux binds the auxiliary tiers; the specialised routes are served
	// through this pipeline. The zero value serves none of them.
	Aux AuxConfig
	// Gates are the chat tiers' input moderation gates, by tier name; a
	// tier without one is not gated. A gate needs Aux.Guard.
	Gates map[string]GateConfig
	// Files reads the files chat messages attach; nil answers every file
	// id 404 file_not_found.
	Files hotpath.FileSource
	// MaxFileTokens caps one attached file's text tokens. Default
	// DefaultMaxFileTokens.
	MaxFileTokens int
	// MaxTurnTokens caps the tokens of the files the turn's own message
	// (the last user message) attaches, together. Default
	// DefaultMaxTurnTokens.
	MaxTurnTokens int
	// MaxImageBytes is the largest image sent to a tier that reads images.
	// Default DefaultMaxImageBytes.
	MaxImageBytes int64
	// ConnsKept must be set exactly when the server serving the routes has
	// KeepHijackedConns: a stream then gives the connection's read buffer
	// and request context back as soon as it takes the connection over, and
	// closes the connection itself.
	ConnsKept bool
	// Memory serves memory recall, capture and standing rules on the
	// native routes; nil serves turns without them.
	Memory *MemoryConfig
	// Tracer exports the spans of a turn's admission, upstream attempts
	// and stream, under the edge's span of the request; nil (the default)
	// exports none. Set it with the edge's.
	Tracer trace.Tracer
}

// Chat serves POST /api/v1/chat, POST /api/v2/chat and
// POST /v1/chat/completions through one pipeline: validate, authorize,
// route, call upstream, rewrite, account.
type Chat struct {
	cfg   ChatConfig
	tiers []hotpath.Tier
	ups   []*Upstream // by tier index
	gate  *hotpath.Gate
	m     chatMetrics
	// streams counts streams that own their connection; the server's own
	// shutdown no longer sees them, so Drain waits for them.
	streams sync.WaitGroup
	open    atomic.Int64 // streams open now, for the gauge
	workers *workers     // run owned streams and the requests after them
	// serveConn serves the requests that follow a complete stream on its
	// connection (the server's ServeConn); nil closes the connection
	// instead, and so does closing set, once a request already begun on it
	// is refused.
	serveConn func(net.Conn) error
	idle      time.Duration // the server's idle timeout, for kept connections
	closing   atomic.Bool
	// draining: streams that open from now on say Connection: close in
	// their head and close their connection when they end.
	draining atomic.Bool
	// quietEvery is the keep-alive interval; 0 sends none.
	quietEvery time.Duration
	// watch notices streaming clients that leave.
	watch *departures
	// ledger says when Usage can keep no more rows; nil when it cannot
	// fill.
	ledger hotpath.UsageSaturation

	gates     map[string]gate
	errImages *codec.Error // image_not_supported naming the tiers that read images
	maxWindow int          // the largest context window of any tier

	maxFileTokens, maxTurnTokens int
	maxImageBytes                int64
}

type chatMetrics struct {
	overhead, ttft, streamDuration *metrics.Histogram
	maxGap                         *metrics.Histogram
	estimated                      *metrics.Counter
	streamsBroken, clientGone      *metrics.Counter
	retries, redials               *metrics.Counter
	oversize                       *metrics.Counter
	gate                           *metrics.Histogram
	gateFailOpen                   *metrics.Counter
}

// NewChat checks that every tier has an upstream and registers metrics.
func NewChat(cfg ChatConfig) (*Chat, error) {
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 10_000
	}
	if cfg.Memory != nil {
		if cfg.Memory.Store == nil || cfg.Memory.Log == nil {
			return nil, errors.New("memory: a store and a log are required")
		}
		cfg.Memory.defaults()
	}
	ch := &Chat{cfg: cfg, tiers: cfg.Tiers, gate: hotpath.NewGate(cfg.MaxInFlight), quietEvery: cfg.KeepAliveInterval, workers: newWorkers(),
		watch: newDepartures()}
	ch.ledger, _ = cfg.Usage.(hotpath.UsageSaturation)
	if ch.quietEvery == 0 {
		ch.quietEvery = 15 * time.Second
	}
	ch.quietEvery = max(ch.quietEvery, 0)
	for i := range cfg.Tiers {
		up, ok := cfg.Upstreams[cfg.Tiers[i].Name]
		if !ok {
			return nil, fmt.Errorf("tier %s has no upstream", cfg.Tiers[i].Name)
		}
		up.Tier = &ch.tiers[i]
		ch.ups = append(ch.ups, up)
	}
	if err := ch.cfg.Aux.Validate(); err != nil {
		return nil, fmt.Errorf("aux: %w", err)
	}
	var err error
	if ch.gates, err = checkGates(cfg.Gates, cfg.Tiers, cfg.Aux.Guard); err != nil {
		return nil, err
	}
	for i := range ch.tiers {
		ch.maxWindow = max(ch.maxWindow, ch.tiers[i].ContextWindow)
	}
	ch.maxFileTokens, ch.maxTurnTokens, ch.maxImageBytes = cfg.MaxFileTokens, cfg.MaxTurnTokens, cfg.MaxImageBytes
	if ch.maxFileTokens <= 0 {
		ch.maxFileTokens = DefaultMaxFileTokens
	}
	if ch.maxTurnTokens <= 0 {
		ch.maxTurnTokens = DefaultMaxTurnTokens
	}
	if ch.maxImageBytes <= 0 {
		ch.maxImageBytes = DefaultMaxImageBytes
	}
	ch.errImages = &codec.Error{Code: codec.CodeImageNotSupported}
	for _, t := range ch.tiers {
		if t.SupportsVision {
			ch.errImages.Detail.VisionTiers = append(ch.errImages.Detail.VisionTiers, t.Name)
		}
	}
	// Load the tokenizer now, not on the first request that needs it.
	tokens.Count(" ")
	s := cfg.Metrics
	ch.m = chatMetrics{
		overhead:       s.NewHistogram(`gateway_chat_overhead_seconds`),
		ttft:           s.NewHistogram(`gateway_chat_time_to_first_token_seconds`),
		streamDuration: s.NewHistogram(`gateway_chat_stream_duration_seconds`),
		maxGap:         s.NewHistogram(`gateway_chat_stream_max_gap_seconds`),
		estimated:      s.NewCounter(`gateway_chat_usage_estimated_total`),
		streamsBroken:  s.NewCounter(`gateway_chat_streams_broken_total`),
		clientGone:     s.NewCounter(`gateway_chat_client_disconnects_total`),
		retries:        s.NewCounter(`gateway_chat_upstream_retries_total`),
		redials:        s.NewCounter(`gateway_chat_upstream_redials_total`),
		oversize:       s.NewCounter(`gateway_chat_upstream_oversize_total`),
		gate:           s.NewHistogram(`gateway_chat_moderation_gate_seconds`),
		gateFailOpen:   s.NewCounter(`gateway_chat_moderation_gate_fail_open_total`),
	}
	s.NewGauge(`gateway_chat_in_flight`, func() float64 { return float64(ch.gate.InFlight()) })
	s.NewGauge(`gateway_chat_open_streams`, func() float64 { return float64(ch.open.Load()) })
	for _, up := range append(ch.ups[:len(ch.ups):len(ch.ups)], ch.auxUps()...) {
		name := up.Tier.Name
		up.meter = tierMeter{
			input:  s.NewCounter(fmt.Sprintf(`gateway_chat_tokens_total{tier=%q,direction="input"}`, name)),
			output: s.NewCounter(fmt.Sprintf(`gateway_chat_tokens_total{tier=%q,direction="output"}`, name)),
			cost:   s.NewCounter(fmt.Sprintf(`gateway_chat_cost_picousd_total{tier=%q}`, name)),
			// Upstream 4xx answers that are neither a context overflow
			// nor moderation: the gateway sent what the upstream refuses.
			refused: s.NewCounter(fmt.Sprintf(`gateway_chat_upstream_refusals_total{tier=%q}`, name)),
		}
	}
	return ch, nil
}

// Register adds the three chat routes. /api/v2/chat is its own wire, not a
// mirror of /api/v1/chat.
func (ch *Chat) Register(rt *Router) {
	// Chat counts in the request window as part of its admission, in one
	// step with its concurrency slot and budgets.
	a := hotpath.Access{Auth: hotpath.AuthUser, Family: hotpath.FamilyChat, Billable: true, Rate: hotpath.RateByHandler}
	a.Name = chatV1.routeName()
	rt.HandleOnly(fasthttp.MethodPost, "/api/v1/chat", a, func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		return ch.serve(ctx, c, chatV1)
	})
	a.Name = chatV2.routeName()
	rt.HandleOnly(fasthttp.MethodPost, "/api/v2/chat", a, func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		return ch.serve(ctx, c, chatV2)
	})
	a.Name = chatOpenAI.routeName()
	rt.HandleOnly(fasthttp.MethodPost, "/v1/chat/completions", a, func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		return ch.serve(ctx, c, chatOpenAI)
	})
	// Token counting reads chat's tiers, template and system prompts. It
	// counts in its own window, bills nothing and writes no ledger row.
	rt.Handle(fasthttp.MethodPost, "/api/v1/tokens/count", hotpath.Access{Name: "tokens_count", Auth: hotpath.AuthUser,
		Family: hotpath.FamilyTokens, Rate: hotpath.RateTokenCount, Unlogged: true}, ch.countTokens)
	ch.registerAux(rt)
	a.Name = chatAnthropic.routeName()
	rt.HandleOnly(fasthttp.MethodPost, "/v1/messages", a, func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		return ch.serve(ctx, c, chatAnthropic)
	})
	a.Name = chatResponses.routeName()
	rt.HandleOnly(fasthttp.MethodPost, "/v1/responses", a, func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		return ch.serve(ctx, c, chatResponses)
	})
	// Anthropic's count is the gateway's token count for a Messages body:
	// the same scope, window and rules; it bills nothing and writes no
	// ledger row.
	count := hotpath.Access{Auth: hotpath.AuthUser, Family: hotpath.FamilyTokens, Rate: hotpath.RateTokenCount,
		Name: "messages_count_tokens", Unlogged: true}
	rt.HandleOnly(fasthttp.MethodPost, "/v1/messages/count_tokens", count, ch.countMessageTokens)
}

// envelope is the error envelope the route answers in.
func (w chatWire) envelope() Envelope {
	switch w {
	case chatOpenAI, chatResponses:
		return EnvelopeOpenAI
	case chatAnthropic:
		return EnvelopeAnthropic
	}
	return EnvelopeAPI
}

// routeName is the wire's route name in metrics, logs and the ledger.
func (w chatWire) routeName() string {
	switch w {
	case chatV1:
		return "chat_v1"
	case chatV2:
		return "chat_v2"
	case chatAnthropic:
		return "messages_anthropic"
	case chatResponses:
		return "responses_openai"
	}
	return "chat_openai"
}

// idPrefix starts the ids of the wire's completions, as its API spells
// them.
func (w chatWire) idPrefix() string {
	switch w {
	case chatAnthropic:
		return "msg_"
	case chatResponses:
		return "resp_"
	}
	return "chatcmpl-"
}

// replays reports whether the wire honours Idempotency-Key: the
// OpenAI-compatible and Anthropic-compatible routes do, for requests that
// do not stream.
func (w chatWire) replays() bool { return w == chatOpenAI || w == chatAnthropic || w == chatResponses }

// requestHash names a request for Idempotency-Key: its route and its body.
// A body valid on two wires, sent under one key to both, is two requests,
// and the second is a conflict rather than a replay of an answer in the
// other wire's shape.
func requestHash(path, body []byte) (sum [sha256.Size]byte) {
	h := sha256.New()
	h.Write(path)
	h.Write([]byte{0})
	h.Write(body)
	h.Sum(sum[:0])
	return sum
}

// turn is one chat request's state. It outlives the fasthttp handler when
// it streams, so everything it keeps is its own copy.
type turn struct {
	ch        *Chat
	wire      chatWire
	req       codec.ChatRequest
	intent    chatIntent
	up        *Upstream
	routing   codec.Routing
	head      codec.Head
	idBuf     [48]byte
	requestID []byte
	gw        []byte
	bill      codec.Bill
	answer    codec.Answer
	start     time.Time
	upstream  time.Duration
	// mem is the turn's memory and rules; nil when it uses neither.
	mem *turnMemory
	out []byte
	// upBody is the body sent upstream and upBuf the buffer it is encoded
	// into, fields so that neither escapes per request.
	upBody upstreamRequest
	upBuf  []byte
	// ahead holds what the client sent past a stream's request (the next
	// request, pipelined), given back with the connection.
	ahead     []byte
	delivered []byte // raw content delivered and not yet counted
	// The arguments of an owned stream's next half on its worker: the
	// connection, the upstream request and the response head (openJob),
	// then the connection and the upstream's response (writeJob).
	jconn net.Conn
	jreq  *fasthttp.Request
	jresp *fasthttp.Response
	// folded counts the delivered text handed to the background counter
	// (see deliver); folds are its counts still under way.
	folded atomic.Int64
	folds  sync.WaitGroup

	// The request's shape, worked out once: an upper bound on its prompt
	// tokens, whether it carries images, and the last exact count with the
	// system prompt it was made for.
	bound    int
	images   bool
	counted  bool
	countSys string
	count    int
	// countLimit is the limit count was made under: a count above it
	// stopped early and is only a lower bound.
	countLimit int
	keyID      string
	// files are the distinct files the request attaches, in the order of
	// their first mention; fileFloor is the window the turn's own files
	// need until they are placed into the messages.
	files     []attached
	fileFloor int
	// reservedIn is the input bound admit reserved the budgets for.
	reservedIn int64

	// result, when set, receives the outcome of a turn run in-process
	// (Complete); such a turn never streams.
	result *hotpath.TurnResult

	// claim holds the request's Idempotency-Key until its answer is
	// stored; nil without one.
	claim hotpath.Claim

	// Admission: the key's concurrency slot and the budgets reserved.
	principal *hotpath.Principal
	charge    meter.Charge
	poolsLow  bool
	billed    bool
	estimated bool
	// hcall is a stream's Call, which it ends when the stream does.
	hcall *hotpath.Call
	// tctx carries the request's edge span when tracing is on (nil
	// otherwise); sspan is a stream's span while it runs.
	tctx  context.Context
	sspan trace.Span
	// thinking says an Anthropic request asked to see thinking blocks.
	thinking bool
	// anthropic is the request as the Anthropic wire sent it, before it
	// became req.
	anthropic codec.MessagesRequest
	// blocks is an Anthropic stream's content block state.
	blocks blockState
	// queue holds tool calls that wait for the open block (or item) to
	// close; rtool is the upstream index of a Responses stream's open call.
	queue toolQueue
	rtool int64
	// responses is the request as the Responses wire sent it; rout,
	// rhead and seq are its response's output, head and next event's
	// sequence number; reasoningTokens is the upstream's count.
	responses       codec.ResponsesRequest
	rout            codec.ResponseOutput
	rhead           codec.ResponseHead
	recho           []byte // rhead.Echo's bytes, kept from turn to turn
	seq             int64
	reasoningTokens int64
	// cw is the client's writer while the stream pumps; gone says a
	// write to it failed.
	cw   *clientWriter
	gone bool
	// rateShown says admission ran: the rate headers are set (or the
	// limiter could not be reached).
	rateShown bool
	// departed is set by the departure watcher when a stream's client
	// left; upConn is the stream's upstream connection once known, which
	// the watcher closes then.
	departed atomic.Bool
	upConn   atomic.Pointer[idleConn]
	ttft     time.Duration

	// A stream's framing: chunked (HTTP/1.1) or ended by closing the
	// connection; the connection closes after it (lastConn); before the
	// first flush t.out holds the response head, and the frames start at
	// mark; last adds the final chunk to the next flush, and lastSent says
	// it went out.
	chunked, lastConn, last, lastSent bool
	mark                              int
	// settled says the budgets are settled and the slots given back.
	settled bool
	// batch says t.out holds frames not yet written (after beginFrame);
	// firstPending says they include the first after the primer, whose
	// write is the time to first token.
	batch, firstPending bool
	// lastWrite is when frames last went to the client, maxGap the
	// longest pause between two such writes; keepingAlive marks the
	// keep-alive comment's write, which is not a token.
	lastWrite    time.Time
	maxGap       time.Duration
	keepingAlive bool
}

var turnPool = sync.Pool{New: func() any { return new(turn) }}

func acquireTurn() *turn { return turnPool.Get().(*turn) }

func releaseTurn(t *turn) {
	t.folds.Wait() // a background count still holds t
	out, delivered, gw, rid, ahead, recho := t.out[:0], t.delivered[:0], t.gw[:0], t.requestID[:0], t.ahead[:0], t.recho[:0]
	if cap(out) > 256<<10 {
		out = nil
	}
	if cap(delivered) > 256<<10 {
		delivered = nil
	}
	if cap(ahead) > 64<<10 {
		ahead = nil
	}
	if cap(recho) > 64<<10 {
		recho = nil
	}
	rout := t.rout
	rout.Reset()
	if cap(rout.Buf) > 256<<10 || cap(rout.Items) > 1024 {
		rout = codec.ResponseOutput{}
	}
	queue := t.queue
	queue.reset()
	if cap(queue.buf) > 256<<10 || cap(queue.lit) > 256<<10 {
		queue = toolQueue{}
	}
	*t = turn{out: out, delivered: delivered, gw: gw, requestID: rid, ahead: ahead, recho: recho, rout: rout, queue: queue}
	turnPool.Put(t)
}

// KeepAlive has connections whose stream completed go on serving requests
// through serve — the server's ServeConn — instead of closing: a client
// that streams turn after turn keeps one connection (and, behind a TLS
// terminator, one handshake). Such a connection is then idle like any kept
// one: it waits up to idle for the client's next request. Call it before
// serving; it needs ConnsKept. NewServer calls it.
func (ch *Chat) KeepAlive(serve func(net.Conn) error, idle time.Duration) {
	ch.serveConn, ch.idle = serve, idle
}

// StartDrain has streams that open from now on announce Connection: close
// and close their connections when they end, so the client's next request
// goes elsewhere. A stream already open keeps its connection: it promised
// the client nothing else, and the client may already be sending its next
// request on it, which the edge then answers (closing it) or refuses.
// Call it when shutdown's grace begins.
func (ch *Chat) StartDrain() { ch.draining.Store(true) }

// StopKeepAlive has streams that complete from now on close their
// connections, after the server has refused a request their client already
// began behind them (keepConn). Call it when the grace ends, with the
// edge's StopServing, before the server stops.
func (ch *Chat) StopKeepAlive() { ch.closing.Store(true) }

// Cut cuts every upstream (Upstream.Cut): each request and stream still
// waiting on one ends at once with server_shutting_down, its client told
// (a stream ends with its wire's failure ending) and its ledger row
// written. Shutdown calls it when its bound has passed; Drain then waits
// for the streams.
func (ch *Chat) Cut() {
	for _, up := range ch.cfg.Upstreams {
		up.Cut()
	}
}

// Close stops the departure watcher. Call it once streams have drained.
func (ch *Chat) Close() { ch.watch.close() }

// Drain waits until every open stream has ended, or ctx ends; it reports
// whether they all did. Call it after the listener stopped accepting.
func (ch *Chat) Drain(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { ch.streams.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// errConcurrency is the preallocated refusal at the in-flight ceiling.
var errConcurrency = &codec.Error{Code: codec.CodeRateLimited,
	Message: "Too many chat requests in flight; retry in a moment.",
	Detail:  codec.Detail{Reason: "concurrency", RetryAfter: 1}}

func (ch *Chat) serve(ctx *fasthttp.RequestCtx, c *hotpath.Call, wire chatWire) (err error) {
	return ch.serveTurn(ctx, c, wire, nil)
}

// serveTurn is serve; a non-nil result asks for the turn's outcome as well
// (Complete), and then a stream is refused.
func (ch *Chat) serveTurn(ctx *fasthttp.RequestCtx, c *hotpath.Call, wire chatWire, result *hotpath.TurnResult) (err error) {
	if !ch.gate.TryAcquire() {
		ch.peekRate(ctx, c, errConcurrency)
		return errConcurrency
	}
	t := acquireTurn()
	t.ch, t.wire, t.start, t.keyID, t.principal = ch, wire, c.Start, c.User.KeyID, c.User
	t.result = result
	t.requestID = append(t.requestID, c.ID()...)
	if c.TraceCtx != nil && ch.cfg.Tracer != nil {
		t.tctx = c.TraceCtx
		t.traceWire()
	}
	streaming := false
	defer func() {
		// A stream that opened owns t from here. Every other ending —
		// an answer, an error, a panic on its way to the edge's recovery
		// — settles, gives the slots and an unstored key claim back and
		// logs its row.
		if streaming && err == nil {
			return
		}
		t.account(&c.Usage)
		t.settle()
		abandon(t.claim)
		releaseTurn(t)
	}()
	streaming, err = t.prepare(ctx, c)
	if err != nil {
		err = wire.inOwnTerms(err)
		if !t.rateShown {
			ch.peekRate(ctx, c, err)
		}
	}
	return err
}

// peekRate describes the request window on a refusal that came before
// admission (validation, model_not_allowed, context_overflow, an open
// breaker): the spec lets the X-RateLimit-* headers be absent only on 401,
// on a key-check 403 and when the limiter cannot reach its store. The
// window is read, not counted: a request refused before admission does not
// use it up.
func (ch *Chat) peekRate(ctx *fasthttp.RequestCtx, c *hotpath.Call, err error) {
	l := ch.cfg.Limits
	var cerr *codec.Error
	if l == nil || c.User == nil || !errors.As(err, &cerr) ||
		cerr.Code == codec.CodeKeyScopeForbidden || cerr.Code == codec.CodeKeyReadOnly {
		return
	}
	if st, metered, _ := l.Hit(context.Background(), c.Start, c.User, hotpath.RatePeek); metered {
		setRateHeaders(ctx, st)
	}
}

// account fills the serving side of a ledger row: tier, tokens, cost.
func (t *turn) account(r *hotpath.UsageRecord) {
	if t.up != nil {
		r.Tier = t.up.Tier.Name
	}
	r.Stream, r.Billed = t.req.Stream, t.billed
	if t.billed {
		b := &t.bill
		r.InputTokens, r.OutputTokens, r.CostPico = b.InputTokens, b.OutputTokens, b.AmountPico
		r.Estimated = t.estimated
		r.WeightedTokens = t.charge.Weighted(b.InputTokens + b.OutputTokens)
	}
	r.TTFTUS = t.ttft.Microseconds()
}

// settle settles the turn's budgets and gives its concurrency slots back,
// once. A non-streaming answer settles before the edge writes it; a stream
// before its last bytes go out when it ends well-formed (recordBeforeLast),
// otherwise when it ends. A client that sends its next request as soon as
// it has read the last byte of an answer then finds its slot free.
func (t *turn) settle() {
	if t.settled {
		return
	}
	t.settled = true
	t.finishAdmission()
	t.ch.gate.Release()
}

// finishAdmission settles the turn's budgets to what it really cost and gives its
// concurrency slot back. Every ending passes here exactly once (settle).
func (t *turn) finishAdmission() {
	l := t.ch.cfg.Limits
	if l == nil {
		return
	}
	l.FinishChat(&t.charge, t.billed, t.bill.AmountPico, t.bill.InputTokens+t.bill.OutputTokens)
}

// inputBound is the most input tokens the prompt can be billed: its count
// when one was made (under the tier's system prompt), else its byte bound
// with the system prompt and its message's framing.
func (t *turn) inputBound() int64 {
	if t.counted {
		return int64(t.count)
	}
	return int64(t.bound + len(t.up.cfg.SystemPrompt) + 16)
}

// extendAdmission reserves what the prompt's growth after admission
// (standing rules and recalled memory) may cost beyond what admit
// reserved, so that no cap is passed by text the client did not send.
func (t *turn) extendAdmission(c *hotpath.Call) *codec.Error {
	l := t.ch.cfg.Limits
	if l == nil {
		return nil
	}
	return l.ExtendChat(context.Background(), c.Start, c.User, t.up.Tier, &t.charge, t.inputBound()-t.reservedIn)
}

// admit counts the turn in the key's request windows, takes its concurrency
// slot and reserves the most it can cost against every budget that applies,
// in one step. It runs after routing, so the tier and the clamped
// max_tokens are known.
func (t *turn) admit(ctx *fasthttp.RequestCtx, c *hotpath.Call) *codec.Error {
	if cerr := t.ch.ledgerRefusal(); cerr != nil {
		return cerr
	}
	l := t.ch.cfg.Limits
	if l == nil {
		return nil
	}
	t.reservedIn = t.inputBound()
	l.FillCharge(&t.charge, c.User, t.up.Tier, t.reservedIn, t.intent.MaxTokens)
	st, metered, refusal := l.AdmitChat(context.Background(), c.Start, c.User, &t.charge)
	t.rateShown = true
	if metered {
		setRateHeaders(ctx, st)
	}
	return refusal
}

// ledgerRefusal refuses billable work while the ledger can keep no more
// rows (docs/ledger.md, "Bound"): served, the request's row would be lost
// and it would never be billed. Every billable request passes here at
// admission, before anything is counted or reserved and before the
// upstream is called; what bills nothing (a replay, token counting) does
// not.
func (ch *Chat) ledgerRefusal() *codec.Error {
	if ch.ledger != nil && ch.ledger.Saturated() {
		return errLedgerSaturated
	}
	return nil
}

// claimKey looks the request's Idempotency-Key up before admission: a
// stored answer is replayed without a budget, a concurrency slot or a
// model, and a key in use answers 409. Otherwise the turn claims the key
// (t.claim): a success stores its answer under it, and every other ending,
// an admission refusal included, gives it back, so that a retry runs
// afresh. done says the request is answered, by a replay or by err.
func (t *turn) claimKey(ctx *fasthttp.RequestCtx, c *hotpath.Call, body []byte) (done bool, err error) {
	key := ctx.Request.Header.Peek("Idempotency-Key")
	if len(key) == 0 || !t.wire.replays() || t.req.Stream || t.ch.cfg.Idempotency == nil {
		return false, nil
	}
	if len(key) > maxIdempotencyKey {
		return true, errIdempotencyKeyTooLong
	}
	ictx, cancel := context.WithTimeout(context.Background(), idempotencyTimeout)
	replay, cl, err := t.ch.cfg.Idempotency.Begin(ictx, t.keyID, string(key), requestHash(ctx.Path(), body))
	cancel()
	switch {
	case errors.Is(err, hotpath.ErrIdempotencyInProgress):
		return true, errIdempotencyInProgress
	case errors.Is(err, hotpath.ErrIdempotencyConflict):
		return true, errIdempotencyConflict
	case err != nil:
		t.ch.cfg.Log.Warn("idempotency store unavailable; serving without replay", "request_id", string(t.requestID), "err", err)
	case replay != nil:
		if cerr := t.countReplay(ctx, c); cerr != nil {
			return true, cerr
		}
		writeReplay(ctx, replay)
		return true, nil
	default:
		t.claim = hotpath.Hold(cl, t.ch.cfg.Idempotency.Lease())
	}
	return false, nil
}

// countReplay counts a replay in the key's request windows, as a request
// served (a full window refuses it like any other); it takes no
// concurrency slot and reserves and bills nothing.
func (t *turn) countReplay(ctx *fasthttp.RequestCtx, c *hotpath.Call) *codec.Error {
	l := t.ch.cfg.Limits
	if l == nil {
		return nil
	}
	st, metered, refusal := l.Hit(context.Background(), c.Start, c.User, hotpath.RateRequests)
	t.rateShown = true
	if metered {
		setRateHeaders(ctx, st)
	}
	return refusal
}

// prepare runs everything up to the upstream call and either answers a
// non-streaming request or hands a stream to the stream writer, which then
// owns t.
func (t *turn) prepare(ctx *fasthttp.RequestCtx, c *hotpath.Call) (streaming bool, err error) {
	body := ctx.PostBody()
	if len(body) == 0 {
		return false, errEmptyBody
	}
	if cerr := t.decode(body); cerr != nil {
		return false, cerr
	}
	if t.result != nil && t.req.Stream {
		return false, errTurnStream
	}
	intent, cerr := validateChat(&t.req, t.wire, t.ch.tiers, c.User, c.Version, c.Pinned)
	if cerr != nil {
		return false, cerr
	}
	t.intent = intent
	t.routing.UndeclaredToolReplay = intent.UndeclaredReplay
	t.bound, t.images = promptBound(&t.req), hasImages(&t.req)
	if done, err := t.claimKey(ctx, c, body); done {
		return false, err
	}
	if intent.HasFiles {
		if cerr := t.resolveFiles(c); cerr != nil {
			return false, cerr
		}
	}
	if l := t.ch.cfg.Limits; l != nil && intent.Auto {
		t.poolsLow = l.PoolsLow(context.Background(), c.Start, c.User)
	}
	// A prompt this long may take a while to count: the departure
	// watcher looks at the client meanwhile, and the count stops if it
	// leaves.
	watched := t.bound > watchCountAbove
	if watched {
		t.ch.watch.add(t, ctx.Conn())
	}
	cerr = t.route(c.User)
	if cerr == nil && t.files != nil {
		cerr = t.placeFiles()
	}
	if cerr == nil {
		cerr = t.checkContext()
	}
	if watched {
		t.ch.watch.remove(t)
		if t.departed.Load() {
			return false, codec.ErrClientClosedRequest
		}
	}
	if cerr != nil {
		return false, cerr
	}
	if t.tctx != nil {
		cerr = t.tracedAdmit(ctx, c)
	} else {
		cerr = t.admit(ctx, c)
	}
	if cerr != nil {
		return false, cerr
	}
	if cerr := t.moderateInput(); cerr != nil {
		return false, cerr
	}
	if t.prepareMemory(c) {
		// Only an admitted turn the gate let through reads memory and
		// rules; what they add is prompt, so the window is checked again
		// with it.
		t.bound, t.counted = promptBound(&t.req), false
		if cerr := t.checkContext(); cerr != nil {
			return false, cerr
		}
		if cerr := t.extendAdmission(c); cerr != nil {
			return false, cerr
		}
	}
	t.head = codec.Head{ID: t.newCompletionID(), Created: time.Now().Unix(), Model: t.up.Tier.Name}
	t.gw = codec.AppendGW(t.gw[:0], t.requestID, &t.routing)
	if f := t.memoryFields(); f != nil {
		t.gw = codec.SpliceFields(t.gw, 0, f)
	}

	upReq := fasthttp.AcquireRequest()
	if err := t.buildUpstreamRequest(upReq); err != nil {
		fasthttp.ReleaseRequest(upReq)
		return false, err
	}
	// The upstream joins the client's trace (or the one this request
	// started): its traceparent goes on unchanged, with the client's
	// tracestate when it is within bounds.
	upReq.Header.SetBytesV(headerTraceparent, c.Traceparent())
	if ts := ctx.Request.Header.Peek(headerTracestate); c.TraceFromClient() && len(ts) > 0 && len(ts) <= codec.MaxTracestateLen {
		upReq.Header.SetBytesV(headerTracestate, ts)
	}
	if t.req.Stream {
		t.openStream(ctx, upReq, c)
		return true, nil
	}
	err = t.complete(ctx, upReq)
	fasthttp.ReleaseRequest(upReq)
	return false, err
}

var (
	errEmptyBody           = codec.NewError(codec.CodeInvalidRequest, "The request body is empty; send a JSON chat request.")
	errIdempotencyConflict = codec.NewError(codec.CodeIdempotencyConflict,
		"This Idempotency-Key was used with a different request body.")
	errIdempotencyInProgress = codec.NewError(codec.CodeIdempotencyConflict,
		"A request with this Idempotency-Key is in progress; retry once it has finished.")
	errIdempotencyKeyTooLong = codec.NewError(codec.CodeInvalidRequest,
		"Idempotency-Key: at most 255 bytes.")
	errContextOverflow   = codec.NewError(codec.CodeContextOverflow, "The input exceeds the tier's context window.")
	errModerated         = codec.NewError(codec.CodeModerationRejected, "The input was refused by content moderation.")
	errUpstreamMalformed = codec.NewError(codec.CodeUpstreamError, "The model sent a response the gateway could not read.")
	errStreamStalled     = codec.NewError(codec.CodeUpstreamTimeout, "The model stopped sending before the reply was complete.")
	errStreamBroken      = &codec.Error{Code: codec.CodeUpstreamOverloaded, Message: "The model's stream ended before the reply was complete.",
		Detail: codec.Detail{RetryAfter: defaultRetryAfter}}
	// errCut ends what still ran when shutdown's bound passed (Upstream.Cut).
	errCut = &codec.Error{Code: codec.CodeServerShuttingDown,
		Message: "The gateway shut down before the reply was complete; send the request again.",
		Detail:  codec.Detail{RetryAfter: defaultRetryAfter}}
)

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 255

// idempotencyTimeout bounds one call to the replay store, for a store that
// brings no bound of its own (the Redis store bounds each call at
// storage.RedisCallTimeout, well within it). Its contexts are never
// derived from the fasthttp RequestCtx, which is recycled.
const idempotencyTimeout = 2 * time.Second

// abandon gives a claim back and stores nothing: the request failed, and a
// retry runs afresh.
func abandon(claim hotpath.Claim) {
	if claim != nil {
		ctx, cancel := context.WithTimeout(context.Background(), idempotencyTimeout)
		_ = claim.Abandon(ctx)
		cancel()
	}
}

func (t *turn) newCompletionID() []byte {
	b := append(t.idBuf[:0], t.wire.idPrefix()...)
	var raw [36]byte
	id := hotpath.AppendRequestID(raw[:0], t.start)
	for _, c := range id {
		if c != '-' {
			b = append(b, c)
		}
	}
	return b
}

// upstreamRequest is the body sent upstream: the client's request with the
// upstream model, the tier's system prompt, the clamped budget and the
// gateway's own stream options; gateway-only fields are dropped.
//
// Every field encodes as the OpenAI chat completions API types it: a raw
// JSON value the client sent (content, tool_choice, parameters, schemas)
// is json.RawMessage and goes out as that JSON, never as a []byte, which
// would encode as a base64 string. TestUpstreamContract checks each field
// against the client's request and decodes the body with the OpenAI SDK.
type upstreamRequest struct {
	Model           string                `json:"model"`
	Messages        []codec.Message       `json:"messages"`
	Stream          bool                  `json:"stream,omitempty"`
	StreamOptions   *codec.StreamOptions  `json:"stream_options,omitempty"`
	Temperature     *float64              `json:"temperature,omitempty"`
	TopP            *float64              `json:"top_p,omitempty"`
	MaxTokens       int64                 `json:"max_tokens"`
	ReasoningEffort string                `json:"reasoning_effort,omitempty"`
	Tools           []codec.Tool          `json:"tools,omitempty"`
	ToolChoice      json.RawMessage       `json:"tool_choice,omitempty"`
	ResponseFormat  *codec.ResponseFormat `json:"response_format,omitempty"`
	// ParallelToolCalls is only ever false: true is the upstream's default.
	ParallelToolCalls *bool `json:"parallel_tool_calls,omitempty"`
}

// serialToolCalls is the parallel_tool_calls: false sent upstream.
var serialToolCalls = new(bool)

var includeUsage = &codec.StreamOptions{IncludeUsage: true}

func (t *turn) buildUpstreamRequest(r *fasthttp.Request) error {
	up := t.up
	msgs := t.req.Messages
	if up.cfg.SystemPrompt != "" {
		sys := codec.Message{Role: "system", Content: strconv.AppendQuote(nil, up.cfg.SystemPrompt)}
		msgs = append(append(make([]codec.Message, 0, len(msgs)+1), sys), msgs...)
	}
	t.upBody = upstreamRequest{
		Model: up.cfg.Model, Messages: msgs, Stream: t.req.Stream, Temperature: t.req.Temperature, TopP: t.req.TopP,
		MaxTokens: t.intent.MaxTokens, Tools: t.req.Tools, ResponseFormat: t.req.ResponseFormat,
	}
	if tc := trimJSONSpace(t.req.ToolChoice); len(tc) > 0 && !isJSONNull(tc) && len(t.req.Tools) > 0 {
		// Without tools the only valid choices, none and auto, mean what
		// no tool_choice means, and OpenAI refuses a tool_choice without
		// tools; null is no choice.
		t.upBody.ToolChoice = tc
	}
	if p := t.req.ParallelToolCalls; p != nil && !*p && len(t.req.Tools) > 0 {
		// OpenAI refuses parallel_tool_calls without tools, where it
		// means nothing.
		t.upBody.ParallelToolCalls = serialToolCalls
	}
	if t.req.Stream {
		t.upBody.StreamOptions = includeUsage
	}
	if up.cfg.Reasons {
		t.upBody.ReasoningEffort = t.routing.Effort
	}
	// The body is encoded into the request's own pooled buffer, through
	// the turn's fields: the encoder's scratch buffer and the copy
	// sonic.Marshal returns, the body and its slice escaping to the heap
	// were four allocations and a copy of the body per request.
	t.upBuf = r.SwapBody(nil)[:0]
	err := encoder.EncodeInto(&t.upBuf, &t.upBody, 0)
	r.SwapBody(t.upBuf)
	t.upBuf = nil
	if err != nil {
		return fmt.Errorf("cannot encode upstream request: %w", err)
	}
	r.SetRequestURI(up.url)
	r.Header.SetMethod(fasthttp.MethodPost)
	r.Header.SetContentType("application/json")
	if up.auth != "" {
		r.Header.Set("Authorization", up.auth)
	}
	return nil
}

// attempt is the outcome of one upstream call.
type attempt uint8

const (
	attemptOK attempt = iota
	attemptRetry
	attemptFinal
)

// verdict is what one upstream attempt says.
type verdict struct {
	outcome attempt
	err     *codec.Error
	// wait is the upstream's Retry-After; 0 when it sent none.
	wait time.Duration
	// failed tells an attempt that failed on the tier's account: it counts
	// against the tier's breaker.
	failed bool
}

// classify decides what an upstream answer means. It consumes and never
// shows the upstream's error body.
func (t *turn) classify(resp *fasthttp.Response, err error) verdict {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return verdict{outcome: attemptFinal, err: t.upstreamOversize("body", t.up.cfg.MaxResponseBytes), failed: true}
	}
	if errors.Is(err, fasthttp.ErrNoFreeConns) {
		// Our own connection cap, not the upstream's health.
		return verdict{outcome: attemptRetry, err: errOverloaded}
	}
	if err != nil {
		if isTimeout(err) {
			// A deadline passed (or a stream's first byte never came):
			// answered at once, never retried.
			return verdict{outcome: attemptFinal, err: codec.ErrUpstreamTimeout, failed: true}
		}
		return verdict{outcome: attemptRetry, err: errModelUnavailable, failed: true}
	}
	status := resp.StatusCode()
	switch {
	case status == fasthttp.StatusOK:
		return verdict{outcome: attemptOK}
	case status == fasthttp.StatusTooManyRequests:
		// The upstream is busy, not broken: no breaker failure.
		return verdict{outcome: attemptRetry, err: errOverloaded, wait: upstreamRetryAfter(resp)}
	case status >= 500:
		return verdict{outcome: attemptRetry, err: errOverloaded, wait: upstreamRetryAfter(resp), failed: true}
	case status == fasthttp.StatusBadRequest || status == fasthttp.StatusUnprocessableEntity:
		b := resp.Body()
		switch {
		case bytes.Contains(b, []byte("context_length")):
			return verdict{outcome: attemptFinal, err: errContextOverflow}
		case bytes.Contains(b, []byte("content_filter")) || bytes.Contains(b, []byte("content_policy")):
			return verdict{outcome: attemptFinal, err: errModerated}
		}
	}
	// The upstream refused what the gateway sent: a gateway defect or a
	// misconfigured binding, not the tier's health and not the client's
	// input (validation refused that already). Counted, and logged with
	// the error's code and param, never its message, which may quote
	// content.
	t.up.meter.refused.Inc()
	b := resp.Body()
	code, _ := sonic.Get(b, "error", "code")
	param, _ := sonic.Get(b, "error", "param")
	codeText, _ := code.Raw()
	paramText, _ := param.Raw()
	t.ch.cfg.Log.Error("upstream refused the request", "request_id", string(t.requestID), "tier", t.up.Tier.Name,
		"status", status, "upstream_code", codeText, "upstream_param", paramText)
	return verdict{outcome: attemptFinal, err: errModelUnavailable}
}

// call makes the upstream call with bounded retries and backoff, none of
// them past deadline, and reports the request's outcome to the tier's
// breaker once. It returns with resp holding a 200 response.
func (t *turn) call(client *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) *codec.Error {
	return t.exchange(client, req, resp, deadline, true)
}

// exchange is call; with judge false a 200 is not reported to the breaker,
// because the caller reads the body before it knows whether the tier
// served the request.
//
// Retries: an attempt that failed before anything reached the client is
// retried up to the tier's Retries, after an exponential backoff with
// jitter, or after the upstream's Retry-After when it sent a longer one. A
// Retry-After longer than MaxRetryWait, or one that would end past the
// deadline, ends the request at once with it (bounded) as the answer's
// Retry-After. The gateway's own retries of one request are one request
// to the breaker; a breaker that is no longer closed (this request is its
// probe, or another request opened it) ends the retries. An attempt is
// one call of doFresh: a pooled connection the upstream had closed is
// neither an attempt nor a failure of the tier.
func (t *turn) exchange(client *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, judge bool) *codec.Error {
	up := t.up
	br := up.Breaker
	backoff := up.cfg.Backoff
	for i := 0; ; i++ {
		var sp trace.Span
		if t.tctx != nil {
			sp = t.startUpstream(req, i)
		}
		began := time.Now()
		redialled, err := doFresh(client, req, resp, deadline)
		t.upstream += time.Since(began)
		if redialled {
			t.ch.m.redials.Inc()
		}
		v := t.classify(resp, err)
		if sp != nil {
			endUpstream(sp, resp, err, v)
		}
		if v.outcome != attemptOK && up.cut() {
			// Shutdown cut it: not the tier's failure, and not retried.
			_ = resp.CloseBodyStream()
			return errCut
		}
		if v.outcome == attemptOK {
			if judge {
				br.Success()
			}
			return nil
		}
		wait := max(backoff+time.Duration(rand.Int64N(int64(backoff)+1)), v.wait)
		backoff *= 2
		closed := br.State() == hotpath.BreakerClosed
		if v.outcome == attemptRetry && i < up.cfg.Retries && v.wait <= up.cfg.MaxRetryWait &&
			!time.Now().Add(wait).After(deadline) && closed {
			t.ch.m.retries.Inc()
			_ = resp.CloseBodyStream()
			time.Sleep(wait)
			continue
		}
		if v.failed {
			br.FailureOf(requestKey(req))
		} else if err == nil && !closed {
			// The tier answered, if not with a reply (a 429, a 4xx):
			// not its failure, and as a probe's answer it shows the
			// tier is back, as a reply would.
			br.Success()
			closed = true
		}
		if v.outcome == attemptRetry && !closed {
			// It would have been tried again, but the tier is now
			// refused. A final answer (a deadline that passed, above
			// all) stays this request's own.
			return unavailableFor(br.RetryAfter())
		}
		return t.retryAfter(v.err, v.wait)
	}
}

// retryAfter is cerr with the Retry-After a 503 carries: the upstream's
// own or the breaker's remaining cooldown, whichever is longer.
func (t *turn) retryAfter(cerr *codec.Error, upstream time.Duration) *codec.Error {
	switch cerr {
	case errModelUnavailable:
		return unavailableFor(max(upstream, t.up.Breaker.RetryAfter()))
	case errOverloaded:
		return overloadedFor(max(upstream, t.up.Breaker.RetryAfter()))
	}
	return cerr // a 503 of its own (an oversized answer) carries its own
}

// complete serves a non-streaming request: one upstream exchange (with
// retries before anything is answered), then the wire's completion body.
func (t *turn) complete(ctx *fasthttp.RequestCtx, req *fasthttp.Request) error {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if cerr := t.exchange(t.up.plain, req, resp, time.Now().Add(t.up.Tier.Deadline), false); cerr != nil {
		return cerr
	}
	var c codec.Completion
	if err := codec.ParseCompletion(resp.Body(), &c); err != nil || c.Error != nil {
		// An unreadable answer is an upstream failure like a 5xx; nothing
		// reached the client, so it is answered in the 503 family.
		t.up.Breaker.FailureOf(requestKey(req))
		return t.retryAfter(errOverloaded, 0)
	}
	t.up.Breaker.Success()
	t.answer = codec.Answer{Content: c.Content, ToolCalls: c.ToolCalls, Finish: finishReason(c.FinishReason, c.ToolCalls != nil)}
	t.reasoningTokens = c.Usage.ReasoningTokens
	if (t.wire == chatV2 || t.wire == chatAnthropic && t.thinking) && t.reasons() {
		t.answer.Reasoning = c.Reasoning
	}
	t.settleBill(&c.Usage, c.HasUsage, c.Content, c.Reasoning)
	if t.upstream >= departureEvery && t.result == nil && leftDuring(ctx.Conn()) {
		// The answer took long enough for its client to leave, and it
		// did: it is answered nothing and billed as a stream whose
		// client left before its first token, for its prompt only. A
		// quicker answer is not looked for: one peek per request costs
		// more than the rare answer written to a closed connection.
		t.bill.OutputTokens = 0
		t.bill.AmountPico = meter.Cost(&t.up.Tier.Prices, t.bill.InputTokens, t.bill.CacheReadTokens, 0)
		return codec.ErrClientClosedRequest
	}
	if r := t.result; r != nil {
		text, _ := unquote(c.Content)
		r.Content, r.Finish = string(text), t.answer.Finish
		r.ToolCalls = append([]byte(nil), c.ToolCalls...)
	}
	if cerr := t.checkStructured(c.Content); cerr != nil {
		return cerr // billed, and a retry may pass: nothing is stored
	}
	var captured []byte
	if t.mem != nil {
		t.mem.keepAnswer(c.Content)
		t.startCapture()
		if captured = t.captureField(); captured != nil && t.wire == chatV1 {
			t.gw = codec.SpliceFields(t.gw, 0, captured)
		}
	}
	t.out = t.out[:0]
	switch t.wire {
	case chatV1:
		t.out = codec.AppendV1Completion(t.out, &t.head, &t.answer, &t.bill, t.gw)
	case chatV2:
		t.out = codec.AppendV2Completion(t.out, &t.head, &t.answer, &t.bill, t.requestID, &t.routing)
		if t.mem != nil {
			t.out = codec.SpliceFields(t.out, 0, append(t.memoryFields(), captured...))
		}
	case chatAnthropic:
		t.out = codec.AppendAnthropicMessage(t.out, &t.head, &t.answer, t.thinking, &t.bill)
	case chatResponses:
		t.out = t.appendResponse(t.out)
	default:
		t.out = codec.AppendOpenAICompletion(t.out, &t.head, &t.answer, &t.bill)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(t.out)
	elapsed := time.Since(t.start)
	// The answer's first content token goes out with the whole answer: its
	// time to first token is now (docs/ledger.md, ttft_us).
	if t.answer.Content != nil || t.answer.Reasoning != nil || t.answer.ToolCalls != nil {
		t.ttft = elapsed
	}
	overhead := elapsed - t.upstream
	var ms [24]byte
	ctx.Response.Header.SetBytesV("Gateway-Overhead-Ms", codec.AppendDecimal(ms[:0], overhead.Microseconds(), 3))
	t.ch.m.overhead.Update(overhead.Seconds())
	if t.claim != nil {
		cctx, cancel := context.WithTimeout(context.Background(), idempotencyTimeout)
		err := t.claim.Complete(cctx, hotpath.Replay{Status: fasthttp.StatusOK, Body: append([]byte(nil), t.out...),
			Headers: [][2]string{{"Content-Type", "application/json"}}})
		cancel()
		t.claim = nil // stored (or the store failed): nothing to give back
		if err != nil {
			t.ch.cfg.Log.Warn("cannot store idempotent replay", "request_id", string(t.requestID), "err", err)
		}
	}
	return nil
}

func writeReplay(ctx *fasthttp.RequestCtx, r *hotpath.Replay) {
	for _, h := range r.Headers {
		ctx.Response.Header.Set(h[0], h[1])
	}
	ctx.Response.Header.Set("Idempotent-Replayed", "true")
	ctx.SetStatusCode(r.Status)
	ctx.SetBody(r.Body)
}

// finishReason maps the upstream's finish reason to the four the spec
// allows.
func finishReason(raw []byte, calledTools bool) string {
	switch string(raw) {
	case "length":
		return "length"
	case "content_filter":
		return "content_filter"
	case "tool_calls", "function_call":
		return "tool_calls"
	}
	if calledTools {
		return "tool_calls"
	}
	return "stop"
}

func (t *turn) checkStructured(content []byte) *codec.Error {
	if t.intent.Schema == nil && !t.intent.JSONObject {
		return nil
	}
	text, ok := unquote(content)
	if !ok {
		text = nil
	}
	if t.intent.Schema != nil {
		return t.intent.Schema.Check(text)
	}
	return checkJSONObject(text)
}

// unquote decodes a raw JSON string literal.
func unquote(raw []byte) ([]byte, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	var s string
	if err := sonic.Unmarshal(raw, &s); err != nil {
		return nil, false
	}
	return []byte(s), true
}

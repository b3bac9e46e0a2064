package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// AuxConfig binds the auxiliary tiers (embeddings, rerank, the guard) to
// their upstreams. Their routes go through chat's machinery: the same edge,
// admission, retries, breaker, deadline, error mapping and ledger row.
type AuxConfig struct {
	// Embed, Rerank and Guard are the tiers' upstreams, each bound to its
	// hotpath.Tier (DefaultAuxTiers). A nil upstream leaves its routes out.
	Embed, Rerank, Guard *Upstream
	// RerankShape is the rerank upstream's wire: "cohere" (Cohere, Jina
	// and the simulator: {model, query, documents} answered
	// {results:[{index, relevance_score}]}) or "tei" (Hugging Face
	// text-embeddings-inference: {query, texts} answered
	// [{index, score}]). Default "cohere".
	RerankShape string
	// GuardConcurrency bounds the guard calls one moderation request has
	// in flight at once. Default 8.
	GuardConcurrency int
	// EmbedMaxDimensions is the largest dimensions the embed upstream's
	// model takes. Default 4096, the simulator's bound.
	EmbedMaxDimensions int
}

// Validate checks the shape and fills in defaults.
func (c *AuxConfig) Validate() error {
	switch c.RerankShape {
	case "":
		c.RerankShape = RerankCohere
	case RerankCohere, RerankTEI:
	default:
		return fmt.Errorf("rerank_shape: %q is not cohere or tei", c.RerankShape)
	}
	if c.GuardConcurrency == 0 {
		c.GuardConcurrency = 8
	}
	if c.GuardConcurrency < 0 {
		return fmt.Errorf("guard_concurrency: must not be negative")
	}
	if c.EmbedMaxDimensions == 0 {
		c.EmbedMaxDimensions = DefaultEmbedMaxDimensions
	}
	if c.EmbedMaxDimensions < 0 {
		return fmt.Errorf("embed_max_dimensions: must not be negative")
	}
	return nil
}

// DefaultEmbedMaxDimensions is the largest embedding the embed tier is
// assumed to make when aux.embed_max_dimensions is not set: the
// simulator's.
const DefaultEmbedMaxDimensions = 4096

// The rerank wires.
const (
	RerankCohere = "cohere"
	RerankTEI    = "tei"
)

// Bounds of the specialised routes (spec: Limits).
const (
	auxMaxInputs = 512
	auxMaxBody   = 64 << 10
)

var (
	errAuxBody = &codec.Error{Code: codec.CodeInvalidRequest,
		Message: "The request body is over 65536 bytes, the bound of this route.", Detail: codec.Detail{Bound: "body_bytes"}}
	errAuxInputs = &codec.Error{Code: codec.CodeInvalidRequest,
		Message: "input: at most 512 inputs per request.", Detail: codec.Detail{Bound: "inputs"}}
	errAuxDocuments = &codec.Error{Code: codec.CodeInvalidRequest,
		Message: "documents: at most 512 documents per request.", Detail: codec.Detail{Bound: "inputs"}}
	errAuxInput    = invalidRequest("input: required, a string or a non-empty array of strings.")
	errAuxQuery    = invalidRequest("query: required, a non-empty string.")
	errAuxDocs     = invalidRequest("documents: required, a non-empty array of strings.")
	errAuxEncoding = invalidRequest("encoding_format: must be float or base64.")
)

// auxRoute is one specialised route.
type auxRoute uint8

const (
	auxEmbed auxRoute = iota
	auxRerank
	auxModerate
)

func (r auxRoute) tier() string {
	switch r {
	case auxEmbed:
		return hotpath.TierEmbed
	case auxRerank:
		return hotpath.TierRerank
	}
	return hotpath.TierGuard
}

// errAuxModel is the refusal of a model other than the route's own tier.
var errAuxModel = [3]*codec.Error{
	invalidRequest("model: must be " + hotpath.TierEmbed + " on this route."),
	invalidRequest("model: must be " + hotpath.TierRerank + " on this route."),
	invalidRequest("model: must be " + hotpath.TierGuard + " on this route."),
}

func (ch *Chat) auxUpstream(r auxRoute) *Upstream {
	switch r {
	case auxEmbed:
		return ch.cfg.Aux.Embed
	case auxRerank:
		return ch.cfg.Aux.Rerank
	}
	return ch.cfg.Aux.Guard
}

// auxUps returns the bound auxiliary upstreams.
func (ch *Chat) auxUps() []*Upstream {
	var out []*Upstream
	for _, up := range []*Upstream{ch.cfg.Aux.Embed, ch.cfg.Aux.Rerank, ch.cfg.Aux.Guard} {
		if up != nil {
			out = append(out, up)
		}
	}
	return out
}

// registerAux adds the specialised routes whose tiers are bound.
func (ch *Chat) registerAux(rt *Router) {
	a := hotpath.Access{Auth: hotpath.AuthUser, Billable: true, Rate: hotpath.RateByHandler}
	route := func(r auxRoute, openai bool) func(*fasthttp.RequestCtx, *hotpath.Call) error {
		return func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error { return ch.serveAux(ctx, c, r, openai) }
	}
	if ch.cfg.Aux.Embed != nil {
		a.Family, a.Name = hotpath.FamilyEmbeddings, "embeddings"
		rt.Handle(fasthttp.MethodPost, "/api/v1/embeddings", a, route(auxEmbed, false))
		a.Name = "embeddings_openai"
		rt.HandleOnly(fasthttp.MethodPost, "/v1/embeddings", a, route(auxEmbed, true))
	}
	if ch.cfg.Aux.Rerank != nil {
		a.Family, a.Name = hotpath.FamilyRerank, "rerank"
		rt.Handle(fasthttp.MethodPost, "/api/v1/rerank", a, route(auxRerank, false))
	}
	if ch.cfg.Aux.Guard != nil {
		a.Family, a.Name = hotpath.FamilyModeration, "moderations"
		rt.Handle(fasthttp.MethodPost, "/api/v1/moderations", a, route(auxModerate, false))
		a.Name = "moderations_openai"
		rt.HandleOnly(fasthttp.MethodPost, "/v1/moderations", a, route(auxModerate, true))
	}
}

// auxRequest is the union of the three routes' request bodies. Fields a
// route does not read are ignored, as OpenAI clients send extras (user).
type auxRequest struct {
	Model          string                 `json:"model"`
	Input          sonic.NoCopyRawMessage `json:"input"`
	EncodingFormat *string                `json:"encoding_format"`
	Dimensions     *int64                 `json:"dimensions"`
	Query          *string                `json:"query"`
	Documents      sonic.NoCopyRawMessage `json:"documents"`
	TopN           *int64                 `json:"top_n"`
}

// auxCall is one specialised request's state.
type auxCall struct {
	ch     *Chat
	up     *Upstream
	route  auxRoute
	openai bool
	req    auxRequest
	inputs []string
	topN   int
	rid    []byte
	// tctx carries the request's edge span when tracing is on; nil
	// otherwise.
	tctx context.Context

	// Room for the inputs, vectors and scores of a small request, so
	// that it does not allocate them.
	inBuf     [8]string
	vecs      codec.Embeddings
	vecBuf    [8][]byte
	scoreBuf  [8]codec.RerankScore
	charge    meter.Charge
	rateShown bool
	chosen    bool // the body named the route's tier: the row carries it
	billed    bool
	in, out   int64
	costPico  int64
}

// serveAux serves one embeddings, rerank or moderation request: validate
// (bounds first), check the tier's breaker, admit against the request
// windows and budgets, call the upstream with chat's retries and error
// mapping, answer, and fill the ledger row the edge records.
func (ch *Chat) serveAux(ctx *fasthttp.RequestCtx, c *hotpath.Call, r auxRoute, openai bool) (err error) {
	a := &auxCall{ch: ch, up: ch.auxUpstream(r), route: r, openai: openai, rid: c.ID()}
	if ch.cfg.Tracer != nil {
		a.tctx = c.TraceCtx
	}
	defer func() {
		if err != nil && !a.rateShown {
			ch.peekRate(ctx, c, err)
		}
		a.account(&c.Usage)
		if l := ch.cfg.Limits; l != nil {
			l.FinishChat(&a.charge, a.billed, a.costPico, a.in+a.out)
		}
	}()
	if cerr := a.validate(ctx.PostBody()); cerr != nil {
		return cerr
	}
	a.chosen = true
	if !a.up.Breaker.Allow() {
		return unavailableFor(a.up.Breaker.RetryAfter())
	}
	if cerr := a.admit(ctx, c); cerr != nil {
		return cerr
	}
	switch r {
	case auxEmbed:
		return a.embed(ctx)
	case auxRerank:
		return a.rerank(ctx)
	}
	return a.moderate(ctx)
}

// account fills the route's side of the ledger row. A request refused
// before its body was read as valid chose no tier, as on chat.
func (a *auxCall) account(u *hotpath.UsageRecord) {
	if a.chosen {
		u.Tier = a.up.Tier.Name
	}
	u.Billed = a.billed
	if a.billed {
		u.InputTokens, u.OutputTokens, u.CostPico = a.in, a.out, a.costPico
		u.WeightedTokens = a.charge.Weighted(a.in + a.out)
	}
}

// validate checks the body against the route's rules, bounds first, so
// that nothing is decoded past them.
func (a *auxCall) validate(body []byte) *codec.Error {
	if len(body) > auxMaxBody {
		return errAuxBody
	}
	if len(body) == 0 {
		return errEmptyBody
	}
	if cerr := codec.DecodeRequest(body, &a.req); cerr != nil {
		return cerr
	}
	if a.req.Model != a.route.tier() {
		return errAuxModel[a.route]
	}
	switch a.route {
	case auxRerank:
		if a.req.Query == nil || *a.req.Query == "" {
			return errAuxQuery
		}
		docs, cerr := stringList(a.inBuf[:0], a.req.Documents, "documents", errAuxDocs, errAuxDocuments)
		if cerr != nil {
			return cerr
		}
		a.inputs, a.topN = docs, len(docs)
		if n := a.req.TopN; n != nil {
			if *n < 1 || *n > int64(len(docs)) {
				return invalidRequest("top_n: must be from 1 to the number of documents (" + strconv.Itoa(len(docs)) + ").")
			}
			a.topN = int(*n)
		}
		return a.rerankWindow()
	case auxEmbed:
		if f := a.req.EncodingFormat; f != nil && *f != "float" && *f != "base64" {
			return errAuxEncoding
		}
		// The upstream refuses a length its model does not make; refused
		// here, the caller reads its own mistake, not a 503 to retry.
		if d, m := a.req.Dimensions, a.ch.cfg.Aux.EmbedMaxDimensions; d != nil && (*d < 1 || *d > int64(m)) {
			return invalidRequest("dimensions: must be from 1 to " + strconv.Itoa(m) + ".")
		}
	}
	in, cerr := stringList(a.inBuf[:0], a.req.Input, "input", errAuxInput, errAuxInputs)
	if cerr != nil {
		return cerr
	}
	a.inputs = in
	if a.route == auxEmbed {
		for i, s := range in {
			if s == "" {
				return invalidRequest("input[" + strconv.Itoa(i) + "]: must not be empty.")
			}
		}
	}
	// One input must fit the tier's window. Every token is at least a
	// byte, so only an input longer than the window in bytes is counted.
	w := a.up.Tier.ContextWindow
	for i, s := range in {
		if len(s) > w && tokens.CountLimit(s, w) > w {
			return a.overflow("input[" + strconv.Itoa(i) + "]: ")
		}
	}
	return nil
}

// rerankWindow checks the query with each document against the tier's
// window: a rerank model reads the two as one input, and refuses a pair
// over its window (text-embeddings-inference answers 413). Every token is
// at least a byte, so the query is counted only when a pair is longer
// than the window in bytes.
func (a *auxCall) rerankWindow() *codec.Error {
	w, q := a.up.Tier.ContextWindow, *a.req.Query
	qt := -1
	for i, d := range a.inputs {
		if len(q)+len(d) <= w {
			continue
		}
		if qt < 0 {
			if qt = tokens.CountLimit(q, w); qt > w {
				return a.overflow("query: ")
			}
		}
		if tokens.CountLimit(d, w-qt) > w-qt {
			return a.overflow("documents[" + strconv.Itoa(i) + "]: with the query, ")
		}
	}
	return nil
}

// overflow is the context_overflow of the input named by field.
func (a *auxCall) overflow(field string) *codec.Error {
	return &codec.Error{Code: codec.CodeContextOverflow,
		Message: field + "over the " + strconv.Itoa(a.up.Tier.ContextWindow) + "-token window of " + a.up.Tier.Name + "."}
}

// stringList reads a string or an array of 1 to auxMaxInputs strings into
// dst. The strings are views of raw (which the request body keeps alive for
// the request), not copies, unless they hold escapes.
func stringList(dst []string, raw []byte, field string, missing, tooMany *codec.Error) ([]string, *codec.Error) {
	raw = trimJSONSpace(raw)
	if len(raw) == 0 || isJSONNull(raw) {
		return nil, missing
	}
	if raw[0] == '"' {
		if field == "documents" {
			return nil, missing
		}
		var s string
		if err := sonic.UnmarshalString(codec.BytesView(raw), &s); err != nil {
			return nil, missing
		}
		return append(dst, s), nil
	}
	if raw[0] != '[' {
		return nil, missing
	}
	// The common case in one pass; anything it refuses is read again
	// item by item, to name the item. It reads a null item as "", so a
	// list with an empty string is read again too, to tell the two apart.
	out := dst[:0]
	if sonic.UnmarshalString(codec.BytesView(raw), &out) == nil && !slices.Contains(out, "") {
		switch {
		case len(out) == 0:
			return nil, missing
		case len(out) > auxMaxInputs:
			return nil, tooMany
		}
		return out, nil
	}
	var items []json.RawMessage
	if err := sonic.Unmarshal(raw, &items); err != nil {
		return nil, missing
	}
	if len(items) == 0 {
		return nil, missing
	}
	if len(items) > auxMaxInputs {
		return nil, tooMany
	}
	out = make([]string, len(items))
	for i, it := range items {
		it = trimJSONSpace(it)
		if len(it) == 0 || it[0] != '"' || sonic.Unmarshal(it, &out[i]) != nil {
			return nil, invalidRequest(field + "[" + strconv.Itoa(i) + "]: must be a string.")
		}
	}
	return out, nil
}

// admit counts the request in the key's windows and reserves its largest
// cost: its text in bytes (at least its tokens) at the tier's prices, and
// for the guard the verdict tokens of every input.
func (a *auxCall) admit(ctx *fasthttp.RequestCtx, c *hotpath.Call) *codec.Error {
	if cerr := a.ch.ledgerRefusal(); cerr != nil {
		return cerr
	}
	l := a.ch.cfg.Limits
	if l == nil {
		return nil
	}
	var in, out int64
	for _, s := range a.inputs {
		in += int64(len(s)) + 8
	}
	if a.route == auxRerank {
		in += int64(len(*a.req.Query))
	}
	if a.route == auxModerate {
		out = int64(a.up.Tier.MaxOutput) * int64(len(a.inputs))
	}
	l.FillAuxCharge(&a.charge, c.User, a.up.Tier, in, out, a.route == auxModerate)
	st, metered, refusal := l.AdmitAux(context.Background(), c.Start, c.User, &a.charge)
	a.rateShown = true
	if metered {
		setRateHeaders(ctx, st)
	}
	return refusal
}

// bill settles the request at the tier's prices.
func (a *auxCall) bill(in, out int64) {
	a.in, a.out, a.billed = in, out, true
	a.costPico = meter.Cost(&a.up.Tier.Prices, in, 0, out)
}

// appendGW appends the gw block of the embeddings and rerank answers:
// the request id and the cost.
func (a *auxCall) appendGW(dst []byte) []byte {
	p := &a.up.Tier.Prices
	b := codec.Bill{Tier: a.up.Tier.Name, InputTokens: a.in, OutputTokens: a.out, InputPerM: p.InputPerM,
		OutputPerM: p.OutputPerM, CacheReadPerM: p.CacheReadPerM, AmountPico: a.costPico}
	dst = append(dst, `,"gw":{"request_id":`...)
	dst = codec.AppendJSONBytes(dst, a.rid)
	dst = append(dst, `,"cost":`...)
	dst = codec.AppendCost(dst, &b)
	return append(dst, '}')
}

// exchange makes one upstream call with chat's retries, breaker and
// deadline (turn.exchange), reporting success to the breaker only once
// the caller has read the answer (a.judge).
func (a *auxCall) exchange(req *fasthttp.Request, resp *fasthttp.Response) *codec.Error {
	t := acquireTurn()
	t.ch, t.up = a.ch, a.up
	t.requestID = append(t.requestID, a.rid...)
	t.tctx = a.tctx
	cerr := t.exchange(a.up.plain, req, resp, time.Now().Add(a.up.Tier.Deadline), false)
	releaseTurn(t)
	return cerr
}

// unreadable answers an upstream reply the gateway cannot read: a
// failure of the tier like a 5xx, answered 503 upstream_overloaded.
func (a *auxCall) unreadable(req *fasthttp.Request) *codec.Error {
	a.up.Breaker.FailureOf(requestKey(req))
	return overloadedFor(a.up.Breaker.RetryAfter())
}

func (a *auxCall) newRequest(body []byte) *fasthttp.Request { return a.up.newRequest(body) }

// newRequest is a POST of body to the upstream, which the caller keeps
// unchanged until it releases the request: the one request builder of the
// specialised routes and of their status probes.
func (u *Upstream) newRequest(body []byte) *fasthttp.Request {
	r := fasthttp.AcquireRequest()
	r.SetRequestURI(u.url)
	r.Header.SetMethod(fasthttp.MethodPost)
	r.Header.SetContentType("application/json")
	if u.auth != "" {
		r.Header.Set("Authorization", u.auth)
	}
	r.SetBodyRaw(body)
	return r
}

// auxBody returns the response's own pooled buffer, emptied, with room
// for n bytes: an answer is built in it and handed back by writeAux, so
// that it allocates nothing once the pool is warm.
func auxBody(ctx *fasthttp.RequestCtx, n int) []byte {
	return slices.Grow(ctx.Response.SwapBody(nil)[:0], n)
}

// writeAux answers body, built in auxBody's buffer.
func writeAux(ctx *fasthttp.RequestCtx, body []byte) error {
	ctx.SetContentType("application/json")
	ctx.Response.SwapBody(body)
	return nil
}

// --- embeddings

// appendEmbedRequest appends the upstream embeddings request of inputs.
func appendEmbedRequest(dst []byte, model string, inputs []string, format string, dims int64) []byte {
	dst = append(dst, `{"model":`...)
	dst = codec.AppendJSONString(dst, model)
	dst = append(dst, `,"input":`...)
	dst = appendStrings(dst, inputs)
	if format != "" {
		dst = append(dst, `,"encoding_format":`...)
		dst = codec.AppendJSONString(dst, format)
	}
	if dims != 0 {
		dst = append(dst, `,"dimensions":`...)
		dst = strconv.AppendInt(dst, dims, 10)
	}
	return append(dst, '}')
}

// appendStrings appends ss as a JSON array of strings.
func appendStrings(dst []byte, ss []string) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = codec.AppendJSONString(dst, s)
	}
	return append(dst, ']')
}

func (a *auxCall) embed(ctx *fasthttp.RequestCtx) error {
	var format string
	var dims int64
	if f := a.req.EncodingFormat; f != nil {
		format = *f
	}
	if d := a.req.Dimensions; d != nil {
		dims = *d
	}
	req := a.newRequest(nil)
	defer fasthttp.ReleaseRequest(req)
	b := req.SwapBody(nil)[:0]
	req.SwapBody(appendEmbedRequest(b, a.up.cfg.Model, a.inputs, format, dims))
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if cerr := a.exchange(req, resp); cerr != nil {
		return cerr
	}
	// The vectors are scanned in place and copied out verbatim: never
	// decoded, never encoded again.
	e := &a.vecs
	e.Vectors = a.vecBuf[:0]
	if !codec.ParseEmbeddings(resp.Body(), len(a.inputs), format == "base64", e) {
		return a.unreadable(req)
	}
	a.up.Breaker.Success()
	var in int64
	if e.PromptTokens > 0 {
		in = e.PromptTokens
	} else {
		for _, s := range a.inputs {
			in += int64(tokens.Count(s))
		}
	}
	a.bill(in, 0)

	out := auxBody(ctx, len(resp.Body())+256)
	out = append(out, `{"object":"list","model":`...)
	out = codec.AppendJSONString(out, a.up.Tier.Name)
	out = append(out, `,"data":[`...)
	for i, v := range e.Vectors {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"object":"embedding","index":`...)
		out = strconv.AppendInt(out, int64(i), 10)
		out = append(out, `,"embedding":`...)
		out = append(out, v...)
		out = append(out, '}')
	}
	out = append(out, `],"usage":{"prompt_tokens":`...)
	out = strconv.AppendInt(out, in, 10)
	out = append(out, `,"total_tokens":`...)
	out = strconv.AppendInt(out, in, 10)
	out = append(out, '}')
	if !a.openai {
		out = a.appendGW(out)
	}
	out = append(out, '}')
	return writeAux(ctx, out)
}

// --- rerank

// appendRerankRequest appends the upstream rerank request in the tier's
// wire: text-embeddings-inference's {query, texts} with tei, else
// Cohere's {model, query, documents}.
func appendRerankRequest(dst []byte, tei bool, model, query string, docs []string) []byte {
	if tei {
		dst = append(dst, `{"query":`...)
		dst = codec.AppendJSONString(dst, query)
		dst = append(dst, `,"texts":`...)
		dst = appendStrings(dst, docs)
		return append(dst, `,"raw_scores":false,"return_text":false}`...)
	}
	dst = append(dst, `{"model":`...)
	dst = codec.AppendJSONString(dst, model)
	dst = append(dst, `,"query":`...)
	dst = codec.AppendJSONString(dst, query)
	dst = append(dst, `,"documents":`...)
	dst = appendStrings(dst, docs)
	return append(dst, '}')
}

func (a *auxCall) rerank(ctx *fasthttp.RequestCtx) error {
	tei := a.ch.cfg.Aux.RerankShape == RerankTEI
	// Every document is scored upstream and the cut to top_n is made
	// here, so that ties at the cut fall by index whatever the upstream
	// does with them.
	req := a.newRequest(nil)
	defer fasthttp.ReleaseRequest(req)
	b := req.SwapBody(nil)[:0]
	req.SwapBody(appendRerankRequest(b, tei, a.up.cfg.Model, *a.req.Query, a.inputs))
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if cerr := a.exchange(req, resp); cerr != nil {
		return cerr
	}
	ranked, usage, ok := codec.ParseRerank(resp.Body(), len(a.inputs), tei, a.scoreBuf[:0])
	if !ok {
		return a.unreadable(req)
	}
	a.up.Breaker.Success()
	slices.SortFunc(ranked, func(x, y codec.RerankScore) int {
		switch {
		case x.Score > y.Score:
			return -1
		case x.Score < y.Score:
			return 1
		}
		return x.Index - y.Index
	})
	if usage <= 0 {
		usage = int64(tokens.Count(*a.req.Query))
		for _, d := range a.inputs {
			usage += int64(tokens.Count(d))
		}
	}
	a.bill(usage, 0)

	out := auxBody(ctx, 128+a.topN*48)
	out = append(out, `{"model":`...)
	out = codec.AppendJSONString(out, a.up.Tier.Name)
	out = append(out, `,"results":[`...)
	for i, r := range ranked[:a.topN] {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"index":`...)
		out = strconv.AppendInt(out, int64(r.Index), 10)
		out = append(out, `,"relevance_score":`...)
		out = strconv.AppendFloat(out, r.Score, 'g', -1, 64)
		out = append(out, '}')
	}
	out = append(out, `],"usage":{"total_tokens":`...)
	out = strconv.AppendInt(out, usage, 10)
	out = append(out, '}')
	out = a.appendGW(out)
	out = append(out, '}')
	return writeAux(ctx, out)
}

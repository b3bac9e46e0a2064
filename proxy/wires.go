package proxy

import (
	"math"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// decode reads the request body as the turn's wire sends it into t.req,
// the one request shape the pipeline serves. The Anthropic and Responses
// wires check what is particular to their API here; validateChat then runs
// the same rules on every wire.
func (t *turn) decode(body []byte) *codec.Error {
	switch t.wire {
	case chatAnthropic:
		if cerr := decodeChatBody(body, &t.anthropic); cerr != nil {
			return cerr
		}
		t.thinking = t.anthropic.ShowsThinking()
		return t.anthropic.ToChat(&t.req, false)
	case chatResponses:
		return t.decodeResponses(body)
	}
	return decodeChatBody(body, &t.req)
}

// countMessageTokens serves POST /v1/messages/count_tokens: the input
// tokens a /v1/messages call with the same body would be billed, counted
// with the tokenizer, chat template and system prompt of the tier named,
// under the rules of POST /api/v1/tokens/count (auto refused, the same
// bounds on the text). Nothing goes upstream and nothing is billed.
func (ch *Chat) countMessageTokens(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	body := ctx.PostBody()
	if len(body) == 0 {
		return errEmptyBody
	}
	t := acquireTurn()
	defer releaseTurn(t)
	t.ch, t.wire = ch, chatAnthropic
	if cerr := decodeChatBody(body, &t.anthropic); cerr != nil {
		return cerr
	}
	if cerr := t.anthropic.ToChat(&t.req, true); cerr != nil {
		return cerr
	}
	if t.req.Model == "auto" {
		return errCountAuto
	}
	intent, cerr := validateChat(&t.req, chatAnthropic, ch.tiers, c.User, c.Version, c.Pinned)
	if cerr != nil {
		return cerr
	}
	if cerr := checkCountable(&t.req); cerr != nil {
		return cerr
	}
	n := countPrompt(&t.req, ch.upstreamFor(intent.Tier.Name), math.MaxInt, nil) // bounded by checkCountable
	t.out = codec.AppendCountTokens(t.out[:0], int64(n))
	ctx.SetContentType("application/json")
	ctx.SetBody(t.out)
	return nil
}

// Block kinds of an Anthropic stream.
const (
	blockNone uint8 = iota
	blockText
	blockThinking
	blockTool
)

// blockState is where an Anthropic stream is in its content blocks: the
// open block (its kind and index) and, for a tool_use block, the upstream
// tool call it carries.
type blockState struct {
	open  uint8
	index int // of the open block; the next one is index+1
	n     int // blocks opened
	tool  int64
}

// anthropicText appends a text or thinking delta, opening a block of that
// kind first when another kind is open.
func (t *turn) anthropicText(kind uint8, raw []byte) {
	b := &t.blocks
	if b.open != kind {
		t.anthropicClose()
		b.open, b.index = kind, b.n
		b.n++
		if kind == blockText {
			t.out = codec.AppendAnthropicTextStart(t.out, b.index)
		} else {
			t.out = codec.AppendAnthropicThinkingStart(t.out, b.index)
		}
	}
	if kind == blockText {
		t.out = codec.AppendAnthropicTextDelta(t.out, b.index, raw)
	} else {
		t.out = codec.AppendAnthropicThinkingDelta(t.out, b.index, raw)
	}
}

// anthropicTools turns one upstream tool_calls delta into tool_use blocks.
// Blocks are sequential, upstream calls may interleave: the first call
// streams as its block; a call that starts while another is open waits in
// the queue, whole, for the end of the stream. It reports false for
// fragments it cannot read.
func (t *turn) anthropicTools(raw []byte) bool {
	b := &t.blocks
	var it codec.ToolFragments
	var f codec.ToolFragment
	it.Reset(raw)
	for it.Next(&f) {
		switch {
		case f.ID != nil:
			if f.Name == nil {
				return false // a call's first fragment names it
			}
			if b.open == blockTool || t.queue.len() > 0 {
				t.queue.add(&f)
				continue
			}
			t.anthropicClose()
			b.open, b.index, b.tool = blockTool, b.n, f.Index
			b.n++
			t.out = codec.AppendAnthropicToolStart(t.out, b.index, f.ID, f.Name)
		case b.open == blockTool && f.Index == b.tool:
		case t.queue.has(f.Index):
			t.queue.addArgs(f.Index, f.Arguments)
			continue
		default:
			return false // arguments of a call never started
		}
		if len(f.Arguments) > 2 {
			t.out = codec.AppendAnthropicJSONDelta(t.out, b.index, f.Arguments)
		}
	}
	return it.Err() == nil
}

// anthropicEnd closes the open block and writes the queued calls, each a
// whole tool_use block.
func (t *turn) anthropicEnd() {
	t.anthropicClose()
	b := &t.blocks
	for i := range t.queue.calls {
		id, name := t.queue.call(i)
		t.out = codec.AppendAnthropicToolStart(t.out, b.n, id, name)
		if args := t.queue.args(i); len(args) > 2 {
			t.out = codec.AppendAnthropicJSONDelta(t.out, b.n, args)
		}
		t.out = codec.AppendAnthropicBlockStop(t.out, b.n)
		b.n++
	}
}

// toolQueue holds upstream tool calls that cannot stream yet: their ids,
// names and argument fragments, as the inner bytes of their JSON string
// literals. Its buffers are kept across turns.
type toolQueue struct {
	buf   []byte
	calls []queuedCall
	frags []queuedFrag
	lit   []byte // a call's arguments joined into one literal
}

type queuedCall struct {
	index                    int64
	idFrom, nameFrom, nameTo int
}

type queuedFrag struct {
	index    int64
	from, to int
}

func (q *toolQueue) reset() {
	q.buf, q.calls, q.frags, q.lit = q.buf[:0], q.calls[:0], q.frags[:0], q.lit[:0]
}

func (q *toolQueue) len() int { return len(q.calls) }

func (q *toolQueue) has(index int64) bool {
	for i := range q.calls {
		if q.calls[i].index == index {
			return true
		}
	}
	return false
}

// add queues a call from its first fragment, arguments included.
func (q *toolQueue) add(f *codec.ToolFragment) {
	c := queuedCall{index: f.Index, idFrom: len(q.buf)}
	q.buf = append(q.buf, f.ID...)
	c.nameFrom = len(q.buf)
	q.buf = append(q.buf, f.Name...)
	c.nameTo = len(q.buf)
	q.calls = append(q.calls, c)
	q.addArgs(f.Index, f.Arguments)
}

// addArgs queues an argument fragment (a raw JSON string literal).
func (q *toolQueue) addArgs(index int64, lit []byte) {
	if len(lit) <= 2 {
		return
	}
	from := len(q.buf)
	q.buf = append(q.buf, lit[1:len(lit)-1]...)
	q.frags = append(q.frags, queuedFrag{index: index, from: from, to: len(q.buf)})
}

// call returns queued call i's id and name, raw JSON string literals.
func (q *toolQueue) call(i int) (id, name []byte) {
	c := &q.calls[i]
	return q.buf[c.idFrom:c.nameFrom], q.buf[c.nameFrom:c.nameTo]
}

// args returns queued call i's arguments joined into one JSON string
// literal, valid until the next call.
func (q *toolQueue) args(i int) []byte {
	index := q.calls[i].index
	q.lit = append(q.lit[:0], '"')
	for _, f := range q.frags {
		if f.index == index {
			q.lit = append(q.lit, q.buf[f.from:f.to]...)
		}
	}
	q.lit = append(q.lit, '"')
	return q.lit
}

// anthropicClose closes the open block, if any.
func (t *turn) anthropicClose() {
	b := &t.blocks
	if b.open == blockNone {
		return
	}
	t.out = codec.AppendAnthropicBlockStop(t.out, b.index)
	b.open = blockNone
}

// decodeResponses decodes a Responses API body into t.req.
func (t *turn) decodeResponses(body []byte) *codec.Error {
	if cerr := decodeChatBody(body, &t.responses); cerr != nil {
		return cerr
	}
	return t.responses.ToChat(&t.req)
}

// responseHead fills the head the Responses wire repeats.
func (t *turn) responseHead() *codec.ResponseHead {
	t.recho = codec.AppendResponseEcho(t.recho[:0], &t.responses)
	t.rhead = codec.ResponseHead{ID: t.head.ID, CreatedAt: t.head.Created, Model: t.head.Model, MaxOutput: t.intent.MaxTokens,
		Serial: t.req.ParallelToolCalls != nil && !*t.req.ParallelToolCalls, Echo: t.recho}
	return &t.rhead
}

// appendResponsesStart appends response.created and response.in_progress.
func (t *turn) appendResponsesStart(dst []byte) []byte {
	h := t.responseHead()
	t.rout.Reset()
	end := codec.ResponseEnd{Status: "in_progress"}
	dst = codec.AppendResponseStateEvent(dst, "response.created", t.seq, h, nil, &end)
	t.seq++
	dst = codec.AppendResponseStateEvent(dst, "response.in_progress", t.seq, h, nil, &end)
	t.seq++
	return dst
}

// responsesClose closes the open item, if any.
func (t *turn) responsesClose() {
	if it := t.rout.Last(); it != nil && !it.Done {
		t.out = codec.AppendResponseItemDone(t.out, &t.seq, &t.rhead, &t.rout, t.rout.Len()-1)
	}
}

// responsesText appends an output_text delta, opening a message item
// first when none is open.
func (t *turn) responsesText(raw []byte) {
	if it := t.rout.Last(); it == nil || it.Done || it.Call {
		t.responsesClose()
		t.rout.AddMessage()
		t.out = codec.AppendResponseItemAdded(t.out, &t.seq, &t.rhead, &t.rout, t.rout.Len()-1)
	}
	t.out = codec.AppendResponseTextDelta(t.out, t.seq, &t.rhead, t.rout.Len()-1, false, raw)
	t.seq++
	t.rout.AppendText(raw)
}

// responsesTools turns one upstream tool_calls delta into function_call
// items, one open at a time as the Responses stream has them: the first
// call streams as its item; a call that starts while another is open waits
// in the queue, whole, for the end of the stream. It reports false for
// fragments it cannot read.
func (t *turn) responsesTools(raw []byte) bool {
	var it codec.ToolFragments
	var f codec.ToolFragment
	it.Reset(raw)
	for it.Next(&f) {
		last := t.rout.Last()
		open := last != nil && !last.Done && last.Call
		switch {
		case f.ID != nil:
			if f.Name == nil {
				return false
			}
			if open || t.queue.len() > 0 {
				t.queue.add(&f)
				continue
			}
			t.responsesClose()
			t.rout.AddCall(f.ID, f.Name)
			t.rtool = f.Index
			t.out = codec.AppendResponseItemAdded(t.out, &t.seq, &t.rhead, &t.rout, t.rout.Len()-1)
		case open && f.Index == t.rtool:
		case t.queue.has(f.Index):
			t.queue.addArgs(f.Index, f.Arguments)
			continue
		default:
			return false
		}
		if len(f.Arguments) > 2 {
			t.responsesDelta(f.Arguments)
		}
	}
	return it.Err() == nil
}

// responsesDelta streams a fragment of the open call's arguments.
func (t *turn) responsesDelta(lit []byte) {
	t.out = codec.AppendResponseTextDelta(t.out, t.seq, &t.rhead, t.rout.Len()-1, true, lit)
	t.seq++
	t.rout.AppendText(lit)
}

// responseEnd is how the turn's answer ends its response.
func (t *turn) responseEnd() codec.ResponseEnd {
	e := codec.ResponseEnd{Status: "completed", Bill: &t.bill, ReasoningTokens: t.reasoningTokens}
	switch t.answer.Finish {
	case "length":
		e.Status, e.Incomplete = "incomplete", "max_output_tokens"
	case "content_filter":
		e.Status, e.Incomplete = "incomplete", "content_filter"
	}
	return e
}

// appendResponsesEnd closes the open item and appends the terminal event:
// response.completed, or response.incomplete when the budget or a filter
// cut the answer.
//
// The last item is the one a cut interrupted, so on an incomplete response
// it closes incomplete. An answer with neither text nor calls still ends
// with its one empty message item, as the non-streaming response has it.
func (t *turn) appendResponsesEnd(dst []byte) []byte {
	t.out = dst
	e := t.responseEnd()
	cut := e.Status == "incomplete"
	if t.rout.Len() == 0 && len(t.queue.calls) == 0 {
		t.rout.AddMessage()
		t.out = codec.AppendResponseItemAdded(t.out, &t.seq, &t.rhead, &t.rout, 0)
	}
	t.cutOpen(cut && len(t.queue.calls) == 0)
	t.responsesClose()
	for i := range t.queue.calls {
		id, name := t.queue.call(i)
		t.rout.AddCall(id, name)
		t.out = codec.AppendResponseItemAdded(t.out, &t.seq, &t.rhead, &t.rout, t.rout.Len()-1)
		if args := t.queue.args(i); len(args) > 2 {
			t.responsesDelta(args)
		}
		t.cutOpen(cut && i == len(t.queue.calls)-1)
		t.responsesClose()
	}
	name := "response.completed"
	if cut {
		name = "response.incomplete"
	}
	dst = codec.AppendResponseStateEvent(t.out, name, t.seq, &t.rhead, &t.rout, &e)
	t.seq++
	return dst
}

// cutOpen marks the open item, if any, cut short when cut is set.
func (t *turn) cutOpen(cut bool) {
	if it := t.rout.Last(); cut && it != nil && !it.Done {
		it.Cut = true
	}
}

// appendResponsesFailed appends response.failed for a stream that broke:
// the error, and the items completed before it.
func (t *turn) appendResponsesFailed(dst []byte, cerr *codec.Error) []byte {
	e := codec.ResponseEnd{Status: "failed", Err: cerr, Bill: &t.bill}
	dst = codec.AppendResponseStateEvent(dst, "response.failed", t.seq, &t.rhead, &t.rout, &e)
	t.seq++
	return dst
}

// appendResponse appends the non-streaming response object of the turn's
// answer: a message item for its text, a function_call item per call.
func (t *turn) appendResponse(dst []byte) []byte {
	h := t.responseHead()
	o := &t.rout
	o.Reset()
	if len(t.answer.Content) > 2 || t.answer.ToolCalls == nil {
		o.AddMessage()
		if len(t.answer.Content) >= 2 {
			o.AppendText(t.answer.Content)
		}
		o.Last().Done = true
	}
	if t.answer.ToolCalls != nil {
		var it codec.ToolFragments
		var f codec.ToolFragment
		it.Reset(t.answer.ToolCalls)
		for it.Next(&f) {
			if f.ID == nil || f.Name == nil {
				continue
			}
			o.AddCall(f.ID, f.Name)
			if f.Arguments != nil {
				o.AppendText(f.Arguments)
			}
			o.Last().Done = true
		}
	}
	e := t.responseEnd()
	if it := o.Last(); it != nil && e.Status == "incomplete" {
		it.Cut = true
	}
	return codec.AppendResponse(dst, h, o, &e)
}

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
		if cerr := codec.DecodeRequest(body, &t.anthropic); cerr != nil {
			return cerr
		}
		t.thinking = t.anthropic.ShowsThinking()
		return t.anthropic.ToChat(&t.req, false)
	case chatResponses:
		return t.decodeResponses(body)
	}
	return codec.DecodeRequest(body, &t.req)
}

// countTokens serves POST /v1/messages/count_tokens: the input tokens a
// /v1/messages call with the same body would be billed, counted with the
// tokenizer and chat template of the tier that would serve it (auto: the
// tier auto tries first for the request's shape) and that tier's system
// prompt. Nothing goes upstream and nothing is billed.
func (ch *Chat) countTokens(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	body := ctx.PostBody()
	if len(body) == 0 {
		return errEmptyBody
	}
	t := acquireTurn()
	defer releaseTurn(t)
	t.ch, t.wire = ch, chatAnthropic
	if cerr := codec.DecodeRequest(body, &t.anthropic); cerr != nil {
		return cerr
	}
	if cerr := t.anthropic.ToChat(&t.req, true); cerr != nil {
		return cerr
	}
	intent, cerr := validateChat(&t.req, chatAnthropic, ch.tiers, c.User, c.Version, c.Pinned)
	if cerr != nil {
		return cerr
	}
	t.intent = intent
	var up *Upstream
	if intent.Auto {
		for _, name := range t.autoOrder() {
			if u := ch.upstreamFor(name); u != nil && c.User.AllowsModel(name) {
				up = u
				break
			}
		}
	} else {
		up = ch.upstreamFor(intent.Tier.Name)
	}
	if up == nil {
		return errModelUnknown
	}
	n := countPrompt(&t.req, up, math.MaxInt)
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

// anthropicTools turns one upstream tool_calls delta into tool_use blocks:
// a fragment with an id starts a call (and its block); its arguments
// follow as input_json_delta. It reports false for fragments it cannot
// read.
func (t *turn) anthropicTools(raw []byte) bool {
	b := &t.blocks
	var it codec.ToolFragments
	var f codec.ToolFragment
	it.Reset(raw)
	for it.Next(&f) {
		if f.ID != nil || b.open != blockTool {
			if f.ID == nil || f.Name == nil {
				return false // a call's first fragment names it
			}
			t.anthropicClose()
			b.open, b.index, b.tool = blockTool, b.n, f.Index
			b.n++
			t.out = codec.AppendAnthropicToolStart(t.out, b.index, f.ID, f.Name)
		}
		if len(f.Arguments) > 2 {
			t.out = codec.AppendAnthropicJSONDelta(t.out, b.index, f.Arguments)
		}
	}
	return it.Err() == nil
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
	if cerr := codec.DecodeRequest(body, &t.responses); cerr != nil {
		return cerr
	}
	return t.responses.ToChat(&t.req)
}

// responseHead fills the head the Responses wire repeats.
func (t *turn) responseHead() *codec.ResponseHead {
	t.rhead = codec.ResponseHead{ID: t.head.ID, CreatedAt: t.head.Created, Model: t.head.Model, MaxOutput: t.intent.MaxTokens}
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

// responsesOpen closes the open item unless it is of the kind wanted.
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
// items: a fragment with an id starts a call; its arguments follow as
// deltas. It reports false for fragments it cannot read.
func (t *turn) responsesTools(raw []byte) bool {
	var it codec.ToolFragments
	var f codec.ToolFragment
	it.Reset(raw)
	for it.Next(&f) {
		if last := t.rout.Last(); f.ID != nil || last == nil || last.Done || !last.Call {
			if f.ID == nil || f.Name == nil {
				return false
			}
			t.responsesClose()
			t.rout.AddCall(f.ID, f.Name)
			t.out = codec.AppendResponseItemAdded(t.out, &t.seq, &t.rhead, &t.rout, t.rout.Len()-1)
		}
		if len(f.Arguments) > 2 {
			t.out = codec.AppendResponseTextDelta(t.out, t.seq, &t.rhead, t.rout.Len()-1, true, f.Arguments)
			t.seq++
			t.rout.AppendText(f.Arguments)
		}
	}
	return it.Err() == nil
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
func (t *turn) appendResponsesEnd(dst []byte) []byte {
	t.out = dst
	t.responsesClose()
	e := t.responseEnd()
	name := "response.completed"
	if e.Status == "incomplete" {
		name = "response.incomplete"
	}
	dst = codec.AppendResponseStateEvent(t.out, name, t.seq, &t.rhead, &t.rout, &e)
	t.seq++
	return dst
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
	return codec.AppendResponse(dst, h, o, &e)
}

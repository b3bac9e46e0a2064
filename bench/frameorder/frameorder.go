// Package frameorder checks chat streams against the grammar of the
// specification's Events section, one state machine per wire. The load
// generator runs a Checker on every stream it reads, and tests run it on
// transcripts.
//
// A Checker is fed the events of one stream as they arrive (from a
// codec.SSEScanner) and told when the body ended; it reports whether the
// stream completed, failed the wire's way, or broke the grammar, naming the
// first frame that did. It allocates nothing per event, and nothing per
// stream once its buffers have grown (Reset keeps them); describing a
// violation and an unknown error code are the only allocations.
//
// The rules, per wire:
//
// Chunk wires (V1, OpenAI, OpenAIUsage). Every data line is a JSON
// chat.completion.chunk except the literal [DONE]; every chunk of the
// stream carries the same id and created and object chat.completion.chunk;
// no frame carries reasoning_content (nor a delta "reasoning"). Frame 1 is
// the role primer (choices[0].delta role "assistant", content ""), which
// on V1 carries the gw block (request_id, routed_tier, reasoning_effort);
// on the OpenAI route no frame carries gw. Then zero or more deltas, each
// with content or tool_calls (never both, never neither) and a null
// finish_reason; exactly one finish frame (empty delta, finish_reason one
// of stop, tool_calls, length, content_filter, no usage); exactly one usage
// frame (choices [], a usage object with cost) on V1 and OpenAIUsage, none
// on OpenAI; then [DONE], and nothing after it. A failure on the OpenAI
// route is one data frame with an error object (code, message, type, param
// null) instead of [DONE], with nothing after it; V1 fails by stopping
// before the finish frame, and an error frame on V1 is a violation. A V1
// stream that stops after its finish frame without [DONE] is failed and a
// violation, since the V1 failure shape sends none of finish, usage and
// [DONE]; an OpenAI stream that stops without [DONE] or an error frame is
// a violation (silent truncation).
//
// V2. Named events: start first (request_id; routing with tier, mode and
// reasoning_effort); zero or more reasoning, never after a delta; one or
// more delta (content or tool_calls, never both), none required before an
// error; then exactly one terminal: finish (finish_reason, usage with cost)
// or error (code, message, request_id); nothing after it, no [DONE],
// unknown or unnamed events are violations, and a stream that ends without
// a terminal is a violation (no silent truncation).
//
// Tool calls, on every wire: each fragment is an object with an integer
// index; the first fragment of an index carries id and function.name.
package frameorder

import (
	"strconv"

	"github.com/edgegw/gateway/codec"
)

// Wire is the chat wire a stream was read from.
type Wire uint8

// The wires.
const (
	V1          Wire = iota + 1 // POST /api/v1/chat: OpenAI-shaped chunks with a gw block
	V2                          // POST /api/v2/chat: named events
	OpenAI                      // POST /v1/chat/completions without stream_options.include_usage
	OpenAIUsage                 // POST /v1/chat/completions with include_usage
)

// String returns the wire's short name: v1, v2, openai or openai+usage.
func (w Wire) String() string {
	switch w {
	case V1:
		return "v1"
	case V2:
		return "v2"
	case OpenAI:
		return "openai"
	case OpenAIUsage:
		return "openai+usage"
	case Upstream:
		return "upstream"
	case Anthropic:
		return "anthropic"
	case Responses:
		return "responses"
	}
	return "wire(" + strconv.Itoa(int(w)) + ")"
}

// Path returns the route the wire is served on.
func (w Wire) Path() string {
	switch w {
	case V1:
		return "/api/v1/chat"
	case V2:
		return "/api/v2/chat"
	case Anthropic:
		return "/v1/messages"
	case Responses:
		return "/v1/responses"
	}
	return "/v1/chat/completions"
}

// Outcome is what a Checker learned about one stream.
type Outcome struct {
	// Complete reports that the stream reached its wire's terminator:
	// [DONE] on the chunk wires, the finish event on V2. A stream that
	// reached it out of order is Complete and carries a Violation.
	Complete bool
	// Failed reports that the stream ended the wire's failure way: a V2
	// error event; on the OpenAI route an error frame instead of [DONE];
	// on V1 a stream that stopped without [DONE].
	Failed bool
	// ErrorCode is the code of a V2 error event or a chunk wire's error
	// frame.
	ErrorCode string
	// Frames counts the events seen, [DONE] included.
	Frames int
	// Content and ToolCalls count the delta frames of each kind; Reasoning
	// counts V2 reasoning events.
	Content, ToolCalls, Reasoning int
	// Violation is empty when the stream obeyed its wire's grammar, and
	// otherwise describes the first violation, naming the frame (counted
	// from 1) where it was seen.
	Violation string
}

// OK reports a stream that completed and obeyed the grammar.
func (o *Outcome) OK() bool { return o.Complete && o.Violation == "" }

// Chunk-wire states.
const (
	stPrimer   uint8 = iota // nothing seen yet
	stBody                  // primer seen: deltas or the finish frame
	stFinished              // finish frame seen: usage frame or [DONE]
	stUsage                 // usage frame seen: [DONE]
	stEnded                 // [DONE] or an error frame seen
)

// V2 states.
const (
	v2Start uint8 = iota // nothing seen yet
	v2Body               // start seen
	v2Ended              // finish or error seen
)

// Checker checks the frames of one stream. The zero Checker is ready after
// Reset. A Checker must not be used by several goroutines at once.
type Checker struct {
	wire  Wire
	state uint8
	ended bool
	out   Outcome

	chunk   codec.Chunk
	id      []byte // the first chunk's id, raw
	created []byte // the first chunk's created, raw
	hasHead bool
	deltas  int     // V2 delta events
	tools   []int64 // tool-call indexes seen

	// Anthropic and Responses: blocks (items) opened, the open one's
	// kind, the next sequence number, and whether a message's part is
	// open and the open item's content is done.
	blocks        int
	open          uint8
	seq           int64
	part, closing bool

	sc *codec.SSEScanner // for Check
}

// Reset prepares c for a new stream on wire w, keeping its buffers.
func (c *Checker) Reset(w Wire) {
	*c = Checker{
		wire:    w,
		id:      c.id[:0],
		created: c.created[:0],
		tools:   c.tools[:0],
		sc:      c.sc,
	}
}

// Event checks the next event of the stream. Its slices are not kept.
func (c *Checker) Event(ev codec.SSEEvent) {
	c.out.Frames++
	switch c.wire {
	case V1, OpenAI, OpenAIUsage, Upstream:
		c.chunkEvent(ev)
	case V2:
		c.v2Event(ev)
	case Anthropic:
		c.anthropicEvent(ev)
	case Responses:
		c.responsesEvent(ev)
	default:
		c.violate("unknown wire")
	}
}

// ScanError records an error of the SSE scanner (an event over its cap).
func (c *Checker) ScanError(err error) {
	c.violateEnd("the body is not a readable event stream: " + err.Error())
}

// End is called at the end of the body and returns the outcome. Calling it
// again returns the same outcome.
func (c *Checker) End() Outcome {
	if c.ended {
		return c.out
	}
	c.ended = true
	switch c.wire {
	case V1:
		switch c.state {
		case stEnded:
		case stPrimer:
			c.out.Failed = true
			c.violateEnd("the stream ended before the role primer")
		case stFinished, stUsage:
			c.out.Failed = true
			c.violateEnd("the stream ended after the finish frame without [DONE]")
		default:
			c.out.Failed = true
		}
	case OpenAI, OpenAIUsage, Upstream:
		if c.state != stEnded {
			c.violateEnd("the stream ended without [DONE] or an error frame (silent truncation)")
		}
	case V2:
		if c.state != v2Ended {
			c.violateEnd("the stream ended without a finish or error event (silent truncation)")
		}
	case Anthropic:
		if c.state != anEnded {
			c.violateEnd("the stream ended without message_stop or an error event (silent truncation)")
		}
	case Responses:
		if c.state != rsEnded {
			c.violateEnd("the stream ended without a terminal response event (silent truncation)")
		}
	default:
		c.violateEnd("unknown wire")
	}
	return c.out
}

// Check resets c for wire w, checks the whole stream body and returns the
// outcome. It reuses c's scanner and buffers.
func (c *Checker) Check(w Wire, body []byte) Outcome {
	sc := c.sc
	if sc == nil {
		sc = codec.NewSSEScanner(0)
	} else {
		sc.Reset()
	}
	c.Reset(w)
	c.sc = sc
	sc.Feed(body)
	for {
		ev, ok, err := sc.Finish()
		if err != nil {
			c.ScanError(err)
			break
		}
		if !ok {
			break
		}
		c.Event(ev)
	}
	return c.End()
}

// CheckStream checks a whole stream body read from wire w.
func CheckStream(w Wire, body []byte) Outcome {
	var c Checker
	return c.Check(w, body)
}

// violate records msg as the violation at the current frame, unless one
// was recorded already.
func (c *Checker) violate(msg string) {
	if c.out.Violation == "" {
		c.out.Violation = "frame " + strconv.Itoa(c.out.Frames) + ": " + msg
	}
}

// violateEnd records msg as a violation found at the end of the stream.
func (c *Checker) violateEnd(msg string) {
	if c.out.Violation == "" {
		c.out.Violation = "after frame " + strconv.Itoa(c.out.Frames) + ": " + msg
	}
}

// fields are the spans of the top-level members of a frame the checker
// reads; null members are left nil.
type fields struct {
	// chunk wires
	id, object, created, gw, choices, usage, err []byte
	// V2
	content, toolCalls, finishReason, code, message, requestID, routing []byte
	// reasoning reports a reasoning_content member anywhere in the frame.
	reasoning bool
}

// scan validates data as one JSON object and collects its members.
func (f *fields) scan(data []byte) bool {
	o, ok := openObject(data)
	if !ok {
		return false
	}
	for key, more := o.next(); more; key, more = o.next() {
		if string(key) == watchKey {
			f.reasoning = true
		}
		v, good := o.value(&f.reasoning)
		if !good {
			return false
		}
		if isNull(v) {
			v = nil
		}
		switch string(key) {
		case "id":
			f.id = v
		case "object":
			f.object = v
		case "created":
			f.created = v
		case "gw":
			f.gw = v
		case "choices":
			f.choices = v
		case "usage":
			f.usage = v
		case "error":
			f.err = v
		case "content":
			f.content = v
		case "tool_calls":
			f.toolCalls = v
		case "finish_reason":
			f.finishReason = v
		case "code":
			f.code = v
		case "message":
			f.message = v
		case "request_id":
			f.requestID = v
		case "routing":
			f.routing = v
		}
	}
	return !o.bad && skipSpace(data, o.i) == len(data)
}

// chunkEvent checks one event of a chunk wire.
func (c *Checker) chunkEvent(ev codec.SSEEvent) {
	if len(ev.Event) > 0 && string(ev.Event) != "message" {
		c.violate("a named event (" + quoteShort(ev.Event) + ") on a chunk wire")
	}
	data := ev.Data
	if c.state == stEnded {
		switch {
		case !c.out.Failed:
			c.violate("a frame after [DONE]")
		case string(data) == "[DONE]":
			c.violate("[DONE] after the error frame")
		default:
			c.violate("a frame after the error frame")
		}
		return
	}
	if string(data) == "[DONE]" {
		c.done()
		return
	}
	ch := &c.chunk
	var f fields
	if codec.ParseChunk(data, ch) != nil || !f.scan(data) {
		c.violate("the data is neither [DONE] nor a JSON chat.completion.chunk")
		return
	}
	reasoning := f.reasoning || ch.Reasoning != nil
	if reasoning && c.wire != Upstream {
		c.violate("reasoning_content on a chunk wire")
	}
	if f.err != nil {
		c.errorFrame(&f)
		return
	}
	c.checkHead(&f)
	if f.gw != nil && c.wire != V1 {
		c.violate("a gw block on the OpenAI route")
	}
	switch {
	case ch.FinishReason != nil:
		c.finishFrame(&f)
	case ch.Role != nil:
		c.primer(&f)
	case ch.HasUsage || ch.NoChoices:
		c.usageFrame(&f)
	default:
		c.deltaFrame(reasoning && c.wire == Upstream)
	}
}

// checkHead checks the members every chunk carries.
func (c *Checker) checkHead(f *fields) {
	if string(f.object) != `"chat.completion.chunk"` {
		c.violate(`object is not "chat.completion.chunk"`)
	}
	if !isString(f.id) {
		c.violate("a chunk without a string id")
	}
	if len(f.created) == 0 || f.created[0] < '0' || f.created[0] > '9' {
		c.violate("a chunk without a numeric created")
	}
	if !c.hasHead {
		c.hasHead = true
		c.id = append(c.id[:0], f.id...)
		c.created = append(c.created[:0], f.created...)
		return
	}
	if string(f.id) != string(c.id) {
		c.violate("the id changed within the stream")
	}
	if string(f.created) != string(c.created) {
		c.violate("created changed within the stream")
	}
}

// expectBody checks a frame that needs the primer before it.
func (c *Checker) expectBody() {
	if c.state == stPrimer {
		c.violate("the first frame is not the role primer")
		c.state = stBody
	}
}

func (c *Checker) primer(f *fields) {
	ch := &c.chunk
	if c.state != stPrimer {
		c.violate("a second role primer")
		return
	}
	c.state = stBody
	switch {
	case string(ch.Role) != `"assistant"`:
		c.violate(`the role primer's role is not "assistant"`)
	case string(ch.Content) != `""`:
		c.violate(`the role primer's content is not ""`)
	case ch.ToolCalls != nil:
		c.violate("the role primer carries tool_calls")
	case ch.HasUsage || ch.NoChoices:
		c.violate("the role primer carries usage or empty choices")
	}
	if c.wire == V1 {
		switch {
		case !isObject(f.gw):
			c.violate("the role primer carries no gw block")
		case !isString(member(f.gw, "request_id")) || !isString(member(f.gw, "routed_tier")) ||
			!isString(member(f.gw, "reasoning_effort")):
			c.violate("the gw block lacks request_id, routed_tier or reasoning_effort")
		}
	}
}

// deltaFrame checks a delta; thinking says it carries an upstream's
// reasoning_content, which may stand alone.
func (c *Checker) deltaFrame(thinking bool) {
	ch := &c.chunk
	c.expectBody()
	if c.state >= stFinished {
		c.violate("a delta after the finish frame")
	}
	switch {
	case ch.Content != nil && ch.ToolCalls != nil:
		c.violate("a delta carries both content and tool_calls")
	case ch.Content == nil && ch.ToolCalls == nil && !thinking:
		c.violate("a delta carries neither content nor tool_calls")
	}
	if ch.Content != nil {
		c.out.Content++
	}
	if ch.ToolCalls != nil {
		c.out.ToolCalls++
		c.checkTools(ch.ToolCalls)
	}
}

func (c *Checker) finishFrame(f *fields) {
	ch := &c.chunk
	c.expectBody()
	if c.state >= stFinished {
		c.violate("a second finish frame")
	}
	c.state = stFinished
	if !finishReason(ch.FinishReason) {
		c.violate("finish_reason is not stop, tool_calls, length or content_filter")
	}
	if ch.HasUsage {
		c.violate("the finish frame carries usage")
	}
	if ch.NoChoices || !isEmptyObject(member(firstElement(f.choices), "delta")) {
		c.violate("the finish frame's delta is not an empty object")
	}
}

func (c *Checker) usageFrame(f *fields) {
	ch := &c.chunk
	if c.wire == OpenAI {
		c.violate("a usage frame without stream_options.include_usage")
	}
	switch c.state {
	case stPrimer:
		c.violate("the first frame is not the role primer")
	case stBody:
		c.violate("a usage frame before the finish frame")
	case stUsage:
		c.violate("a second usage frame")
	}
	c.state = stUsage
	switch {
	case !ch.NoChoices:
		c.violate("the usage frame's choices is not an empty array")
	case !ch.HasUsage:
		c.violate("a frame with empty choices and no usage")
	case !isObject(member(f.usage, "cost")) && c.wire != Upstream:
		c.violate("the usage frame's usage has no cost object")
	}
}

// done handles [DONE] on a chunk wire.
func (c *Checker) done() {
	switch c.state {
	case stPrimer:
		c.violate("[DONE] before the role primer")
	case stBody:
		c.violate("[DONE] before the finish frame")
	case stFinished:
		if c.wire != OpenAI && c.wire != Upstream {
			c.violate("[DONE] without a usage frame")
		}
	}
	c.state = stEnded
	c.out.Complete = true
}

// errorFrame handles a chunk-wire frame with an error member.
func (c *Checker) errorFrame(f *fields) {
	c.out.ErrorCode = codeString(member(f.err, "code"))
	if c.wire == V1 {
		c.violate("an error frame on /api/v1/chat (a failed stream just stops)")
		return
	}
	switch {
	case c.state == stPrimer:
		c.violate("an error frame before the role primer")
	case !isObject(f.err):
		c.violate("the error frame's error is not an object")
	case !isString(member(f.err, "code")) || !isString(member(f.err, "message")) || !isString(member(f.err, "type")):
		c.violate("the error object lacks a string code, message or type")
	case !isNull(member(f.err, "param")):
		c.violate("the error object's param is not null")
	}
	c.state = stEnded
	c.out.Failed = true
}

// v2Event checks one event of the v2 wire.
func (c *Checker) v2Event(ev codec.SSEEvent) {
	if c.state == v2Ended {
		c.violate("an event after the terminal event")
		return
	}
	if string(ev.Data) == "[DONE]" {
		c.violate("[DONE] on the v2 wire")
		return
	}
	var f fields
	if !f.scan(ev.Data) {
		c.violate("the data is not a JSON object")
		return
	}
	name := ev.Event
	if string(name) != "start" && c.state == v2Start {
		c.violate("the first event is not start")
		c.state = v2Body
	}
	switch string(name) {
	case "start":
		if c.state != v2Start {
			c.violate("a second start event")
			return
		}
		c.state = v2Body
		r := f.routing
		if !isString(f.requestID) || !isObject(r) || !isString(member(r, "tier")) || !isString(member(r, "mode")) ||
			!isString(member(r, "reasoning_effort")) {
			c.violate("start lacks request_id or routing (tier, mode, reasoning_effort)")
		}
	case "reasoning":
		c.out.Reasoning++
		if c.deltas > 0 {
			c.violate("a reasoning event after a delta")
		}
	case "delta":
		c.deltas++
		switch {
		case f.content != nil && f.toolCalls != nil:
			c.violate("a delta carries both content and tool_calls")
		case f.content != nil:
			c.out.Content++
			if !isString(f.content) {
				c.violate("a delta's content is not a string")
			}
		case f.toolCalls != nil:
			c.out.ToolCalls++
			c.checkTools(f.toolCalls)
		default:
			c.violate("a delta carries neither content nor tool_calls")
		}
	case "finish":
		c.state = v2Ended
		c.out.Complete = true
		switch {
		case c.deltas == 0:
			c.violate("finish without any delta")
		case !finishReason(unquote(f.finishReason)):
			c.violate("finish_reason is not stop, tool_calls, length or content_filter")
		case !isObject(f.usage) || !isObject(member(f.usage, "cost")):
			c.violate("finish lacks usage with a cost object")
		}
	case "error":
		c.state = v2Ended
		c.out.Failed = true
		c.out.ErrorCode = codeString(f.code)
		if !isString(f.code) || !isString(f.message) || !isString(f.requestID) {
			c.violate("the error event lacks a string code, message or request_id")
		}
	case "":
		c.violate("an event without a name")
	default:
		c.violate("an unknown event " + quoteShort(name))
	}
}

// checkTools checks a tool_calls array: every fragment has an integer
// index, and the first fragment of each index has id and function.name.
func (c *Checker) checkTools(raw []byte) {
	a, ok := openArray(raw)
	if !ok {
		c.violate("tool_calls is not an array")
		return
	}
	for a.next() {
		frag, good := a.value()
		if !good {
			break
		}
		if !isObject(frag) {
			c.violate("a tool_calls fragment is not an object")
			continue
		}
		idx, ok := toolIndex(member(frag, "index"))
		if !ok {
			c.violate("a tool_calls fragment without an integer index")
			continue
		}
		if c.seenTool(int64(idx)) {
			continue
		}
		c.tools = append(c.tools, int64(idx))
		if !isString(member(frag, "id")) || !isString(member(member(frag, "function"), "name")) {
			c.violate("the first fragment of a tool call lacks id or function.name")
		}
	}
}

func (c *Checker) seenTool(idx int64) bool {
	for _, v := range c.tools {
		if v == idx {
			return true
		}
	}
	return false
}

// firstElement returns the first element of the array raw, or nil.
func firstElement(raw []byte) []byte {
	a, ok := openArray(raw)
	if !ok || !a.next() {
		return nil
	}
	v, _ := a.value()
	return v
}

// finishReason reports whether r (without quotes) is a finish reason the
// specification names.
func finishReason(r []byte) bool {
	switch string(r) {
	case "stop", "tool_calls", "length", "content_filter":
		return true
	}
	return false
}

// codeString returns the contents of the string literal raw: the slug of
// a registered code without allocating, otherwise a copy.
func codeString(raw []byte) string {
	s := unquote(raw)
	if s == nil {
		return ""
	}
	if code, ok := codec.LookupCode(string(s)); ok {
		return code.String()
	}
	return string(s)
}

// quoteShort quotes b for a message, cut to 40 bytes.
func quoteShort(b []byte) string {
	if len(b) > 40 {
		b = b[:40]
	}
	return strconv.Quote(string(b))
}

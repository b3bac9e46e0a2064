package frameorder

import "github.com/edgegw/gateway/codec"

// The grammars of the two wires that speak other vendors' APIs.
//
// Anthropic (POST /v1/messages). Named events whose data's type is the
// event's name. message_start first (a message with id, type message, role
// assistant, empty content); then content blocks, one at a time, each
// content_block_start (index = the number of blocks before it; type text,
// thinking or tool_use with id and name), its content_block_delta events
// (same index; text_delta in a text block, thinking_delta in a thinking
// block, input_json_delta in a tool_use block) and content_block_stop
// (same index); then exactly one message_delta (no block open; stop_reason
// end_turn, max_tokens, tool_use, refusal or stop_sequence; usage with
// output_tokens), then message_stop, nothing after it. ping may come
// anywhere between message_start and the end. A failure is one error event
// (error.type and error.message), at any point after message_start, with
// nothing after it. A stream that ends otherwise is a violation.
//
// Responses (POST /v1/responses). Named events whose data's type is the
// event's name, each with sequence_number, 0 first and each one more than
// the last. response.created then response.in_progress; then output
// items, one at a time: response.output_item.added (output_index = the
// number of items before it, item type message or function_call); for a
// message response.content_part.added, response.output_text.delta events,
// response.output_text.done and response.content_part.done; for a
// function call response.function_call_arguments.delta events and
// response.function_call_arguments.done; then response.output_item.done
// (same output_index). The terminal event is response.completed or
// response.incomplete (no item open; the response's status completed or
// incomplete; usage an object) or, for a failure, response.failed (status
// failed, an error with code and message); nothing after it.
//
// Upstream. An upstream's own POST /v1/chat/completions stream, as the
// reference proxy relays it: the OpenAI chunk rules, except that a chunk
// may carry reasoning_content (the upstream's thinking, which the gateway
// keeps off its OpenAI route) and the usage frame, present when the
// request asked for it, needs no cost (an upstream bills in tokens). The
// load generator checks it so that every target's streams cost the
// client the same per frame: on shared cores a check run for one target
// only takes its CPU from that target's throughput.
const (
	Anthropic Wire = iota + OpenAIUsage + 1 // POST /v1/messages
	Responses                               // POST /v1/responses
	Upstream                                // an upstream's POST /v1/chat/completions
)

// Anthropic states.
const (
	anStart uint8 = iota // nothing seen yet
	anBody               // message_start seen
	anDelta              // message_delta seen
	anEnded              // message_stop or error seen
)

// Responses states.
const (
	rsStart   uint8 = iota // nothing seen yet
	rsCreated              // response.created seen
	rsBody                 // response.in_progress seen
	rsEnded                // a terminal event seen
)

// Content block and output item kinds.
const (
	kindNone uint8 = iota
	kindText
	kindThinking
	kindTool
)

// wholeObject reports whether data is exactly one valid JSON object.
func wholeObject(data []byte) bool {
	o, ok := openObject(data)
	if !ok {
		return false
	}
	for _, more := o.next(); more; _, more = o.next() {
		if _, good := o.value(nil); !good {
			return false
		}
	}
	return !o.bad && skipSpace(data, o.i) == len(data)
}

// uint reads a non-negative integer of at most 18 digits.
func uintValue(raw []byte) (int64, bool) {
	if len(raw) == 0 || len(raw) > 18 || len(raw) > 1 && raw[0] == '0' {
		return 0, false
	}
	var n int64
	for _, c := range raw {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// typeIs reports whether data's type member is the event's name.
func typeIs(data, name []byte) bool {
	return string(unquote(member(data, "type"))) == string(name)
}

func (c *Checker) anthropicEvent(ev codec.SSEEvent) {
	if c.state == anEnded {
		c.violate("an event after the terminal event")
		return
	}
	data, name := ev.Data, ev.Event
	if !wholeObject(data) {
		c.violate("the data is not a JSON object")
		return
	}
	if !typeIs(data, name) {
		c.violate("the data's type is not the event's name " + quoteShort(name))
		return
	}
	if c.state == anStart && string(name) != "message_start" {
		c.violate("the first event is not message_start")
		c.state = anBody
	}
	switch string(name) {
	case "message_start":
		if c.state != anStart {
			c.violate("a second message_start")
			return
		}
		c.state = anBody
		m := member(data, "message")
		if !isString(member(m, "id")) || string(member(m, "type")) != `"message"` ||
			string(member(m, "role")) != `"assistant"` || string(member(m, "content")) != "[]" {
			c.violate("message_start lacks a message with id, type message, role assistant and empty content")
		}
	case "content_block_start":
		if c.state != anBody || c.open != kindNone {
			c.violate("content_block_start while a block is open or after message_delta")
			return
		}
		if idx, ok := uintValue(member(data, "index")); !ok || idx != int64(c.blocks) {
			c.violate("content_block_start's index is not the next block's")
		}
		c.blocks++
		b := member(data, "content_block")
		switch string(member(b, "type")) {
		case `"text"`:
			c.open = kindText
		case `"thinking"`:
			c.open = kindThinking
		case `"tool_use"`:
			c.open = kindTool
			if !isString(member(b, "id")) || !isString(member(b, "name")) {
				c.violate("a tool_use block lacks id or name")
			}
		default:
			c.violate("a content block of unknown type")
			c.open = kindText
		}
	case "content_block_delta":
		if c.open == kindNone {
			c.violate("content_block_delta with no block open")
			return
		}
		if idx, ok := uintValue(member(data, "index")); !ok || idx != int64(c.blocks-1) {
			c.violate("content_block_delta's index is not the open block's")
		}
		d := member(data, "delta")
		switch string(member(d, "type")) {
		case `"text_delta"`:
			c.out.Content++
			if c.open != kindText || !isString(member(d, "text")) {
				c.violate("a text_delta outside a text block, or without text")
			}
		case `"thinking_delta"`:
			c.out.Reasoning++
			if c.open != kindThinking || !isString(member(d, "thinking")) {
				c.violate("a thinking_delta outside a thinking block, or without thinking")
			}
		case `"input_json_delta"`:
			c.out.ToolCalls++
			if c.open != kindTool || !isString(member(d, "partial_json")) {
				c.violate("an input_json_delta outside a tool_use block, or without partial_json")
			}
		default:
			c.violate("a delta of unknown type")
		}
	case "content_block_stop":
		if c.open == kindNone {
			c.violate("content_block_stop with no block open")
			return
		}
		if idx, ok := uintValue(member(data, "index")); !ok || idx != int64(c.blocks-1) {
			c.violate("content_block_stop's index is not the open block's")
		}
		c.open = kindNone
	case "message_delta":
		if c.state != anBody || c.open != kindNone {
			c.violate("message_delta while a block is open, or a second one")
		}
		c.state = anDelta
		switch string(member(member(data, "delta"), "stop_reason")) {
		case `"end_turn"`, `"max_tokens"`, `"tool_use"`, `"refusal"`, `"stop_sequence"`:
		default:
			c.violate("message_delta's stop_reason is not one Anthropic names")
		}
		if _, ok := uintValue(member(member(data, "usage"), "output_tokens")); !ok {
			c.violate("message_delta lacks usage.output_tokens")
		}
	case "message_stop":
		if c.state != anDelta {
			c.violate("message_stop before message_delta")
		}
		c.state = anEnded
		c.out.Complete = true
	case "ping":
	case "error":
		c.state = anEnded
		c.out.Failed = true
		e := member(data, "error")
		c.out.ErrorCode = anthropicType(member(e, "type"))
		if !isString(member(e, "type")) || !isString(member(e, "message")) {
			c.violate("the error event lacks error.type or error.message")
		}
	case "":
		c.violate("an event without a name")
	default:
		c.violate("an unknown event " + quoteShort(name))
	}
}

func (c *Checker) responsesEvent(ev codec.SSEEvent) {
	if c.state == rsEnded {
		c.violate("an event after the terminal event")
		return
	}
	data, name := ev.Data, ev.Event
	if !wholeObject(data) {
		c.violate("the data is not a JSON object")
		return
	}
	if !typeIs(data, name) {
		c.violate("the data's type is not the event's name " + quoteShort(name))
		return
	}
	if seq, ok := uintValue(member(data, "sequence_number")); !ok || seq != c.seq {
		c.violate("sequence_number is not one more than the last")
	}
	c.seq++
	switch c.state {
	case rsStart:
		if string(name) != "response.created" {
			c.violate("the first event is not response.created")
		}
		c.state = rsCreated
		c.checkResponse(data, `"in_progress"`)
		return
	case rsCreated:
		if string(name) != "response.in_progress" {
			c.violate("the second event is not response.in_progress")
		}
		c.state = rsBody
		c.checkResponse(data, `"in_progress"`)
		return
	}
	idx, idxOK := uintValue(member(data, "output_index"))
	current := idxOK && idx == int64(c.blocks-1)
	switch string(name) {
	case "response.output_item.added":
		if c.open != kindNone {
			c.violate("an item added while another is open")
		}
		if !idxOK || idx != int64(c.blocks) {
			c.violate("output_item.added's output_index is not the next item's")
		}
		c.blocks++
		c.part = false
		switch string(member(member(data, "item"), "type")) {
		case `"message"`:
			c.open = kindText
		case `"function_call"`:
			c.open = kindTool
			item := member(data, "item")
			if !isString(member(item, "call_id")) || !isString(member(item, "name")) {
				c.violate("a function_call item lacks call_id or name")
			}
		default:
			c.violate("an output item of unknown type")
			c.open = kindText
		}
	case "response.content_part.added":
		if c.open != kindText || c.part || !current {
			c.violate("content_part.added outside an open message")
		}
		c.part = true
	case "response.output_text.delta":
		c.out.Content++
		if c.open != kindText || !c.part || !current || !isString(member(data, "delta")) {
			c.violate("output_text.delta outside an open message part, or without delta")
		}
	case "response.output_text.done":
		if c.open != kindText || !c.part || !current || !isString(member(data, "text")) {
			c.violate("output_text.done outside an open message part, or without text")
		}
	case "response.content_part.done":
		if c.open != kindText || !c.part || !current {
			c.violate("content_part.done outside an open message part")
		}
		c.part = false
		c.closing = true
	case "response.function_call_arguments.delta":
		c.out.ToolCalls++
		if c.open != kindTool || !current || !isString(member(data, "delta")) {
			c.violate("function_call_arguments.delta outside an open function call, or without delta")
		}
	case "response.function_call_arguments.done":
		if c.open != kindTool || !current || !isString(member(data, "arguments")) {
			c.violate("function_call_arguments.done outside an open function call, or without arguments")
		}
		c.closing = true
	case "response.output_item.done":
		if c.open == kindNone || !current || !c.closing {
			c.violate("output_item.done before its item's content was done")
		}
		c.open, c.closing = kindNone, false
	case "response.completed", "response.incomplete":
		if c.open != kindNone {
			c.violate("the response ended with an item open")
		}
		c.state = rsEnded
		c.out.Complete = true
		status := `"completed"`
		if string(name) == "response.incomplete" {
			status = `"incomplete"`
		}
		c.checkResponse(data, status)
		if !isObject(member(member(data, "response"), "usage")) {
			c.violate("the terminal response lacks usage")
		}
	case "response.failed":
		c.state = rsEnded
		c.out.Failed = true
		c.checkResponse(data, `"failed"`)
		e := member(member(data, "response"), "error")
		c.out.ErrorCode = codeString(member(e, "code"))
		if !isString(member(e, "code")) || !isString(member(e, "message")) {
			c.violate("response.failed lacks an error with code and message")
		}
	case "":
		c.violate("an event without a name")
	default:
		c.violate("an unknown event " + quoteShort(name))
	}
}

// checkResponse checks the response an event carries: an id, object
// response, the status given.
func (c *Checker) checkResponse(data []byte, status string) {
	r := member(data, "response")
	if !isString(member(r, "id")) || string(member(r, "object")) != `"response"` || string(member(r, "status")) != status {
		c.violate("the response lacks id or object response, or its status is not " + status)
	}
}

// anthropicType is the error type raw names, without allocating for the
// types Anthropic's API sends.
func anthropicType(raw []byte) string {
	for _, typ := range anthropicTypes {
		if string(unquote(raw)) == typ {
			return typ
		}
	}
	return codeString(raw)
}

var anthropicTypes = [...]string{"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
	"request_too_large", "rate_limit_error", "api_error", "timeout_error", "overloaded_error"}

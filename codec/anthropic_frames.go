package codec

import (
	"encoding/json"
	"strconv"
)

// Anthropic's error types (its API's error envelope).
const (
	anthropicInvalidRequest = "invalid_request_error"
	anthropicAuthentication = "authentication_error"
	anthropicPermission     = "permission_error"
	anthropicNotFound       = "not_found_error"
	anthropicTooLarge       = "request_too_large"
	anthropicRateLimit      = "rate_limit_error"
	anthropicAPI            = "api_error"
	anthropicTimeout        = "timeout_error"
	anthropicOverloaded     = "overloaded_error"
)

// StatusOverloaded is the status Anthropic's API answers "overloaded" with,
// which its SDKs retry.
const StatusOverloaded = 529

// AnthropicType is the Anthropic error type of c and the status it is sent
// with on the Anthropic wire: the gateway's status, except that every 503
// (an overloaded or unavailable model, a server shutting down) is
// Anthropic's 529 overloaded_error.
func (c Code) AnthropicType() (typ string, status int) {
	status = c.Status()
	switch {
	case status == 401:
		return anthropicAuthentication, status
	case status == 403:
		return anthropicPermission, status
	case status == 404:
		return anthropicNotFound, status
	case status == 413:
		return anthropicTooLarge, status
	case status == 429:
		return anthropicRateLimit, status
	case status == 503:
		return anthropicOverloaded, StatusOverloaded
	case status == 504:
		return anthropicTimeout, status
	case status >= 500:
		return anthropicAPI, status
	}
	return anthropicInvalidRequest, status
}

// AppendAnthropicError appends Anthropic's error body for e:
//
//	{"type":"error","error":{"type":"rate_limit_error","message":"…"},"request_id":"…"}
//
// The gateway's code is not written: Anthropic's clients read the type. A
// nil e is written as ErrInternal.
func AppendAnthropicError(dst []byte, e *Error, requestID []byte) []byte {
	if e == nil {
		e = ErrInternal
	}
	typ, _ := e.Code.AnthropicType()
	dst = append(dst, `{"type":"error","error":{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","message":`...)
	dst = AppendJSONString(dst, e.message())
	dst = append(dst, `},"request_id":`...)
	dst = AppendJSONBytes(dst, requestID)
	return append(dst, '}')
}

// AnthropicStopReason maps a chat finish reason to Anthropic's stop_reason.
func AnthropicStopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// AppendAnthropicUsage appends the usage object: input_tokens is the input
// billed at the full rate, as Anthropic counts it (cache reads apart).
func AppendAnthropicUsage(dst []byte, b *Bill) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, b.BillableInput(), 10)
	dst = append(dst, `,"cache_creation_input_tokens":`...)
	dst = strconv.AppendInt(dst, b.CacheWriteTokens, 10)
	dst = append(dst, `,"cache_read_input_tokens":`...)
	dst = strconv.AppendInt(dst, b.CacheReadTokens, 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, b.OutputTokens, 10)
	return append(dst, '}')
}

func appendAnthropicEvent(dst []byte, name string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, name...)
	return append(dst, '"')
}

// AppendAnthropicMessageStart appends message_start: the message with no
// content yet. Its usage is zero; message_delta carries the whole usage,
// input tokens included, once the upstream reported it.
func AppendAnthropicMessageStart(dst []byte, h *Head) []byte {
	dst = appendAnthropicEvent(dst, "message_start")
	dst = append(dst, `,"message":{"id":`...)
	dst = AppendJSONBytes(dst, h.ID)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = AppendJSONString(dst, h.Model)
	dst = append(dst, `,"content":[],"stop_reason":null,"stop_sequence":null,`+
		`"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}`+"\n\n"...)
	return dst
}

func appendBlockStart(dst []byte, index int) []byte {
	dst = appendAnthropicEvent(dst, "content_block_start")
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, int64(index), 10)
	return append(dst, `,"content_block":`...)
}

// AppendAnthropicTextStart opens text block index.
func AppendAnthropicTextStart(dst []byte, index int) []byte {
	dst = appendBlockStart(dst, index)
	return append(dst, `{"type":"text","text":""}}`+"\n\n"...)
}

// AppendAnthropicThinkingStart opens thinking block index.
func AppendAnthropicThinkingStart(dst []byte, index int) []byte {
	dst = appendBlockStart(dst, index)
	return append(dst, `{"type":"thinking","thinking":"","signature":""}}`+"\n\n"...)
}

// AppendAnthropicToolStart opens tool_use block index; id and name are raw
// JSON string literals.
func AppendAnthropicToolStart(dst []byte, index int, id, name []byte) []byte {
	dst = appendBlockStart(dst, index)
	dst = append(dst, `{"type":"tool_use","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"name":`...)
	dst = append(dst, name...)
	return append(dst, `,"input":{}}}`+"\n\n"...)
}

func appendBlockDelta(dst []byte, index int, kind, field string, raw []byte) []byte {
	dst = appendAnthropicEvent(dst, "content_block_delta")
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, int64(index), 10)
	dst = append(dst, `,"delta":{"type":"`...)
	dst = append(dst, kind...)
	dst = append(dst, `","`...)
	dst = append(dst, field...)
	dst = append(dst, `":`...)
	dst = append(dst, raw...)
	return append(dst, "}}\n\n"...)
}

// AppendAnthropicTextDelta appends a text_delta; text is a raw JSON string
// literal, copied as it is.
func AppendAnthropicTextDelta(dst []byte, index int, text []byte) []byte {
	return appendBlockDelta(dst, index, "text_delta", "text", text)
}

// AppendAnthropicThinkingDelta appends a thinking_delta; text is a raw JSON
// string literal.
func AppendAnthropicThinkingDelta(dst []byte, index int, text []byte) []byte {
	return appendBlockDelta(dst, index, "thinking_delta", "thinking", text)
}

// AppendAnthropicJSONDelta appends an input_json_delta; partial is a raw
// JSON string literal holding a fragment of the tool input's JSON.
func AppendAnthropicJSONDelta(dst []byte, index int, partial []byte) []byte {
	return appendBlockDelta(dst, index, "input_json_delta", "partial_json", partial)
}

// AppendAnthropicBlockStop closes block index.
func AppendAnthropicBlockStop(dst []byte, index int) []byte {
	dst = appendAnthropicEvent(dst, "content_block_stop")
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, int64(index), 10)
	return append(dst, "}\n\n"...)
}

// AppendAnthropicMessageDelta appends message_delta with the stop reason
// and the whole usage.
func AppendAnthropicMessageDelta(dst []byte, finish string, b *Bill) []byte {
	dst = appendAnthropicEvent(dst, "message_delta")
	dst = append(dst, `,"delta":{"stop_reason":"`...)
	dst = append(dst, AnthropicStopReason(finish)...)
	dst = append(dst, `","stop_sequence":null},"usage":`...)
	dst = AppendAnthropicUsage(dst, b)
	return append(dst, "}\n\n"...)
}

// AppendAnthropicMessageStop appends message_stop, the last event.
func AppendAnthropicMessageStop(dst []byte) []byte {
	return append(appendAnthropicEvent(dst, "message_stop"), "}\n\n"...)
}

// AppendAnthropicPing appends ping, the keep-alive of a quiet stream.
func AppendAnthropicPing(dst []byte) []byte {
	return append(appendAnthropicEvent(dst, "ping"), "}\n\n"...)
}

// AppendAnthropicStreamError appends the error event that ends a failed
// stream: the error body, named error.
func AppendAnthropicStreamError(dst []byte, e *Error, requestID []byte) []byte {
	dst = append(dst, "event: error\ndata: "...)
	dst = AppendAnthropicError(dst, e, requestID)
	return append(dst, "\n\n"...)
}

// AppendAnthropicMessage appends the non-streaming message: a thinking
// block when thinking is set and the answer has reasoning, a text block
// when the model said something, and a tool_use block per tool call, with
// its arguments as the input object ({} when they are not a JSON object).
func AppendAnthropicMessage(dst []byte, h *Head, a *Answer, thinking bool, b *Bill) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONBytes(dst, h.ID)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = AppendJSONString(dst, h.Model)
	dst = append(dst, `,"content":[`...)
	n := 0
	if thinking && len(a.Reasoning) > 2 {
		dst = append(dst, `{"type":"thinking","thinking":`...)
		dst = append(dst, a.Reasoning...)
		dst = append(dst, `,"signature":""}`...)
		n++
	}
	if len(a.Content) > 2 {
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":"text","text":`...)
		dst = append(dst, a.Content...)
		dst = append(dst, '}')
		n++
	}
	if a.ToolCalls != nil {
		var it ToolFragments
		var f ToolFragment
		it.Reset(a.ToolCalls)
		for it.Next(&f) {
			if n > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":"tool_use","id":`...)
			dst = appendLiteralOr(dst, f.ID, `""`)
			dst = append(dst, `,"name":`...)
			dst = appendLiteralOr(dst, f.Name, `""`)
			dst = append(dst, `,"input":`...)
			dst = AppendArgumentsObject(dst, f.Arguments)
			dst = append(dst, '}')
			n++
		}
	}
	dst = append(dst, `],"stop_reason":"`...)
	dst = append(dst, AnthropicStopReason(a.Finish)...)
	dst = append(dst, `","stop_sequence":null,"usage":`...)
	dst = AppendAnthropicUsage(dst, b)
	return append(dst, '}')
}

func appendLiteralOr(dst, lit []byte, or string) []byte {
	if lit == nil {
		return append(dst, or...)
	}
	return append(dst, lit...)
}

// AppendArgumentsObject appends the JSON object a tool call's arguments
// (a raw JSON string literal holding JSON text) encode, or {} when they do
// not encode one.
func AppendArgumentsObject(dst, args []byte) []byte {
	var s string
	if len(args) < 2 || strictJSON.Unmarshal(args, &s) != nil {
		return append(dst, "{}"...)
	}
	v := trimSpace([]byte(s))
	if len(v) == 0 || v[0] != '{' || !json.Valid(v) {
		return append(dst, "{}"...)
	}
	return append(dst, v...)
}

// AppendCountTokens appends the count_tokens answer.
func AppendCountTokens(dst []byte, n int64) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '}')
}

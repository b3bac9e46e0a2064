package codec

import "strconv"

// Head is what every frame and body of one completion repeats: the
// completion id, its creation time and the tier the client sees as model.
type Head struct {
	ID      []byte
	Created int64
	Model   string
}

// Bill is the usage and cost of one completion as the wire shows it. Token
// counts are the tier's own; prices are micro-USD per million tokens and
// the amount pico-USD (1e-12). The codec only writes what it is given: the
// amount is worked out by the metering package (meter.Cost).
type Bill struct {
	Tier              string
	InputTokens       int64 // everything the prompt cost, cached tokens included
	OutputTokens      int64 // reasoning and answer
	CacheReadTokens   int64
	CacheWriteTokens  int64
	InputPerM         int64
	OutputPerM        int64
	CacheReadPerM     int64
	AmountPico        int64
	PromptCacheActive bool // the upstream reported prompt-cache details
}

// BillableInput is the input billed at the full rate.
func (b *Bill) BillableInput() int64 { return b.InputTokens - b.CacheReadTokens }

// AppendDecimal appends v / 10^scale as a plain decimal without trailing
// zeros ("0.76", "12", "0.000001"). It allocates nothing.
func AppendDecimal(dst []byte, v int64, scale int) []byte {
	if v < 0 {
		dst = append(dst, '-')
		v = -v
	}
	pow := int64(1)
	for range scale {
		pow *= 10
	}
	dst = strconv.AppendInt(dst, v/pow, 10)
	frac := v % pow
	if frac == 0 {
		return dst
	}
	var buf [20]byte
	buf[0] = '.'
	for i := scale; i >= 1; i-- {
		buf[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := scale + 1
	for buf[n-1] == '0' {
		n--
	}
	return append(dst, buf[:n]...)
}

// AppendCost appends the cost object: tier, amount in USD, currency and the
// unit prices in USD per million tokens (as the catalogue shows them).
func AppendCost(dst []byte, b *Bill) []byte {
	dst = append(dst, `{"tier":`...)
	dst = AppendJSONString(dst, b.Tier)
	dst = append(dst, `,"amount":`...)
	dst = AppendDecimal(dst, b.AmountPico, 12)
	dst = append(dst, `,"currency":"USD","input_unit":`...)
	dst = AppendDecimal(dst, b.InputPerM, 6)
	dst = append(dst, `,"output_unit":`...)
	dst = AppendDecimal(dst, b.OutputPerM, 6)
	dst = append(dst, `,"cache_read_unit":`...)
	dst = AppendDecimal(dst, b.CacheReadPerM, 6)
	return append(dst, '}')
}

// AppendNativeUsage appends the native usage object of /api/v1/chat and
// /api/v2/chat.
func AppendNativeUsage(dst []byte, b *Bill) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, b.InputTokens, 10)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendInt(dst, b.OutputTokens, 10)
	dst = append(dst, `,"billable_input_tokens":`...)
	dst = strconv.AppendInt(dst, b.BillableInput(), 10)
	dst = append(dst, `,"cache_read_tokens":`...)
	dst = strconv.AppendInt(dst, b.CacheReadTokens, 10)
	dst = append(dst, `,"cache_write_tokens":`...)
	dst = strconv.AppendInt(dst, b.CacheWriteTokens, 10)
	dst = append(dst, `,"cost":`...)
	dst = AppendCost(dst, b)
	return append(dst, '}')
}

// AppendOpenAIUsage appends the OpenAI usage object. withCost adds the cost
// object and the additive integers of the stream usage frame (omitted when
// zero); the plain OpenAI completion carries neither.
func AppendOpenAIUsage(dst []byte, b *Bill, withCost bool) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, b.InputTokens, 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, b.OutputTokens, 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, b.InputTokens+b.OutputTokens, 10)
	if withCost {
		dst = append(dst, `,"cost":`...)
		dst = AppendCost(dst, b)
		// Each additive integer is omitted only when it is zero.
		if n := b.BillableInput(); n > 0 {
			dst = append(dst, `,"billable_input_tokens":`...)
			dst = strconv.AppendInt(dst, n, 10)
		}
		if b.CacheReadTokens > 0 {
			dst = append(dst, `,"cache_read_tokens":`...)
			dst = strconv.AppendInt(dst, b.CacheReadTokens, 10)
		}
		if b.CacheWriteTokens > 0 {
			dst = append(dst, `,"cache_write_tokens":`...)
			dst = strconv.AppendInt(dst, b.CacheWriteTokens, 10)
		}
	}
	if b.PromptCacheActive {
		dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, b.CacheReadTokens, 10)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// appendChunkHead opens an OpenAI chat.completion.chunk data line up to and
// including `"choices":[`.
func appendChunkHead(dst []byte, h *Head) []byte {
	dst = append(dst, `data: {"id":`...)
	dst = AppendJSONBytes(dst, h.ID)
	dst = append(dst, `,"object":"chat.completion.chunk","created":`...)
	dst = strconv.AppendInt(dst, h.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = AppendJSONString(dst, h.Model)
	return append(dst, `,"choices":[`...)
}

const chunkChoiceOpen = `{"index":0,"delta":`

// AppendChunkRole appends the role primer. gw, when non-nil, is the
// pre-rendered gw object the native route carries on it.
func AppendChunkRole(dst []byte, h *Head, gw []byte) []byte {
	dst = appendChunkHead(dst, h)
	dst = append(dst, chunkChoiceOpen+`{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
	if gw != nil {
		dst = append(dst, `,"gw":`...)
		dst = append(dst, gw...)
	}
	return append(dst, "}\n\n"...)
}

// AppendChunkContent appends a content delta; content is a raw JSON string
// literal, quotes included, copied as it is.
func AppendChunkContent(dst []byte, h *Head, content []byte) []byte {
	dst = appendChunkHead(dst, h)
	dst = append(dst, chunkChoiceOpen+`{"content":`...)
	dst = append(dst, content...)
	return append(dst, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// AppendChunkToolCalls appends a tool-call delta; toolCalls is the raw JSON
// array of fragments, each keeping its own index.
func AppendChunkToolCalls(dst []byte, h *Head, toolCalls []byte) []byte {
	dst = appendChunkHead(dst, h)
	dst = append(dst, chunkChoiceOpen+`{"tool_calls":`...)
	dst = append(dst, toolCalls...)
	return append(dst, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// AppendChunkFinish appends the finish frame: an empty delta and the reason.
func AppendChunkFinish(dst []byte, h *Head, reason string) []byte {
	dst = appendChunkHead(dst, h)
	dst = append(dst, chunkChoiceOpen+`{},"logprobs":null,"finish_reason":`...)
	dst = AppendJSONString(dst, reason)
	return append(dst, "}]}\n\n"...)
}

// AppendChunkUsage appends the usage frame: empty choices, the usage with
// its cost, and gw when non-nil.
func AppendChunkUsage(dst []byte, h *Head, b *Bill, gw []byte) []byte {
	dst = appendChunkHead(dst, h)
	dst = append(dst, `],"usage":`...)
	dst = AppendOpenAIUsage(dst, b, true)
	if gw != nil {
		dst = append(dst, `,"gw":`...)
		dst = append(dst, gw...)
	}
	return append(dst, "}\n\n"...)
}

// AppendDone appends the literal terminator line.
func AppendDone(dst []byte) []byte { return append(dst, "data: [DONE]\n\n"...) }

// AppendChunkError appends the data frame that ends a failed stream on the
// OpenAI route, in place of [DONE].
func AppendChunkError(dst []byte, e *Error) []byte {
	dst = append(dst, "data: "...)
	dst = AppendOpenAIError(dst, e)
	return append(dst, "\n\n"...)
}

// Routing is the v2 routing block and the gw echo of the native routes.
type Routing struct {
	Tier   string
	Mode   string // "explicit" or "auto"
	Effort string
	// FilesOmitted is the JSON array of files left out of the turn
	// (files_omitted), or nil when none was.
	FilesOmitted []byte
	// UndeclaredToolReplay is the JSON object undeclared_tool_replay, or
	// nil when every tool call the request replays names a declared tool.
	UndeclaredToolReplay []byte
}

// AppendGW appends the gw object of /api/v1/chat: request id, routed tier and
// effective effort.
func AppendGW(dst []byte, requestID []byte, r *Routing) []byte {
	dst = append(dst, `{"request_id":`...)
	dst = AppendJSONBytes(dst, requestID)
	dst = append(dst, `,"routed_tier":`...)
	dst = AppendJSONString(dst, r.Tier)
	dst = append(dst, `,"reasoning_effort":`...)
	dst = AppendJSONString(dst, r.Effort)
	dst = appendSignals(dst, r)
	return append(dst, '}')
}

// appendSignals appends the signals that apply: ,"files_omitted":[...]
// when files were left out, ,"undeclared_tool_replay":{...} when the
// history replays calls of tools the request does not declare.
func appendSignals(dst []byte, r *Routing) []byte {
	if len(r.FilesOmitted) > 0 {
		dst = append(dst, `,"files_omitted":`...)
		dst = append(dst, r.FilesOmitted...)
	}
	if len(r.UndeclaredToolReplay) > 0 {
		dst = append(dst, `,"undeclared_tool_replay":`...)
		dst = append(dst, r.UndeclaredToolReplay...)
	}
	return dst
}

func appendRouting(dst []byte, r *Routing) []byte {
	dst = append(dst, `{"tier":`...)
	dst = AppendJSONString(dst, r.Tier)
	dst = append(dst, `,"mode":`...)
	dst = AppendJSONString(dst, r.Mode)
	dst = append(dst, `,"reasoning_effort":`...)
	dst = AppendJSONString(dst, r.Effort)
	return append(dst, '}')
}

// AppendV2Start appends the start event: served tier and how it was routed.
func AppendV2Start(dst []byte, h *Head, requestID []byte, r *Routing) []byte {
	dst = append(dst, "event: start\ndata: {\"id\":"...)
	dst = AppendJSONBytes(dst, h.ID)
	dst = append(dst, `,"created":`...)
	dst = strconv.AppendInt(dst, h.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = AppendJSONString(dst, h.Model)
	dst = append(dst, `,"request_id":`...)
	dst = AppendJSONBytes(dst, requestID)
	dst = append(dst, `,"routing":`...)
	dst = appendRouting(dst, r)
	dst = appendSignals(dst, r)
	return append(dst, "}\n\n"...)
}

// AppendV2Reasoning appends a reasoning event; text is a raw JSON string.
func AppendV2Reasoning(dst []byte, text []byte) []byte {
	dst = append(dst, "event: reasoning\ndata: {\"content\":"...)
	dst = append(dst, text...)
	return append(dst, "}\n\n"...)
}

// AppendV2Content appends a delta event with a content fragment.
func AppendV2Content(dst []byte, content []byte) []byte {
	dst = append(dst, "event: delta\ndata: {\"content\":"...)
	dst = append(dst, content...)
	return append(dst, "}\n\n"...)
}

// AppendV2ToolCalls appends a delta event with tool-call fragments.
func AppendV2ToolCalls(dst []byte, toolCalls []byte) []byte {
	dst = append(dst, "event: delta\ndata: {\"tool_calls\":"...)
	dst = append(dst, toolCalls...)
	return append(dst, "}\n\n"...)
}

// AppendV2Finish appends the finish event with the final native usage.
func AppendV2Finish(dst []byte, reason string, b *Bill) []byte {
	dst = append(dst, "event: finish\ndata: {\"finish_reason\":"...)
	dst = AppendJSONString(dst, reason)
	dst = append(dst, `,"usage":`...)
	dst = AppendNativeUsage(dst, b)
	return append(dst, "}\n\n"...)
}

// AppendV2Error appends the error event that ends a failed v2 stream.
func AppendV2Error(dst []byte, e *Error, requestID []byte) []byte {
	dst = append(dst, "event: error\ndata: {\"code\":\""...)
	dst = append(dst, e.Code.String()...)
	dst = append(dst, `","message":`...)
	dst = AppendJSONString(dst, e.message())
	dst = append(dst, `,"request_id":`...)
	dst = AppendJSONBytes(dst, requestID)
	return append(dst, "}\n\n"...)
}

// Answer is a finished non-streaming completion: raw JSON spans from the
// upstream (content and reasoning as JSON string literals, tool calls as an
// array) and what the gateway decided.
type Answer struct {
	Content   []byte // nil when the model said nothing
	Reasoning []byte // nil when the tier did not reason
	ToolCalls []byte // nil when no tool was called
	Finish    string
}

func appendMessage(dst []byte, a *Answer, nullContent bool) []byte {
	dst = append(dst, `{"role":"assistant","content":`...)
	switch {
	case a.Content != nil:
		dst = append(dst, a.Content...)
	case nullContent:
		dst = append(dst, "null"...)
	default:
		dst = append(dst, `""`...)
	}
	if a.ToolCalls != nil {
		dst = append(dst, `,"tool_calls":`...)
		dst = append(dst, a.ToolCalls...)
	}
	return append(dst, '}')
}

// appendNativeHead opens a native completion: id, created (after the
// created prefix, which may name the object), model, message and finish.
func appendNativeHead(dst []byte, h *Head, a *Answer, created string) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONBytes(dst, h.ID)
	dst = append(dst, created...)
	dst = strconv.AppendInt(dst, h.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = AppendJSONString(dst, h.Model)
	dst = append(dst, `,"message":`...)
	dst = appendMessage(dst, a, false)
	dst = append(dst, `,"finish_reason":`...)
	return AppendJSONString(dst, a.Finish)
}

// AppendV1Completion appends the flattened /api/v1/chat completion.
func AppendV1Completion(dst []byte, h *Head, a *Answer, b *Bill, gw []byte) []byte {
	dst = appendNativeHead(dst, h, a, `,"object":"chat.completion","created":`)
	dst = append(dst, `,"usage":`...)
	dst = AppendNativeUsage(dst, b)
	dst = append(dst, `,"gw":`...)
	dst = append(dst, gw...)
	return append(dst, '}')
}

// AppendV2Completion appends the native /api/v2/chat completion.
func AppendV2Completion(dst []byte, h *Head, a *Answer, b *Bill, requestID []byte, r *Routing) []byte {
	dst = appendNativeHead(dst, h, a, `,"created":`)
	dst = append(dst, `,"routing":`...)
	dst = appendRouting(dst, r)
	dst = append(dst, `,"request_id":`...)
	dst = AppendJSONBytes(dst, requestID)
	dst = append(dst, `,"usage":`...)
	dst = AppendNativeUsage(dst, b)
	dst = appendSignals(dst, r)
	if a.Reasoning != nil {
		dst = append(dst, `,"reasoning":`...)
		dst = append(dst, a.Reasoning...)
	}
	return append(dst, '}')
}

// AppendOpenAICompletion appends the plain OpenAI chat.completion: no gw, no
// request id, no cost.
func AppendOpenAICompletion(dst []byte, h *Head, a *Answer, b *Bill) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONBytes(dst, h.ID)
	dst = append(dst, `,"object":"chat.completion","created":`...)
	dst = strconv.AppendInt(dst, h.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = AppendJSONString(dst, h.Model)
	dst = append(dst, `,"choices":[{"index":0,"message":`...)
	dst = appendMessage(dst, a, true)
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	dst = AppendJSONString(dst, a.Finish)
	dst = append(dst, `}],"usage":`...)
	dst = AppendOpenAIUsage(dst, b, false)
	return append(dst, '}')
}

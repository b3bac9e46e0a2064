package codec

import "errors"

// ErrMalformedChunk is returned by ParseChunk for data that is not a valid
// chat.completion.chunk.
var ErrMalformedChunk = errors.New("malformed upstream chunk")

// ErrMalformedCompletion is returned by ParseCompletion for a body that is
// not a valid chat.completion.
var ErrMalformedCompletion = errors.New("malformed upstream completion")

// Chunk is one upstream chat.completion.chunk, as spans into the parsed data
// (valid while the data is). Raw string spans keep their quotes and escapes,
// so they can be spliced into JSON output as they are.
type Chunk struct {
	// Role is choices[0].delta.role as a raw JSON string incl. quotes, or
	// nil when absent or null.
	Role []byte
	// Content is choices[0].delta.content as a raw JSON string incl. quotes
	// (escapes intact), or nil when absent or null.
	Content []byte
	// Reasoning is choices[0].delta.reasoning_content, or else
	// choices[0].delta.reasoning, as a raw JSON string incl. quotes, or nil
	// when both are absent or null.
	Reasoning []byte
	// ToolCalls is the raw JSON array choices[0].delta.tool_calls, or nil
	// when absent or null.
	ToolCalls []byte
	// FinishReason is the contents of the choices[0].finish_reason string
	// without its quotes (such as stop, length or tool_calls; escapes, if
	// any, left as they are), or nil when absent or null.
	FinishReason []byte
	// Usage is valid when HasUsage is true.
	Usage Usage
	// HasUsage reports that the chunk carries a "usage" object.
	HasUsage bool
	// NoChoices reports that "choices" is an empty array, as in the
	// usage-only chunk that ends an OpenAI stream.
	NoChoices bool
	// Error is the raw JSON value of a top-level "error" member (an upstream
	// error frame), or nil when absent or null. It is an object from
	// OpenAI-compatible servers; a few send a plain string.
	Error []byte
}

// Usage is a token count report. Counts that are absent or null are zero.
type Usage struct {
	PromptTokens     int64 // prompt_tokens
	CompletionTokens int64 // completion_tokens
	TotalTokens      int64 // total_tokens
	// CachedTokens is prompt_tokens_details.cached_tokens, or DeepSeek's
	// prompt_cache_hit_tokens when that is absent.
	CachedTokens int64
	// ReasoningTokens is completion_tokens_details.reasoning_tokens.
	ReasoningTokens int64
}

// Completion is a non-streaming chat.completion, as spans into the parsed
// body (valid while the body is). Its fields mean what the same fields of
// Chunk mean, read from choices[0].message instead of choices[0].delta.
type Completion struct {
	Content      []byte // raw JSON string incl. quotes, or nil
	Reasoning    []byte // raw JSON string incl. quotes, or nil
	ToolCalls    []byte // raw JSON array, or nil
	FinishReason []byte // without quotes, or nil
	Usage        Usage  // valid when HasUsage
	HasUsage     bool
	Error        []byte // raw JSON value of a top-level "error", or nil
}

// ParseChunk parses the data of one upstream SSE event as a
// chat.completion.chunk into c, which it resets first. Only choices[0] is
// read; other choices are validated and skipped, as are unknown members.
// The whole of data must be one valid JSON object (surrounding whitespace
// allowed); the members read must have their documented types (strings,
// arrays or objects, or null), and token counts must be non-negative
// integers. Otherwise it returns ErrMalformedChunk and leaves c zero.
//
// ParseChunk does not allocate. It does not recognize the "[DONE]"
// sentinel, which is not JSON: check for it first.
func ParseChunk(data []byte, c *Chunk) error {
	*c = Chunk{}
	var p openAIParse
	if !p.parse(data, "delta") {
		return ErrMalformedChunk
	}
	c.Role = p.msg.role
	c.Content = p.msg.content
	c.Reasoning = p.msg.reasoning()
	c.ToolCalls = p.msg.toolCalls
	c.FinishReason = p.finishReason
	c.Usage = p.usage
	c.HasUsage = p.hasUsage
	c.NoChoices = p.noChoices
	c.Error = p.errValue
	return nil
}

// ParseCompletion parses a non-streaming chat.completion body into c, which
// it resets first, under the rules of ParseChunk with choices[0].message in
// place of choices[0].delta. It returns ErrMalformedCompletion for a body
// it refuses, and does not allocate.
func ParseCompletion(body []byte, c *Completion) error {
	*c = Completion{}
	var p openAIParse
	if !p.parse(body, "message") {
		return ErrMalformedCompletion
	}
	c.Content = p.msg.content
	c.Reasoning = p.msg.reasoning()
	c.ToolCalls = p.msg.toolCalls
	c.FinishReason = p.finishReason
	c.Usage = p.usage
	c.HasUsage = p.hasUsage
	c.Error = p.errValue
	return nil
}

// openAIParse holds the parts of a chunk or a completion as they are read.
type openAIParse struct {
	msg          messageSpans
	finishReason []byte
	usage        Usage
	hasUsage     bool
	noChoices    bool
	errValue     []byte
}

// messageSpans are the parts read from a delta or a message.
type messageSpans struct {
	role, content, toolCalls      []byte
	reasoningContent, reasoningV2 []byte // reasoning_content and reasoning
}

// reasoning returns reasoning_content, or reasoning when that is nil.
func (m *messageSpans) reasoning() []byte {
	if m.reasoningContent != nil {
		return m.reasoningContent
	}
	return m.reasoningV2
}

// parse reads the top-level object in b; msgKey names the member of
// choices[0] that holds the message ("delta" or "message"). A member that
// appears twice is read twice, and the last one wins, as in encoding/json.
func (p *openAIParse) parse(b []byte, msgKey string) bool {
	var it objectIter
	if !it.start(b, 0) {
		return false
	}
	for key, ok := it.next(); ok; key, ok = it.next() {
		var good bool
		switch string(key) {
		case "choices":
			good = p.parseChoices(&it, msgKey)
		case "usage":
			p.usage, p.hasUsage = Usage{}, false
			if !isNull(&it) {
				p.hasUsage = true
				it.pos, good = parseUsage(b, it.pos, &p.usage)
			} else {
				good = true
			}
		case "error":
			p.errValue = nil
			var v []byte
			if v, good = it.value(); good && !(len(v) == 4 && string(v) == "null") {
				p.errValue = v
			}
		default:
			_, good = it.value()
		}
		if !good {
			return false
		}
	}
	return it.err == nil && skipSpace(b, it.pos) == len(b)
}

// parseChoices reads the "choices" member at it.pos: an array (or null)
// whose first element is a choice object.
func (p *openAIParse) parseChoices(it *objectIter, msgKey string) bool {
	p.msg, p.finishReason, p.noChoices = messageSpans{}, nil, false
	if isNull(it) {
		return true
	}
	var ai arrayIter
	if !ai.start(it.b, it.pos) {
		return false
	}
	for ai.next() {
		if ai.n > 1 {
			ai.skip()
			continue
		}
		var ok bool
		if ai.pos, ok = p.parseChoice(ai.b, ai.pos, msgKey); !ok {
			return false
		}
	}
	if ai.err != nil {
		return false
	}
	p.noChoices = ai.n == 0
	it.pos = ai.pos
	return true
}

// parseChoice reads the choice object at b[i] and returns the index past it.
func (p *openAIParse) parseChoice(b []byte, i int, msgKey string) (int, bool) {
	var it objectIter
	if !it.start(b, i) {
		return it.pos, false
	}
	for key, ok := it.next(); ok; key, ok = it.next() {
		good := true
		switch {
		case string(key) == msgKey:
			p.msg = messageSpans{}
			if !isNull(&it) {
				it.pos, good = parseMessage(b, it.pos, &p.msg)
			}
		case string(key) == "finish_reason":
			var raw []byte
			raw, good = stringOrNull(&it)
			p.finishReason = nil
			if raw != nil {
				p.finishReason = raw[1 : len(raw)-1]
			}
		default:
			_, good = it.value()
		}
		if !good {
			return it.pos, false
		}
	}
	return it.pos, it.err == nil
}

// parseMessage reads the delta or message object at b[i] into m and
// returns the index past it.
func parseMessage(b []byte, i int, m *messageSpans) (int, bool) {
	var it objectIter
	if !it.start(b, i) {
		return it.pos, false
	}
	for key, ok := it.next(); ok; key, ok = it.next() {
		var good bool
		switch string(key) {
		case "role":
			m.role, good = stringOrNull(&it)
		case "content":
			m.content, good = stringOrNull(&it)
		case "reasoning_content":
			m.reasoningContent, good = stringOrNull(&it)
		case "reasoning":
			m.reasoningV2, good = stringOrNull(&it)
		case "tool_calls":
			m.toolCalls = nil
			if isNull(&it) {
				good = true
			} else if it.pos < len(b) && b[it.pos] == '[' {
				m.toolCalls, good = it.value()
			}
		default:
			_, good = it.value()
		}
		if !good {
			return it.pos, false
		}
	}
	return it.pos, it.err == nil
}

// parseUsage reads the usage object at b[i] into u and returns the index
// past it.
func parseUsage(b []byte, i int, u *Usage) (int, bool) {
	var it objectIter
	if !it.start(b, i) {
		return it.pos, false
	}
	var cached, cacheHit int64
	hasCached := false
	for key, ok := it.next(); ok; key, ok = it.next() {
		var good bool
		switch string(key) {
		case "prompt_tokens":
			u.PromptTokens, good = tokenCount(&it)
		case "completion_tokens":
			u.CompletionTokens, good = tokenCount(&it)
		case "total_tokens":
			u.TotalTokens, good = tokenCount(&it)
		case "prompt_cache_hit_tokens":
			cacheHit, good = tokenCount(&it)
		case "prompt_tokens_details":
			cached, hasCached, good = detailCount(&it, "cached_tokens")
		case "completion_tokens_details":
			u.ReasoningTokens, _, good = detailCount(&it, "reasoning_tokens")
		default:
			_, good = it.value()
		}
		if !good {
			return it.pos, false
		}
	}
	if hasCached {
		u.CachedTokens = cached
	} else {
		u.CachedTokens = cacheHit
	}
	return it.pos, it.err == nil
}

// detailCount reads the details object (or null) at it.pos and returns its
// member named key as a token count, and whether the member was there and
// not null.
func detailCount(it *objectIter, key string) (n int64, found, ok bool) {
	if isNull(it) {
		return 0, false, true
	}
	var d objectIter
	if !d.start(it.b, it.pos) {
		return 0, false, false
	}
	for k, more := d.next(); more; k, more = d.next() {
		if string(k) != key {
			if _, good := d.value(); !good {
				return 0, false, false
			}
			continue
		}
		found = d.pos < len(d.b) && d.b[d.pos] != 'n'
		if n, ok = tokenCount(&d); !ok {
			return 0, false, false
		}
	}
	if d.err != nil {
		return 0, false, false
	}
	it.pos = d.pos
	return n, found, true
}

// tokenCount reads a token count at it.pos: a non-negative integer, or null
// for zero.
func tokenCount(it *objectIter) (int64, bool) {
	if isNull(it) {
		return 0, true
	}
	b, start := it.b, it.pos
	end, err := skipNumber(b, start)
	if err != nil {
		it.pos, it.err = end, err
		return 0, false
	}
	it.pos = end
	n, ok := parseInt(b[start:end])
	return n, ok && n >= 0
}

// stringOrNull reads a string or null at it.pos and returns the raw string
// incl. quotes, or nil for null. Any other value is refused.
func stringOrNull(it *objectIter) ([]byte, bool) {
	if isNull(it) {
		return nil, true
	}
	b, start := it.b, it.pos
	if start >= len(b) || b[start] != '"' {
		return nil, false
	}
	end, err := skipString(b, start)
	if err != nil {
		it.pos, it.err = end, err
		return nil, false
	}
	it.pos = end
	return b[start:end], true
}

// isNull reports whether a null literal is at it.pos, and if so skips it.
func isNull(it *objectIter) bool {
	b, i := it.b, it.pos
	if len(b)-i >= 4 && string(b[i:i+4]) == "null" {
		it.pos = i + 4
		return true
	}
	return false
}

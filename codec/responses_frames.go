package codec

import (
	"bytes"
	"slices"
	"strconv"
)

// ResponseOutput is the output of one Responses API response as it is
// built: its items in order, their text and arguments kept as the inner
// bytes of the JSON string literals they came in (escapes intact), so they
// are written back without decoding. Only the last item grows. Reset keeps
// its buffers: building allocates nothing once they have grown.
type ResponseOutput struct {
	Items []ResponseItem
	Buf   []byte
}

// ResponseItem is one output item: a message (its text) or a function call
// (its call id, name and arguments). Spans index ResponseOutput.Buf.
type ResponseItem struct {
	Call bool
	Done bool
	// Cut marks the item a budget or a filter cut short: done, its status
	// is incomplete.
	Cut                bool
	callID, name, text span
}

type span struct{ from, to int }

func (o *ResponseOutput) bytes(s span) []byte { return o.Buf[s.from:s.to] }

// Reset empties o, keeping its buffers.
func (o *ResponseOutput) Reset() { o.Items, o.Buf = o.Items[:0], o.Buf[:0] }

// Len is the number of items.
func (o *ResponseOutput) Len() int { return len(o.Items) }

// Last is the last item, or nil.
func (o *ResponseOutput) Last() *ResponseItem {
	if len(o.Items) == 0 {
		return nil
	}
	return &o.Items[len(o.Items)-1]
}

// AddMessage adds a message item with no text yet.
func (o *ResponseOutput) AddMessage() {
	n := len(o.Buf)
	o.Items = append(o.Items, ResponseItem{text: span{n, n}})
}

// AddCall adds a function call item; callID and name are raw JSON string
// literals.
func (o *ResponseOutput) AddCall(callID, name []byte) {
	it := ResponseItem{Call: true}
	it.callID.from = len(o.Buf)
	o.Buf = append(o.Buf, inner(callID)...)
	it.callID.to = len(o.Buf)
	it.name.from = it.callID.to
	o.Buf = append(o.Buf, inner(name)...)
	it.name.to = len(o.Buf)
	it.text = span{len(o.Buf), len(o.Buf)}
	o.Items = append(o.Items, it)
}

// AppendText appends a raw JSON string literal to the last item's text (a
// message's) or arguments (a call's).
func (o *ResponseOutput) AppendText(lit []byte) {
	it := o.Last()
	o.Buf = append(o.Buf, inner(lit)...)
	it.text.to = len(o.Buf)
}

// inner is a string literal without its quotes.
func inner(lit []byte) []byte {
	if len(lit) < 2 {
		return nil
	}
	return lit[1 : len(lit)-1]
}

// ResponseHead is what the response object repeats in every event that
// carries it.
type ResponseHead struct {
	ID        []byte // resp_…
	CreatedAt int64
	Model     string
	MaxOutput int64
	// Serial echoes a request's parallel_tool_calls: false; the zero value
	// is OpenAI's default, true.
	Serial bool
	// Echo is the request's fields every response object repeats
	// (AppendResponseEcho), as members without braces.
	Echo []byte
}

// AppendResponseEcho appends the members a response object repeats from
// its request, as OpenAI's does and the SDKs' types require: instructions
// (null when none), metadata ({} when none), temperature and top_p (null
// when not sent), tool_choice ("auto" when not sent) and tools ([] when
// none), each tool as a function tool.
func AppendResponseEcho(dst []byte, r *ResponsesRequest) []byte {
	dst = append(dst, `"instructions":`...)
	if r.Instructions != nil {
		dst = AppendJSONString(dst, *r.Instructions)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"metadata":{`...)
	if len(r.Metadata) > 0 {
		keys := make([]string, 0, len(r.Metadata))
		for k := range r.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendJSONString(dst, k)
			dst = append(dst, ':')
			dst = AppendJSONString(dst, r.Metadata[k])
		}
	}
	dst = append(dst, `},"temperature":`...)
	dst = appendOptFloat(dst, r.Temperature)
	dst = append(dst, `,"tool_choice":`...)
	if tc := trimSpace(r.ToolChoice); len(tc) > 0 && !bytes.Equal(tc, []byte("null")) {
		dst = append(dst, tc...)
	} else {
		dst = append(dst, `"auto"`...)
	}
	dst = append(dst, `,"tools":[`...)
	for i := range r.Tools {
		t := &r.Tools[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":"function","name":`...)
		dst = AppendJSONString(dst, t.Name)
		dst = append(dst, `,"description":`...)
		if t.Description != "" {
			dst = AppendJSONString(dst, t.Description)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `,"parameters":`...)
		if p := trimSpace(t.Parameters); len(p) > 0 {
			dst = append(dst, p...)
		} else {
			dst = append(dst, "null"...)
		}
		dst = append(dst, `,"strict":`...)
		dst = strconv.AppendBool(dst, t.Strict == nil || *t.Strict)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"top_p":`...)
	return appendOptFloat(dst, r.TopP)
}

func appendOptFloat(dst []byte, f *float64) []byte {
	if f == nil {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, *f, 'g', -1, 64)
}

// AppendResponseItemID appends the id of item i: msg_ or fc_, the
// response id's suffix and the item's index.
func AppendResponseItemID(dst []byte, h *ResponseHead, i int, call bool) []byte {
	if call {
		dst = append(dst, `"fc_`...)
	} else {
		dst = append(dst, `"msg_`...)
	}
	id := h.ID
	if len(id) > 5 {
		id = id[5:]
	}
	dst = append(dst, id...)
	dst = append(dst, '_')
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, '"')
}

// appendItem appends item i in full: status completed when it is done
// (incomplete when it was cut short), in_progress otherwise.
func appendItem(dst []byte, h *ResponseHead, o *ResponseOutput, i int) []byte {
	it := &o.Items[i]
	status := `"in_progress"`
	switch {
	case it.Done && it.Cut:
		status = `"incomplete"`
	case it.Done:
		status = `"completed"`
	}
	if it.Call {
		dst = append(dst, `{"type":"function_call","id":`...)
		dst = AppendResponseItemID(dst, h, i, true)
		dst = append(dst, `,"call_id":"`...)
		dst = append(dst, o.bytes(it.callID)...)
		dst = append(dst, `","name":"`...)
		dst = append(dst, o.bytes(it.name)...)
		dst = append(dst, `","arguments":"`...)
		dst = append(dst, o.bytes(it.text)...)
		dst = append(dst, `","status":`...)
		dst = append(dst, status...)
		return append(dst, '}')
	}
	dst = append(dst, `{"type":"message","id":`...)
	dst = AppendResponseItemID(dst, h, i, false)
	dst = append(dst, `,"status":`...)
	dst = append(dst, status...)
	dst = append(dst, `,"role":"assistant","content":[`...)
	if it.Done {
		dst = appendTextPart(dst, o.bytes(it.text), true)
	}
	return append(dst, "]}"...)
}

func appendTextPart(dst, text []byte, logprobs bool) []byte {
	dst = append(dst, `{"type":"output_text","text":"`...)
	dst = append(dst, text...)
	dst = append(dst, `","annotations":[]`...)
	if logprobs {
		dst = append(dst, `,"logprobs":[]`...)
	}
	return append(dst, '}')
}

// ResponseEnd is how a response ended, for its object.
type ResponseEnd struct {
	Status string // in_progress, completed, incomplete or failed
	// Incomplete is the reason of an incomplete response:
	// max_output_tokens or content_filter.
	Incomplete string
	Err        *Error // of a failed response
	// Bill and ReasoningTokens fill usage when Bill is set.
	Bill            *Bill
	ReasoningTokens int64
}

// AppendResponse appends the response object: its head, status, the items
// of o (none while in progress), and the usage once known.
func AppendResponse(dst []byte, h *ResponseHead, o *ResponseOutput, e *ResponseEnd) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendJSONBytes(dst, h.ID)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, h.CreatedAt, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, e.Status...)
	dst = append(dst, `","error":`...)
	if e.Err != nil {
		dst = append(dst, `{"code":"`...)
		dst = append(dst, e.Err.Code.String()...)
		dst = append(dst, `","message":`...)
		dst = AppendJSONString(dst, e.Err.message())
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if e.Incomplete != "" {
		dst = append(dst, `{"reason":"`...)
		dst = append(dst, e.Incomplete...)
		dst = append(dst, `"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"model":`...)
	dst = AppendJSONString(dst, h.Model)
	dst = append(dst, `,"max_output_tokens":`...)
	dst = strconv.AppendInt(dst, h.MaxOutput, 10)
	dst = append(dst, `,"output":[`...)
	if o != nil && e.Status != "in_progress" {
		n := 0
		for i := range o.Items {
			if !o.Items[i].Done {
				continue
			}
			if n > 0 {
				dst = append(dst, ',')
			}
			dst = appendItem(dst, h, o, i)
			n++
		}
	}
	if h.Serial {
		dst = append(dst, `],"parallel_tool_calls":false`...)
	} else {
		dst = append(dst, `],"parallel_tool_calls":true`...)
	}
	dst = append(dst, `,"previous_response_id":null,"store":false,`...)
	dst = append(dst, h.Echo...)
	if len(h.Echo) > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `"usage":`...)
	if b := e.Bill; b != nil {
		dst = append(dst, `{"input_tokens":`...)
		dst = strconv.AppendInt(dst, b.InputTokens, 10)
		dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, b.CacheReadTokens, 10)
		dst = append(dst, `},"output_tokens":`...)
		dst = strconv.AppendInt(dst, b.OutputTokens, 10)
		dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":`...)
		dst = strconv.AppendInt(dst, e.ReasoningTokens, 10)
		dst = append(dst, `},"total_tokens":`...)
		dst = strconv.AppendInt(dst, b.InputTokens+b.OutputTokens, 10)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, '}')
}

// AppendResponseEventHead opens a named event up to its sequence number;
// the caller appends the event's other members and closes it with
// CloseResponseEvent.
func AppendResponseEventHead(dst []byte, name string, seq int64) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, name...)
	dst = append(dst, `","sequence_number":`...)
	return strconv.AppendInt(dst, seq, 10)
}

// CloseResponseEvent closes an event opened by AppendResponseEventHead.
func CloseResponseEvent(dst []byte) []byte { return append(dst, "}\n\n"...) }

// AppendResponseStateEvent appends an event carrying the whole response:
// response.created, response.in_progress, response.completed,
// response.incomplete or response.failed.
func AppendResponseStateEvent(dst []byte, name string, seq int64, h *ResponseHead, o *ResponseOutput, e *ResponseEnd) []byte {
	dst = AppendResponseEventHead(dst, name, seq)
	dst = append(dst, `,"response":`...)
	dst = AppendResponse(dst, h, o, e)
	return CloseResponseEvent(dst)
}

func appendItemRef(dst []byte, h *ResponseHead, i int, call bool) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = AppendResponseItemID(dst, h, i, call)
	dst = append(dst, `,"output_index":`...)
	return strconv.AppendInt(dst, int64(i), 10)
}

// AppendResponseItemAdded appends response.output_item.added for item i
// and, for a message, response.content_part.added for its one text part.
func AppendResponseItemAdded(dst []byte, seq *int64, h *ResponseHead, o *ResponseOutput, i int) []byte {
	dst = AppendResponseEventHead(dst, "response.output_item.added", *seq)
	*seq++
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"item":`...)
	dst = appendItem(dst, h, o, i)
	dst = CloseResponseEvent(dst)
	if o.Items[i].Call {
		return dst
	}
	dst = AppendResponseEventHead(dst, "response.content_part.added", *seq)
	*seq++
	dst = appendItemRef(dst, h, i, false)
	dst = append(dst, `,"content_index":0,"part":`...)
	dst = appendTextPart(dst, nil, false)
	return CloseResponseEvent(dst)
}

// AppendResponseTextDelta appends response.output_text.delta (a message's)
// or response.function_call_arguments.delta (a call's) for item i; delta
// is a raw JSON string literal.
func AppendResponseTextDelta(dst []byte, seq int64, h *ResponseHead, i int, call bool, delta []byte) []byte {
	if call {
		dst = AppendResponseEventHead(dst, "response.function_call_arguments.delta", seq)
		dst = appendItemRef(dst, h, i, true)
		dst = append(dst, `,"delta":`...)
		dst = append(dst, delta...)
		return CloseResponseEvent(dst)
	}
	dst = AppendResponseEventHead(dst, "response.output_text.delta", seq)
	dst = appendItemRef(dst, h, i, false)
	dst = append(dst, `,"content_index":0,"delta":`...)
	dst = append(dst, delta...)
	dst = append(dst, `,"logprobs":[]`...)
	return CloseResponseEvent(dst)
}

// AppendResponseItemDone marks item i done and appends the events that
// close it: for a message response.output_text.done and
// response.content_part.done, for a call
// response.function_call_arguments.done; then response.output_item.done.
func AppendResponseItemDone(dst []byte, seq *int64, h *ResponseHead, o *ResponseOutput, i int) []byte {
	it := &o.Items[i]
	it.Done = true
	if it.Call {
		dst = AppendResponseEventHead(dst, "response.function_call_arguments.done", *seq)
		*seq++
		dst = appendItemRef(dst, h, i, true)
		dst = append(dst, `,"name":"`...)
		dst = append(dst, o.bytes(it.name)...)
		dst = append(dst, `","arguments":"`...)
		dst = append(dst, o.bytes(it.text)...)
		dst = append(dst, '"')
		dst = CloseResponseEvent(dst)
	} else {
		dst = AppendResponseEventHead(dst, "response.output_text.done", *seq)
		*seq++
		dst = appendItemRef(dst, h, i, false)
		dst = append(dst, `,"content_index":0,"text":"`...)
		dst = append(dst, o.bytes(it.text)...)
		dst = append(dst, `","logprobs":[]`...)
		dst = CloseResponseEvent(dst)
		dst = AppendResponseEventHead(dst, "response.content_part.done", *seq)
		*seq++
		dst = appendItemRef(dst, h, i, false)
		dst = append(dst, `,"content_index":0,"part":`...)
		dst = appendTextPart(dst, o.bytes(it.text), false)
		dst = CloseResponseEvent(dst)
	}
	dst = AppendResponseEventHead(dst, "response.output_item.done", *seq)
	*seq++
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"item":`...)
	dst = appendItem(dst, h, o, i)
	return CloseResponseEvent(dst)
}

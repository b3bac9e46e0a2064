package sim

import (
	"bufio"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// defaultReplyTokens is the reply length when no tokens directive sets
// it (capped by what max_tokens leaves after reasoning), so an ordinary
// prompt gets an ordinary answer rather than the tier's whole budget.
const defaultReplyTokens = 64

// chatRequest is the part of an OpenAI chat request the simulator reads.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Tools               []chatTool      `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ReasoningEffort     *string         `json:"reasoning_effort"`
	ResponseFormat      *responseFormat `json:"response_format"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	} `json:"json_schema"`
}

type toolChoice struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

// Kinds of token chunks.
const (
	chunkReasoning = iota
	chunkContent
	chunkToolHead // a tool call's first fragment: id, type and name
	chunkToolArgs // a piece of a tool call's arguments
)

// chunk is one token of a reply: one chunk of a stream.
type chunk struct {
	kind uint8
	call int // index of the tool call, for tool chunks
	text string
}

type toolCall struct {
	id, name, arguments string
}

// reply is everything needed to answer one chat request. It holds no
// reference to the request, so a stream writer may use it after the handler
// returned.
type reply struct {
	id, model    string
	created      int64
	chunks       []chunk // after the max_tokens cap
	calls        []toolCall
	content      string
	reasoning    string
	finish       string
	prompt       int
	reasoningN   int
	includeUsage bool
	ttft, itl    time.Duration

	fault      int // faultStallAfter, faultMalformedAfter, faultNoDone or faultNone
	faultAfter int
	dropAfter  int // -1 when not dropping
}

func (r *reply) completion() int { return len(r.chunks) }

func (s *Server) chat(ctx *fasthttp.RequestCtx) {
	body := append([]byte(nil), ctx.PostBody()...) // outlives the handler in a stream
	if e := validateChat(body); e != nil {
		// A refusal says the caller sent what the real APIs refuse: logged
		// by where and why, never with the request's content.
		s.log.Warn("simulator refused a malformed chat request", "param", e.param, "code", e.code)
		writeError(ctx, fasthttp.StatusBadRequest, e.msg, "invalid_request_error", e.param, e.code)
		return
	}
	var req chatRequest
	if err := sonic.Unmarshal(body, &req); err != nil {
		badRequest(ctx, "", "cannot decode request body: "+err.Error())
		return
	}
	if req.Model == "" {
		badRequest(ctx, "model", "model is required")
		return
	}
	if len(req.Messages) == 0 {
		badRequest(ctx, "messages", "messages must be a non-empty array")
		return
	}
	budget, capped := -1, false
	for _, mt := range []*int{req.MaxCompletionTokens, req.MaxTokens} {
		if mt != nil {
			if *mt < 1 {
				badRequest(ctx, "max_tokens", "max_tokens must be at least 1")
				return
			}
			budget, capped = *mt, true
		}
	}
	msgs := make([]tokens.Message, len(req.Messages))
	lastUser := -1
	for i := range req.Messages {
		m := &req.Messages[i]
		text, err := contentText(m.Content)
		if err != nil {
			badRequest(ctx, "messages["+strconv.Itoa(i)+"].content", err.Error())
			return
		}
		msgs[i] = tokens.Message{Role: m.Role, Content: text, Name: m.Name, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, tokens.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		if m.Role == "user" {
			lastUser = i
		}
	}
	tools := make([]tokens.Tool, len(req.Tools))
	for i, t := range req.Tools {
		if t.Function.Name == "" {
			badRequest(ctx, "tools["+strconv.Itoa(i)+"].function.name", "a tool needs a function name")
			return
		}
		if len(t.Function.Parameters) > 0 && !sonic.Valid(t.Function.Parameters) {
			badRequest(ctx, "tools["+strconv.Itoa(i)+"].function.parameters", "parameters is not valid JSON")
			return
		}
		tools[i] = tokens.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters}
	}
	var d directives
	if lastUser >= 0 {
		var err error
		if d, err = parseDirectives(msgs[lastUser].Content); err != nil {
			badRequest(ctx, "messages", err.Error())
			return
		}
	} else {
		d, _ = parseDirectives("")
	}
	seed := hashBytes(body) ^ s.cfg.Seed
	prompt := tokens.CountChatLimit(msgs, tools, maxPromptTokens)
	if prompt > maxPromptTokens {
		contextTooLong(ctx, prompt)
		return
	}

	r := &reply{
		id:           "chatcmpl-sim-" + hex16(seed),
		model:        req.Model,
		created:      s.created,
		prompt:       prompt,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		ttft:         s.cfg.TTFT,
		itl:          s.cfg.ITL,
		dropAfter:    d.dropAfter,
	}
	if d.hasTTFT {
		r.ttft = d.ttft
	}
	if d.hasITL {
		r.itl = d.itl
	}
	if d.fault == faultStallAfter || d.fault == faultMalformedAfter || d.fault == faultNoDone {
		r.fault, r.faultAfter = d.fault, d.faultAfter
	}

	// A memory extractor's request: a json_schema response format with a
	// facts or facts_fault directive in the turn it reads.
	extractor := req.ResponseFormat != nil && req.ResponseFormat.Type == "json_schema" &&
		(d.facts != nil || d.factsFault != "")
	if extractor {
		switch d.factsFault {
		case "hang":
			s.hang(ctx)
			return
		case "error":
			statusError(ctx, fasthttp.StatusInternalServerError)
			return
		}
	}

	// What the reply is made of, before the max_tokens cap.
	calls, err := chooseCalls(&req, &d, msgs)
	if err != nil {
		badRequest(ctx, "tools", err.Error())
		return
	}
	var wanted []chunk
	if n := d.reasoning; n > 0 && (req.ReasoningEffort == nil || *req.ReasoningEffort != "none") {
		wanted = appendWordChunks(wanted, chunkReasoning, mix(seed, 1), n)
	}
	reasoningWanted := len(wanted)
	switch {
	case len(calls) > 0:
		r.calls = make([]toolCall, len(calls))
		for i, t := range calls {
			args, err := toolArguments(t.Function.Parameters)
			if err != nil {
				badRequest(ctx, "tools", "cannot read the parameters of "+strconv.Quote(t.Function.Name)+": "+err.Error())
				return
			}
			r.calls[i] = toolCall{id: "tc_" + hex16(mix(seed, uint64(2+i))), name: t.Function.Name, arguments: args}
		}
		wanted = appendCallChunks(wanted, r.calls)
	case isGuard(req.Model):
		wanted = appendTextChunks(wanted, guardVerdict(msgs, lastUser, &d))
	case extractor:
		wanted = appendTextChunks(wanted, factsContent(d.facts))
	case d.hasReply:
		wanted = appendTextChunks(wanted, d.reply)
	case d.json || d.jsonInvalid || (req.ResponseFormat != nil && req.ResponseFormat.Type != "" && req.ResponseFormat.Type != "text"):
		text, err := jsonContent(req.ResponseFormat, d.jsonInvalid, seed)
		if err != nil {
			badRequest(ctx, "response_format", "cannot read the schema: "+err.Error())
			return
		}
		wanted = appendTextChunks(wanted, text)
	default:
		n := defaultReplyTokens
		switch {
		case d.tokens >= 0:
			n = d.tokens
		case capped:
			n = min(defaultReplyTokens, max(budget-reasoningWanted, 0))
		}
		wanted = appendWordChunks(wanted, chunkContent, seed, n)
	}

	// The cap: reasoning is spent first, then the rest in order.
	r.chunks = wanted
	r.finish = "stop"
	if len(r.calls) > 0 {
		r.finish = "tool_calls"
	}
	if capped && (len(wanted) > budget || (reasoningWanted >= budget && reasoningWanted > 0)) {
		r.chunks = wanted[:min(len(wanted), budget)]
		r.finish = "length"
	}
	r.assemble()
	if d.finish != "" {
		r.finish = d.finish
	}

	if s.applyErrors(ctx, &d, seed, prompt, max(budget, defaultReplyTokens)) {
		return
	}
	if req.Stream {
		s.stream(ctx, r)
		return
	}
	s.complete(ctx, r)
}

// contentText is the text of a message's content: a string, null, or the
// text parts of an array joined by newlines (other parts are skipped).
func contentText(raw json.RawMessage) (string, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := sonic.Unmarshal(raw, &s)
		return s, err
	case '[':
		var parts []contentPart
		if err := sonic.Unmarshal(raw, &parts); err != nil {
			return "", err
		}
		var b strings.Builder
		n := 0
		for _, p := range parts {
			if p.Type == "text" {
				if n > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Text)
				n++
			}
		}
		return b.String(), nil
	}
	return "", errContent
}

var errContent = simError("content must be a string, null or an array of parts")

// chooseCalls returns the tools the reply calls: those a tool directive
// names (unless the conversation ends with a tool result, so that a tool
// loop ends in a text answer), only the first of them when
// parallel_tool_calls is false, as OpenAI's models then call one; else the
// one tool_choice names, else the first tool when tool_choice is
// "required".
func chooseCalls(req *chatRequest, d *directives, msgs []tokens.Message) ([]*chatTool, error) {
	find := func(name string) *chatTool {
		for i := range req.Tools {
			if req.Tools[i].Function.Name == name {
				return &req.Tools[i]
			}
		}
		return nil
	}
	if len(d.tools) > 0 && msgs[len(msgs)-1].Role != "tool" {
		calls := make([]*chatTool, len(d.tools))
		for i, name := range d.tools {
			if calls[i] = find(name); calls[i] == nil {
				return nil, simError("tool " + strconv.Quote(name) + " is not declared in tools")
			}
		}
		if p := req.ParallelToolCalls; p != nil && !*p {
			calls = calls[:1]
		}
		return calls, nil
	}
	choice := strings.TrimSpace(string(req.ToolChoice))
	switch {
	case choice == `"required"` && len(req.Tools) > 0:
		return []*chatTool{&req.Tools[0]}, nil
	case strings.HasPrefix(choice, "{"):
		var tc toolChoice
		if err := sonic.UnmarshalString(choice, &tc); err != nil {
			return nil, simError("cannot decode tool_choice: " + err.Error())
		}
		t := find(tc.Function.Name)
		if t == nil {
			return nil, simError("tool_choice names " + strconv.Quote(tc.Function.Name) + ", which is not declared in tools")
		}
		return []*chatTool{t}, nil
	}
	return nil, nil
}

// toolArguments is a minimal JSON instance of a tool's parameters schema.
func toolArguments(params json.RawMessage) (string, error) {
	schema, err := decodeSchema(params)
	if err != nil {
		return "", err
	}
	if m, ok := schema.(map[string]any); ok && len(m) == 0 {
		return "{}", nil
	}
	g := schemaGen{root: schema}
	return string(g.appendValid(nil)), nil
}

// jsonContent is the content of a JSON reply: an instance of the
// json_schema, valid or not; without a schema, a small object, or when
// invalid, an unterminated one.
// factsContent is the extractor's answer for the facts directive.
func factsContent(facts [][2]string) string {
	type fact struct {
		Kind  string `json:"kind"`
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	out := struct {
		Facts []fact `json:"facts"`
	}{Facts: []fact{}}
	for _, f := range facts {
		out.Facts = append(out.Facts, fact{"preference", f[0], f[1]})
	}
	b, _ := sonic.Marshal(&out)
	return string(b)
}

func jsonContent(rf *responseFormat, invalid bool, seed uint64) (string, error) {
	if rf != nil && rf.JSONSchema != nil && len(rf.JSONSchema.Schema) > 0 {
		schema, err := decodeSchema(rf.JSONSchema.Schema)
		if err != nil {
			return "", err
		}
		g := schemaGen{root: schema}
		if invalid {
			return string(g.appendInvalid(nil)), nil
		}
		return string(g.appendValid(nil)), nil
	}
	b := append([]byte(nil), `{"answer":`...)
	b = codec.AppendJSONBytes(b, tokens.AppendWords(nil, seed, 12))
	if !invalid {
		b = append(b, '}')
	}
	return string(b), nil
}

// appendWordChunks appends n tokens of words from seed, one chunk each.
func appendWordChunks(dst []chunk, kind uint8, seed uint64, n int) []chunk {
	text := string(tokens.AppendWords(make([]byte, 0, n*6), seed, n))
	start := 0
	for i := 1; i <= len(text); i++ {
		// A word token starts at a space; a period is a token of its own.
		if i == len(text) || text[i] == ' ' || text[i] == '.' {
			dst = append(dst, chunk{kind: kind, text: text[start:i]})
			start = i
		}
	}
	return dst
}

// appendTextChunks appends text as content, one chunk per token.
func appendTextChunks(dst []chunk, text string) []chunk {
	for _, p := range tokens.Split(text) {
		dst = append(dst, chunk{kind: chunkContent, text: p})
	}
	return dst
}

// appendCallChunks appends the tool calls' fragments interleaved: every
// call's head first, then one argument token of each call in turn.
func appendCallChunks(dst []chunk, calls []toolCall) []chunk {
	pieces := make([][]string, len(calls))
	longest := 0
	for i, c := range calls {
		dst = append(dst, chunk{kind: chunkToolHead, call: i})
		pieces[i] = tokens.Split(c.arguments)
		longest = max(longest, len(pieces[i]))
	}
	for j := range longest {
		for i := range calls {
			if j < len(pieces[i]) {
				dst = append(dst, chunk{kind: chunkToolArgs, call: i, text: pieces[i][j]})
			}
		}
	}
	return dst
}

// assemble sets content, reasoning and each call's arguments from the
// chunks that survived the cap; a call whose head was cut is dropped.
func (r *reply) assemble() {
	var content, reasoning strings.Builder
	args := make([]strings.Builder, len(r.calls))
	heads := 0
	r.reasoningN = 0
	for _, c := range r.chunks {
		switch c.kind {
		case chunkReasoning:
			reasoning.WriteString(c.text)
			r.reasoningN++
		case chunkContent:
			content.WriteString(c.text)
		case chunkToolHead:
			heads++
		case chunkToolArgs:
			args[c.call].WriteString(c.text)
		}
	}
	r.content, r.reasoning = content.String(), reasoning.String()
	for i := range r.calls {
		r.calls[i].arguments = args[i].String()
	}
	r.calls = r.calls[:heads]
}

// complete answers a non-streaming request after the time the stream would
// have taken.
func (s *Server) complete(ctx *fasthttp.RequestCtx, r *reply) {
	wait := r.ttft
	if n := r.completion(); n > 1 {
		wait += time.Duration(n-1) * r.itl
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		if !s.sleep(t, wait) {
			statusError(ctx, fasthttp.StatusServiceUnavailable)
			return
		}
	}
	body := r.appendCompletion(make([]byte, 0, 512+len(r.content)+len(r.reasoning)))
	switch {
	case r.fault == faultStallAfter:
		s.hijackStall(ctx, body)
	case r.dropAfter >= 0:
		s.hijackDrop(ctx, body)
	case r.fault == faultMalformedAfter:
		writeJSON(ctx, fasthttp.StatusOK, body[:len(body)/2])
	default:
		writeJSON(ctx, fasthttp.StatusOK, body)
	}
}

// appendCompletion appends the chat.completion object.
func (r *reply) appendCompletion(dst []byte) []byte {
	dst = r.appendHead(dst, "chat.completion")
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if r.content == "" && len(r.calls) > 0 {
		dst = append(dst, "null"...)
	} else {
		dst = codec.AppendJSONString(dst, r.content)
	}
	if r.reasoningN > 0 {
		dst = append(dst, `,"reasoning_content":`...)
		dst = codec.AppendJSONString(dst, r.reasoning)
	}
	if len(r.calls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i, c := range r.calls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":"`...)
			dst = append(dst, c.id...)
			dst = append(dst, `","type":"function","function":{"name":`...)
			dst = codec.AppendJSONString(dst, c.name)
			dst = append(dst, `,"arguments":`...)
			dst = codec.AppendJSONString(dst, c.arguments)
			dst = append(dst, "}}"...)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `},"finish_reason":"`...)
	dst = append(dst, r.finish...)
	dst = append(dst, `","logprobs":null}],`...)
	dst = r.appendUsage(dst)
	return append(dst, '}')
}

// appendHead appends `{"id":…,"object":…,"created":…,"model":…`.
func (r *reply) appendHead(dst []byte, object string) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, r.id...)
	dst = append(dst, `","object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, r.created, 10)
	dst = append(dst, `,"model":`...)
	return codec.AppendJSONString(dst, r.model)
}

func (r *reply) appendUsage(dst []byte) []byte {
	dst = append(dst, `"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(r.prompt), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(r.completion()), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(r.prompt+r.completion()), 10)
	if r.reasoningN > 0 {
		dst = append(dst, `,"completion_tokens_details":{"reasoning_tokens":`...)
		dst = strconv.AppendInt(dst, int64(r.reasoningN), 10)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// appendChunkFrame appends the `data: {chunk}\n\n` frame of token chunk c.
func (r *reply) appendChunkFrame(dst []byte, c *chunk) []byte {
	dst = append(dst, "data: "...)
	dst = r.appendHead(dst, "chat.completion.chunk")
	dst = append(dst, `,"choices":[{"index":0,"delta":{`...)
	switch c.kind {
	case chunkReasoning:
		dst = append(dst, `"reasoning_content":`...)
		dst = codec.AppendJSONString(dst, c.text)
	case chunkContent:
		dst = append(dst, `"content":`...)
		dst = codec.AppendJSONString(dst, c.text)
	case chunkToolHead:
		call := &r.calls[c.call]
		dst = append(dst, `"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(c.call), 10)
		dst = append(dst, `,"id":"`...)
		dst = append(dst, call.id...)
		dst = append(dst, `","type":"function","function":{"name":`...)
		dst = codec.AppendJSONString(dst, call.name)
		dst = append(dst, `,"arguments":""}}]`...)
	case chunkToolArgs:
		dst = append(dst, `"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(c.call), 10)
		dst = append(dst, `,"function":{"arguments":`...)
		dst = codec.AppendJSONString(dst, c.text)
		dst = append(dst, "}}]"...)
	}
	return append(dst, "},\"logprobs\":null,\"finish_reason\":null}]}\n\n"...)
}

func (r *reply) appendRoleFrame(dst []byte) []byte {
	dst = append(dst, "data: "...)
	dst = r.appendHead(dst, "chat.completion.chunk")
	return append(dst, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

func (r *reply) appendFinishFrame(dst []byte) []byte {
	dst = append(dst, "data: "...)
	dst = r.appendHead(dst, "chat.completion.chunk")
	dst = append(dst, `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
	dst = append(dst, r.finish...)
	return append(dst, "\"}]}\n\n"...)
}

func (r *reply) appendUsageFrame(dst []byte) []byte {
	dst = append(dst, "data: "...)
	dst = r.appendHead(dst, "chat.completion.chunk")
	dst = append(dst, `,"choices":[],`...)
	dst = r.appendUsage(dst)
	return append(dst, "}\n\n"...)
}

// frameSink receives a stream's frames, each written out before it
// returns.
type frameSink func(frame []byte) error

// stopKind says how a stream writer stopped.
type stopKind int

const (
	stopDone     stopKind = iota // wrote everything the reply asks for
	stopFault                    // reached the chunk after which a fault strikes
	stopAbandons                 // the client left or the simulator is shutting down
)

// writeFrames writes the stream of r to sink: the role frame, then after
// TTFT the token chunks ITL apart, then the finish, usage and [DONE]
// frames, unless a fault strikes after `after` chunks (after < 0: never),
// in which case it stops there.
func (s *Server) writeFrames(r *reply, sink frameSink, after int) stopKind {
	buf := make([]byte, 0, 1024)
	if sink(r.appendRoleFrame(buf[:0])) != nil {
		return stopAbandons
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	if !s.sleep(t, r.ttft) {
		return stopAbandons
	}
	for i := range r.chunks {
		if i == after {
			return stopFault
		}
		if i > 0 && !s.sleep(t, r.itl) {
			return stopAbandons
		}
		if sink(r.appendChunkFrame(buf[:0], &r.chunks[i])) != nil {
			return stopAbandons
		}
	}
	if after >= len(r.chunks) {
		return stopFault
	}
	if sink(r.appendFinishFrame(buf[:0])) != nil {
		return stopAbandons
	}
	if r.includeUsage && sink(r.appendUsageFrame(buf[:0])) != nil {
		return stopAbandons
	}
	if r.fault == faultNoDone {
		return stopDone
	}
	if sink(append(buf[:0], "data: [DONE]\n\n"...)) != nil {
		return stopAbandons
	}
	return stopDone
}

// stream answers with an event stream. Drops and stalls write their own
// response on the hijacked connection; everything else goes through the
// server's stream writer, flushed frame by frame.
func (s *Server) stream(ctx *fasthttp.RequestCtx, r *reply) {
	if r.dropAfter >= 0 || r.fault == faultStallAfter {
		after := r.dropAfter
		if r.fault == faultStallAfter {
			after = r.faultAfter
		}
		raw := ctx.Conn()
		ctx.HijackSetNoResponse(true)
		ctx.Hijack(func(c net.Conn) {
			var buf []byte
			sink := func(frame []byte) error {
				buf = appendHTTPChunk(buf[:0], frame)
				// A client that stops reading must not pin the writer forever.
				_ = raw.SetWriteDeadline(time.Now().Add(time.Minute))
				_, err := raw.Write(buf)
				return err
			}
			if _, err := raw.Write([]byte(streamHead)); err != nil {
				return
			}
			if s.writeFrames(r, sink, after) != stopFault {
				return
			}
			if r.fault == faultStallAfter {
				s.holdUntilGone(c, raw)
				return
			}
			if tc, ok := raw.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = raw.Close()
		})
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		sink := func(frame []byte) error {
			if _, err := w.Write(frame); err != nil {
				return err
			}
			return w.Flush()
		}
		after := -1
		if r.fault == faultMalformedAfter {
			after = r.faultAfter
		}
		if s.writeFrames(r, sink, after) == stopFault {
			// A frame cut short: the client's JSON decoder fails on it.
			frame := r.appendHead([]byte("data: "), "chat.completion.chunk")
			_ = sink(append(frame, `,"choices":[{"index":0,"delta":{"content":`+"\n\n"...))
		}
	})
}

// streamHead is the response head of a hijacked stream.
const streamHead = "HTTP/1.1 200 OK\r\nServer: gateway-sim\r\nContent-Type: text/event-stream\r\n" +
	"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"

// appendHTTPChunk appends p in HTTP/1.1 chunked framing.
func appendHTTPChunk(dst, p []byte) []byte {
	dst = strconv.AppendUint(dst, uint64(len(p)), 16)
	dst = append(dst, "\r\n"...)
	dst = append(dst, p...)
	return append(dst, "\r\n"...)
}

// hijackDrop writes a response head promising body, half of the body, and
// closes the connection.
func (s *Server) hijackDrop(ctx *fasthttp.RequestCtx, body []byte) {
	raw := ctx.Conn()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {
		head := "HTTP/1.1 200 OK\r\nServer: gateway-sim\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n"
		if _, err := raw.Write(append([]byte(head), body[:len(body)/2]...)); err == nil {
			if tc, ok := raw.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
		}
		_ = raw.Close()
	})
}

// hijackStall writes a response head promising body, and then nothing
// until the client leaves.
func (s *Server) hijackStall(ctx *fasthttp.RequestCtx, body []byte) {
	raw := ctx.Conn()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		head := "HTTP/1.1 200 OK\r\nServer: gateway-sim\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n"
		if _, err := raw.Write([]byte(head)); err == nil {
			s.holdUntilGone(c, raw)
		}
	})
}

// isGuard reports whether model names the guard.
func isGuard(model string) bool {
	return model == "gw-guard" || strings.HasPrefix(model, "guard")
}

// guardTriggers are words that make the guard answer unsafe, with the
// hazard code each adds.
var guardTriggers = []struct{ word, code string }{
	{"murder", "S1"},
	{"steal", "S2"},
	{"doxx", "S7"},
	{"bomb", "S9"},
	{"slur", "S10"},
	{"suicide", "S11"},
}

// guardVerdict is the guard's answer to the last user message: "safe", or
// "unsafe" and a line of hazard codes in ascending order.
func guardVerdict(msgs []tokens.Message, lastUser int, d *directives) string {
	if d.garbled {
		return "I cannot classify this text."
	}
	if lastUser < 0 {
		return "safe"
	}
	unsafe := d.unsafe
	codes := slices.Clone(d.hazards)
	words := strings.FieldsFunc(strings.ToLower(msgs[lastUser].Content), func(r rune) bool {
		return !('a' <= r && r <= 'z')
	})
	for _, t := range guardTriggers {
		if slices.Contains(words, t.word) {
			unsafe = true
			codes = append(codes, t.code)
		}
	}
	if !unsafe {
		return "safe"
	}
	slices.SortFunc(codes, func(a, b string) int {
		x, _ := strconv.Atoi(a[1:])
		y, _ := strconv.Atoi(b[1:])
		return x - y
	})
	codes = slices.Compact(codes)
	if len(codes) == 0 {
		return "unsafe"
	}
	return "unsafe\n" + strings.Join(codes, ",")
}

// hashBytes is the FNV-64a hash of b.
func hashBytes(b []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// mix derives an independent value from seed and i (splitmix64).
func mix(seed, i uint64) uint64 {
	z := seed + i*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func hex16(v uint64) string {
	var b [16]byte
	const digits = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b[:])
}

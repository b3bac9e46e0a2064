package codec

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// MessagesRequest is the body of POST /v1/messages and
// /v1/messages/count_tokens (Anthropic's Messages API), decoded once with
// sonic. ToChat turns it into the ChatRequest the pipeline serves.
type MessagesRequest struct {
	Model         string                `json:"model"`
	MaxTokens     *int64                `json:"max_tokens"`
	System        json.RawMessage       `json:"system,omitempty"`
	Messages      []AnthropicMessage    `json:"messages"`
	Tools         []AnthropicTool       `json:"tools,omitempty"`
	ToolChoice    *AnthropicToolChoice  `json:"tool_choice,omitempty"`
	StopSequences []string              `json:"stop_sequences,omitempty"`
	Temperature   *float64              `json:"temperature,omitempty"`
	TopP          *float64              `json:"top_p,omitempty"`
	TopK          *int64                `json:"top_k,omitempty"`
	Thinking      *AnthropicThinking    `json:"thinking,omitempty"`
	Stream        bool                  `json:"stream"`
	Metadata      *AnthropicRequestMeta `json:"metadata,omitempty"`
	// MCPServers and Container are server-side features (remote MCP
	// servers, code execution), refused as server tools are.
	MCPServers json.RawMessage `json:"mcp_servers,omitempty"`
	Container  json.RawMessage `json:"container,omitempty"`
	// OutputConfig asks for structured output (format) and an effort;
	// OutputFormat is the structured-outputs beta's name for format.
	OutputConfig *AnthropicOutputConfig `json:"output_config,omitempty"`
	OutputFormat *AnthropicOutputFormat `json:"output_format,omitempty"`
}

// AnthropicOutputConfig is the request's output_config.
type AnthropicOutputConfig struct {
	Format *AnthropicOutputFormat `json:"format,omitempty"`
	Effort *string                `json:"effort,omitempty"`
}

// AnthropicOutputFormat is a structured-output format: a JSON schema the
// reply's text must satisfy.
type AnthropicOutputFormat struct {
	Type   string          `json:"type"`
	Schema json.RawMessage `json:"schema,omitempty"`
}

// AnthropicRequestMeta is the request's metadata; user_id is accepted and
// not used.
type AnthropicRequestMeta struct {
	UserID *string `json:"user_id"`
}

// AnthropicMessage is one input message: content is a string or an array
// of content blocks, kept raw until ToChat reads it.
type AnthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// AnthropicBlock is one content block of an input message.
type AnthropicBlock struct {
	Type      string                `json:"type"`
	Text      *string               `json:"text,omitempty"`
	ID        string                `json:"id,omitempty"`
	Name      string                `json:"name,omitempty"`
	Input     json.RawMessage       `json:"input,omitempty"`
	ToolUseID string                `json:"tool_use_id,omitempty"`
	Content   json.RawMessage       `json:"content,omitempty"`
	IsError   *bool                 `json:"is_error,omitempty"`
	Source    *AnthropicImageSource `json:"source,omitempty"`
	Thinking  *string               `json:"thinking,omitempty"`
	Signature *string               `json:"signature,omitempty"`
	Data      *string               `json:"data,omitempty"`
	// CacheControl is accepted and not used: the upstream caches prompts
	// on its own.
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// AnthropicImageSource is an image block's source: base64 data or a URL.
type AnthropicImageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// AnthropicTool is a declared client tool.
type AnthropicTool struct {
	Type         string          `json:"type,omitempty"`
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// AnthropicToolChoice is auto, any, tool (with name) or none;
// disable_parallel_tool_use true allows one tool_use block at most.
type AnthropicToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use,omitempty"`
}

// AnthropicThinking is the extended-thinking switch.
type AnthropicThinking struct {
	Type         string `json:"type"`
	BudgetTokens *int64 `json:"budget_tokens,omitempty"`
}

// Thinking budgets at which the mapped reasoning effort steps up: a budget
// below AnthropicLowBudget is low, below AnthropicHighBudget medium, and
// high from there.
const (
	AnthropicLowBudget  = 4096
	AnthropicHighBudget = 16384
	// AnthropicMinBudget is the least budget_tokens Anthropic accepts.
	AnthropicMinBudget = 1024
)

func anthropicRefusal(msg string) *Error { return &Error{Code: CodeInvalidRequest, Message: msg} }

// outputConfig maps output_config (or the beta's output_format) onto the
// chat request: a json_schema format becomes a strict json_schema
// response_format, which the pipeline enforces on the reply's text; an
// effort becomes the reasoning effort, unless thinking set one. Anthropic's
// efforts above high (xhigh, max) are this gateway's high.
func (r *MessagesRequest) outputConfig(out *ChatRequest) *Error {
	f, path := r.OutputFormat, "output_format"
	if oc := r.OutputConfig; oc != nil {
		if oc.Format != nil {
			if f != nil {
				return anthropicRefusal("output_format: send the format in output_config.format only.")
			}
			f, path = oc.Format, "output_config.format"
		}
		if oc.Effort != nil {
			effort := *oc.Effort
			switch effort {
			case "low", "medium", "high":
			case "xhigh", "max":
				effort = "high"
			default:
				return anthropicRefusal("output_config.effort: must be low, medium, high, xhigh or max.")
			}
			if out.ReasoningEffort == nil {
				out.ReasoningEffort = &effort
			}
		}
	}
	if f == nil {
		return nil
	}
	if f.Type != "json_schema" {
		return anthropicRefusal(path + ".type: must be json_schema.")
	}
	if s := trimSpace(f.Schema); len(s) == 0 || s[0] != '{' {
		return anthropicRefusal(path + ".schema: Field required; a JSON Schema object.")
	}
	strict := true
	out.ResponseFormat = &ResponseFormat{Type: "json_schema",
		JSONSchema: &JSONSchema{Name: "output", Schema: f.Schema, Strict: &strict}}
	return nil
}

// ShowsThinking reports whether the request asked to see thinking blocks.
func (r *MessagesRequest) ShowsThinking() bool {
	return r.Thinking != nil && (r.Thinking.Type == "enabled" || r.Thinking.Type == "adaptive")
}

// ToChat checks what is particular to the Messages API and fills out with
// the equivalent chat request; the pipeline's own validation runs on out
// afterwards. counting skips the max_tokens requirement, which
// count_tokens does not have.
func (r *MessagesRequest) ToChat(out *ChatRequest, counting bool) *Error {
	*out = ChatRequest{Model: r.Model, Stream: r.Stream, Temperature: r.Temperature, TopP: r.TopP}
	if r.Model == "" {
		return anthropicRefusal("model: Field required.")
	}
	if !counting {
		if r.MaxTokens == nil {
			return anthropicRefusal("max_tokens: Field required.")
		}
		if *r.MaxTokens < 1 {
			return anthropicRefusal("max_tokens: must be at least 1.")
		}
		out.MaxTokens = r.MaxTokens
	}
	if t := r.Temperature; t != nil && !(*t >= 0 && *t <= 1) {
		return anthropicRefusal("temperature: must be a number from 0 to 1.")
	}
	if k := r.TopK; k != nil && *k < 0 {
		return anthropicRefusal("top_k: must be at least 0.")
	}
	if len(r.StopSequences) > 0 {
		return anthropicRefusal("stop_sequences: not supported by this gateway; send none and stop on the client.")
	}
	if !emptyJSON(r.MCPServers) {
		return anthropicRefusal("mcp_servers: not supported; this gateway serves client tools only. Declare the tools in tools and call the MCP servers from the client.")
	}
	if !emptyJSON(r.Container) {
		return anthropicRefusal("container: not supported; this gateway runs no code execution containers.")
	}
	if th := r.Thinking; th != nil {
		var effort string
		switch th.Type {
		case "disabled":
			effort = "none"
		case "adaptive":
		case "enabled":
			if th.BudgetTokens == nil {
				return anthropicRefusal("thinking.budget_tokens: Field required when thinking.type is enabled.")
			}
			b := *th.BudgetTokens
			if b < AnthropicMinBudget {
				return anthropicRefusal("thinking.budget_tokens: must be at least " + strconv.Itoa(AnthropicMinBudget) + ".")
			}
			if !counting && b >= *r.MaxTokens {
				return anthropicRefusal("thinking.budget_tokens: must be less than max_tokens.")
			}
			switch {
			case b < AnthropicLowBudget:
				effort = "low"
			case b < AnthropicHighBudget:
				effort = "medium"
			default:
				effort = "high"
			}
		default:
			return anthropicRefusal("thinking.type: must be enabled, disabled or adaptive.")
		}
		if effort != "" {
			out.ReasoningEffort = &effort
		}
	}

	if e := r.outputConfig(out); e != nil {
		return e
	}

	// system
	if sys := trimSpace(r.System); len(sys) > 0 && !bytes.Equal(sys, []byte("null")) {
		text, e := blocksText(sys, "system")
		if e != nil {
			return e
		}
		out.Messages = append(out.Messages, Message{Role: "system", Content: AppendJSONString(nil, text)})
	}

	if len(r.Messages) == 0 {
		return anthropicRefusal("messages: Field required; at least one message.")
	}
	for i := range r.Messages {
		if e := r.appendMessage(out, i); e != nil {
			return e
		}
	}

	for i := range r.Tools {
		t := &r.Tools[i]
		path := "tools[" + strconv.Itoa(i) + "]"
		if t.Type != "" && t.Type != "custom" {
			return anthropicRefusal(path + ".type: only client tools (custom, with input_schema) are supported; " + t.Type + " is not.")
		}
		if len(trimSpace(t.InputSchema)) == 0 {
			return anthropicRefusal(path + ".input_schema: Field required.")
		}
		out.Tools = append(out.Tools, Tool{Type: "function",
			Function: ToolFunction{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	if tc := r.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			out.ToolChoice = json.RawMessage(`"auto"`)
		case "any":
			out.ToolChoice = json.RawMessage(`"required"`)
		case "none":
			out.ToolChoice = json.RawMessage(`"none"`)
		case "tool":
			if tc.Name == "" {
				return anthropicRefusal("tool_choice.name: Field required when tool_choice.type is tool.")
			}
			b := append([]byte(`{"type":"function","function":{"name":`), AppendJSONString(nil, tc.Name)...)
			out.ToolChoice = append(b, "}}"...)
		default:
			return anthropicRefusal("tool_choice.type: must be auto, any, tool or none.")
		}
		if (tc.Type == "any" || tc.Type == "tool") && len(r.Tools) == 0 {
			return anthropicRefusal("tool_choice: " + tc.Type + " needs at least one tool in tools.")
		}
		if tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse {
			serial := false
			out.ParallelToolCalls = &serial
		}
	}
	return nil
}

// appendMessage converts messages[i] into one or more chat messages: a
// user message's tool_result blocks become tool messages (before its other
// content, as the chat template orders them), an assistant message's
// tool_use blocks become tool_calls.
func (r *MessagesRequest) appendMessage(out *ChatRequest, i int) *Error {
	m := &r.Messages[i]
	path := "messages[" + strconv.Itoa(i) + "]"
	switch m.Role {
	case "user", "assistant":
	case "":
		return anthropicRefusal(path + ".role: Field required; user or assistant.")
	default:
		return anthropicRefusal(path + ".role: must be user or assistant; put system text in the top-level system field.")
	}
	content := trimSpace(m.Content)
	if len(content) > 0 && content[0] == '"' {
		out.Messages = append(out.Messages, Message{Role: m.Role, Content: content})
		return nil
	}
	if len(content) == 0 || content[0] != '[' {
		return anthropicRefusal(path + ".content: must be a string or an array of content blocks.")
	}
	var blocks []AnthropicBlock
	if e := DecodeRequest(content, &blocks); e != nil {
		return contentRefusal(path+".content", e)
	}
	if len(blocks) == 0 {
		return anthropicRefusal(path + ".content: must not be empty.")
	}
	var (
		texts  []string
		parts  []byte // content parts, when an image is among them
		images bool
		calls  []ToolCall
	)
	for j := range blocks {
		b := &blocks[j]
		bpath := path + ".content[" + strconv.Itoa(j) + "]"
		switch b.Type {
		case "text":
			if b.Text == nil {
				return anthropicRefusal(bpath + ".text: Field required.")
			}
			texts = append(texts, *b.Text)
		case "image":
			if m.Role != "user" {
				return anthropicRefusal(bpath + ": image blocks are accepted in user messages only.")
			}
			url, e := imageURL(b.Source, bpath)
			if e != nil {
				return e
			}
			images = true
			parts = appendTextParts(parts, texts)
			texts = texts[:0]
			parts = append(parts, `,{"type":"image_url","image_url":{"url":`...)
			parts = AppendJSONString(parts, url)
			parts = append(parts, "}}"...)
		case "tool_use":
			if m.Role != "assistant" {
				return anthropicRefusal(bpath + ": tool_use blocks are accepted in assistant messages only.")
			}
			if b.ID == "" || b.Name == "" {
				return anthropicRefusal(bpath + ": tool_use needs id and name.")
			}
			input := trimSpace(b.Input)
			if len(input) == 0 || input[0] != '{' {
				return anthropicRefusal(bpath + ".input: must be an object.")
			}
			var compact bytes.Buffer
			if json.Compact(&compact, input) != nil {
				return anthropicRefusal(bpath + ".input: must be an object.")
			}
			calls = append(calls, ToolCall{ID: b.ID, Type: "function", Function: FunctionCall{Name: b.Name, Arguments: compact.String()}})
		case "tool_result":
			if m.Role != "user" {
				return anthropicRefusal(bpath + ": tool_result blocks are accepted in user messages only.")
			}
			if b.ToolUseID == "" {
				return anthropicRefusal(bpath + ".tool_use_id: Field required.")
			}
			text := ""
			if c := trimSpace(b.Content); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
				var e *Error
				if text, e = blocksText(c, bpath+".content"); e != nil {
					return e
				}
			}
			if b.IsError != nil && *b.IsError {
				text = "Error: " + text
			}
			out.Messages = append(out.Messages, Message{Role: "tool", ToolCallID: b.ToolUseID, Content: AppendJSONString(nil, text)})
		case "thinking", "redacted_thinking":
			// The model's earlier thinking is not sent back upstream:
			// OpenAI-compatible servers take no reasoning input. It is the
			// model's own, so only an assistant message may carry it.
			if m.Role != "assistant" {
				return anthropicRefusal(bpath + ".type: " + b.Type + " blocks are allowed only in assistant messages.")
			}
		case "":
			return anthropicRefusal(bpath + ".type: Field required.")
		default:
			return anthropicRefusal(bpath + ".type: " + b.Type + " blocks are not supported; use text, image, tool_use or tool_result.")
		}
	}
	if images {
		parts = appendTextParts(parts, texts)
		parts[0] = '['
		out.Messages = append(out.Messages, Message{Role: m.Role, Content: append(parts, ']')})
		return nil
	}
	if len(texts) == 0 && len(calls) == 0 {
		return nil // only tool results (or only thinking)
	}
	msg := Message{Role: m.Role, ToolCalls: calls}
	if len(texts) > 0 {
		msg.Content = AppendJSONString(nil, strings.Join(texts, "\n"))
	}
	out.Messages = append(out.Messages, msg)
	return nil
}

// contentRefusal names the field of a content array that failed to decode
// under path.
func contentRefusal(path string, e *Error) *Error {
	msg := e.Message
	if strings.HasPrefix(msg, "[") {
		return anthropicRefusal(path + msg)
	}
	return anthropicRefusal(path + ": " + strings.TrimPrefix(msg, "The request body "))
}

// appendTextParts appends a text part per text, each after a comma.
func appendTextParts(dst []byte, texts []string) []byte {
	for _, t := range texts {
		dst = append(dst, `,{"type":"text","text":`...)
		dst = AppendJSONString(dst, t)
		dst = append(dst, '}')
	}
	return dst
}

// imageURL is the chat image_url of an image block's source.
func imageURL(src *AnthropicImageSource, path string) (string, *Error) {
	if src == nil {
		return "", anthropicRefusal(path + ".source: Field required.")
	}
	switch src.Type {
	case "base64":
		switch src.MediaType {
		case "image/jpeg", "image/png", "image/gif", "image/webp":
		default:
			return "", anthropicRefusal(path + ".source.media_type: must be image/jpeg, image/png, image/gif or image/webp.")
		}
		if src.Data == "" {
			return "", anthropicRefusal(path + ".source.data: Field required.")
		}
		return "data:" + src.MediaType + ";base64," + src.Data, nil
	case "url":
		if !strings.HasPrefix(src.URL, "https://") && !strings.HasPrefix(src.URL, "http://") {
			return "", anthropicRefusal(path + ".source.url: must be an http or https URL.")
		}
		return src.URL, nil
	}
	return "", anthropicRefusal(path + ".source.type: must be base64 or url.")
}

// blocksText is the text of a string or of an array of text blocks, joined
// with newlines.
func blocksText(raw []byte, path string) (string, *Error) {
	if raw[0] == '"' {
		var s string
		if e := DecodeRequest(raw, &s); e != nil {
			return "", anthropicRefusal(path + ": must be a string or an array of text blocks.")
		}
		return s, nil
	}
	var blocks []AnthropicBlock
	if raw[0] != '[' || DecodeRequest(raw, &blocks) != nil {
		return "", anthropicRefusal(path + ": must be a string or an array of text blocks.")
	}
	texts := make([]string, 0, len(blocks))
	for j := range blocks {
		if blocks[j].Type != "text" || blocks[j].Text == nil {
			return "", anthropicRefusal(path + "[" + strconv.Itoa(j) + "]: must be a text block.")
		}
		texts = append(texts, *blocks[j].Text)
	}
	return strings.Join(texts, "\n"), nil
}

// emptyJSON reports whether a raw value is absent, null, or an empty
// string, array or object.
func emptyJSON(raw []byte) bool {
	v := trimSpace(raw)
	switch {
	case len(v) == 0, string(v) == "null", string(v) == `""`:
		return true
	case len(v) >= 2 && (v[0] == '[' || v[0] == '{'):
		return len(trimSpace(v[1:len(v)-1])) == 0
	}
	return false
}

func trimSpace(b []byte) []byte {
	i, j := 0, len(b)
	for i < j && isJSONSpace(b[i]) {
		i++
	}
	for j > i && isJSONSpace(b[j-1]) {
		j--
	}
	return b[i:j]
}

package codec

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// ResponsesRequest is the body of POST /v1/responses (OpenAI's Responses
// API, stateless), decoded once with sonic. ToChat turns it into the
// ChatRequest the pipeline serves.
type ResponsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions,omitempty"`
	MaxOutputTokens    *int64            `json:"max_output_tokens,omitempty"`
	Temperature        *float64          `json:"temperature,omitempty"`
	TopP               *float64          `json:"top_p,omitempty"`
	Tools              []ResponsesTool   `json:"tools,omitempty"`
	ToolChoice         json.RawMessage   `json:"tool_choice,omitempty"`
	Text               *ResponsesText    `json:"text,omitempty"`
	Reasoning          *ResponsesEffort  `json:"reasoning,omitempty"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store,omitempty"`
	PreviousResponseID *string           `json:"previous_response_id,omitempty"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	Background         *bool             `json:"background,omitempty"`
	Conversation       json.RawMessage   `json:"conversation,omitempty"`
	// Prompt references a stored prompt template, refused as the other
	// stored state is.
	Prompt json.RawMessage `json:"prompt,omitempty"`
}

// ResponsesTool is a declared tool; only function tools are served.
type ResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ResponsesText is the text configuration: its output format.
type ResponsesText struct {
	Format *ResponsesFormat `json:"format,omitempty"`
}

// ResponsesFormat is text, json_object, or json_schema with its schema.
type ResponsesFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ResponsesEffort is the reasoning configuration.
type ResponsesEffort struct {
	Effort  *string `json:"effort,omitempty"`
	Summary *string `json:"summary,omitempty"`
}

// ResponsesItem is one input item: a message (role and content) or a
// function call or its output.
type ResponsesItem struct {
	Type      string          `json:"type,omitempty"`
	Role      string          `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments *string         `json:"arguments,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	ID        string          `json:"id,omitempty"`
	Status    string          `json:"status,omitempty"`
}

// ResponsesPart is one content part of an input message.
type ResponsesPart struct {
	Type     string  `json:"type"`
	Text     *string `json:"text,omitempty"`
	ImageURL *string `json:"image_url,omitempty"`
	Detail   string  `json:"detail,omitempty"`
	FileID   *string `json:"file_id,omitempty"`
}

// Refusals of the Responses wire that name no field the chat wires have.
var (
	ErrResponsesStore = &Error{Code: CodeInvalidRequest,
		Message: "store: true is not supported; this gateway does not store responses. Send store: false or leave it out."}
	ErrResponsesPrevious = &Error{Code: CodeInvalidRequest,
		Message: "previous_response_id: not supported; this gateway does not store responses. Send the whole conversation in input."}
)

func responsesRefusal(msg string) *Error { return &Error{Code: CodeInvalidRequest, Message: msg} }

// ToChat checks what is particular to the Responses API and fills out with
// the equivalent chat request; the pipeline's own validation runs on out
// afterwards.
func (r *ResponsesRequest) ToChat(out *ChatRequest) *Error {
	*out = ChatRequest{Model: r.Model, Stream: r.Stream, Temperature: r.Temperature, TopP: r.TopP, MaxTokens: r.MaxOutputTokens,
		ParallelToolCalls: r.ParallelToolCalls}
	if r.Store != nil && *r.Store {
		return ErrResponsesStore
	}
	if r.PreviousResponseID != nil && *r.PreviousResponseID != "" {
		return ErrResponsesPrevious
	}
	if r.Background != nil && *r.Background {
		return responsesRefusal("background: true is not supported; stream instead.")
	}
	if c := trimSpace(r.Conversation); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
		return responsesRefusal("conversation: not supported; this gateway does not store conversations.")
	}
	if p := trimSpace(r.Prompt); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		return responsesRefusal("prompt: not supported; this gateway does not store prompt templates. Send instructions and input instead.")
	}
	if m := r.MaxOutputTokens; m != nil && *m < 1 {
		return responsesRefusal("max_output_tokens: must be at least 1.")
	}
	if e := r.Reasoning; e != nil && e.Effort != nil {
		effort := *e.Effort
		switch effort {
		case "minimal":
			effort = "low"
		case "xhigh":
			effort = "high"
		case "none", "low", "medium", "high":
		default:
			return responsesRefusal("reasoning.effort: must be one of none, minimal, low, medium, high or xhigh.")
		}
		out.ReasoningEffort = &effort
	}
	if r.Instructions != nil && *r.Instructions != "" {
		out.Messages = append(out.Messages, Message{Role: "system", Content: AppendJSONString(nil, *r.Instructions)})
	}
	input := trimSpace(r.Input)
	switch {
	case len(input) == 0 || bytes.Equal(input, []byte("null")):
		return responsesRefusal("input: required; a string or an array of input items.")
	case input[0] == '"':
		out.Messages = append(out.Messages, Message{Role: "user", Content: input})
	case input[0] == '[':
		var items []ResponsesItem
		if e := DecodeRequest(input, &items); e != nil {
			return contentRefusal("input", e)
		}
		if len(items) == 0 {
			return responsesRefusal("input: must not be empty.")
		}
		for i := range items {
			if e := appendResponsesItem(out, &items[i], i); e != nil {
				return e
			}
		}
	default:
		return responsesRefusal("input: must be a string or an array of input items.")
	}

	for i := range r.Tools {
		t := &r.Tools[i]
		path := "tools[" + strconv.Itoa(i) + "]"
		if t.Type != "function" {
			return responsesRefusal(path + ".type: only function tools are supported; " + strconv.Quote(t.Type) + " is not.")
		}
		if t.Name == "" {
			return responsesRefusal(path + ".name: required.")
		}
		out.Tools = append(out.Tools, Tool{Type: "function",
			Function: ToolFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
	}
	if tc := trimSpace(r.ToolChoice); len(tc) > 0 && !bytes.Equal(tc, []byte("null")) {
		if tc[0] == '"' {
			out.ToolChoice = tc
		} else {
			var choice struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			if DecodeRequest(tc, &choice) != nil || choice.Type != "function" || choice.Name == "" {
				return responsesRefusal(`tool_choice: must be "none", "auto", "required" or {"type":"function","name":...}.`)
			}
			b := append([]byte(`{"type":"function","function":{"name":`), AppendJSONString(nil, choice.Name)...)
			out.ToolChoice = append(b, "}}"...)
		}
	}
	if r.Text != nil && r.Text.Format != nil {
		f := r.Text.Format
		switch f.Type {
		case "text", "json_object":
			out.ResponseFormat = &ResponseFormat{Type: f.Type}
		case "json_schema":
			if f.Name == "" {
				return responsesRefusal("text.format.name: required, 1 to 64 characters of a-z, A-Z, 0-9, _ and -.")
			}
			if s := trimSpace(f.Schema); len(s) == 0 || bytes.Equal(s, []byte("null")) {
				return responsesRefusal("text.format.schema: required, a JSON Schema object.")
			}
			out.ResponseFormat = &ResponseFormat{Type: f.Type,
				JSONSchema: &JSONSchema{Name: f.Name, Description: f.Description, Schema: f.Schema, Strict: f.Strict}}
		default:
			return responsesRefusal("text.format.type: must be text, json_object or json_schema.")
		}
	}
	return nil
}

// appendResponsesItem converts input[i]: a message, a function call (joined
// to the assistant message before it) or a function call's output.
func appendResponsesItem(out *ChatRequest, it *ResponsesItem, i int) *Error {
	path := "input[" + strconv.Itoa(i) + "]"
	switch it.Type {
	case "", "message":
		role := it.Role
		switch role {
		case "user", "assistant", "system":
		case "developer":
			role = "system"
		case "":
			return responsesRefusal(path + ".role: required; one of user, assistant, system or developer.")
		default:
			return responsesRefusal(path + ".role: must be one of user, assistant, system or developer.")
		}
		content := trimSpace(it.Content)
		if len(content) > 0 && content[0] == '"' {
			out.Messages = append(out.Messages, Message{Role: role, Content: content})
			return nil
		}
		if len(content) == 0 || content[0] != '[' {
			return responsesRefusal(path + ".content: must be a string or an array of content parts.")
		}
		var parts []ResponsesPart
		if e := DecodeRequest(content, &parts); e != nil {
			return contentRefusal(path+".content", e)
		}
		var texts []string
		var chat []byte
		images := false
		for j := range parts {
			p := &parts[j]
			ppath := path + ".content[" + strconv.Itoa(j) + "]"
			switch p.Type {
			case "input_text", "output_text":
				if p.Text == nil {
					return responsesRefusal(ppath + ".text: required.")
				}
				texts = append(texts, *p.Text)
			case "input_image":
				if role != "user" {
					return responsesRefusal(ppath + ": images are accepted in user messages only.")
				}
				if p.ImageURL == nil || *p.ImageURL == "" {
					return responsesRefusal(ppath + ".image_url: required; file_id images are not supported.")
				}
				images = true
				chat = appendTextParts(chat, texts)
				texts = texts[:0]
				chat = append(chat, `,{"type":"image_url","image_url":{"url":`...)
				chat = AppendJSONString(chat, *p.ImageURL)
				chat = append(chat, "}}"...)
			case "refusal":
			default:
				return responsesRefusal(ppath + ".type: " + strconv.Quote(p.Type) + " is not supported; use input_text or input_image.")
			}
		}
		if images {
			chat = appendTextParts(chat, texts)
			chat[0] = '['
			out.Messages = append(out.Messages, Message{Role: role, Content: append(chat, ']')})
			return nil
		}
		out.Messages = append(out.Messages, Message{Role: role, Content: AppendJSONString(nil, strings.Join(texts, "\n"))})
	case "function_call":
		if it.CallID == "" || it.Name == "" {
			return responsesRefusal(path + ": a function_call needs call_id and name.")
		}
		args := "{}"
		if it.Arguments != nil {
			args = *it.Arguments
		}
		call := ToolCall{ID: it.CallID, Type: "function", Function: FunctionCall{Name: it.Name, Arguments: args}}
		if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == "assistant" {
			out.Messages[n-1].ToolCalls = append(out.Messages[n-1].ToolCalls, call)
		} else {
			out.Messages = append(out.Messages, Message{Role: "assistant", ToolCalls: []ToolCall{call}})
		}
	case "function_call_output":
		if it.CallID == "" {
			return responsesRefusal(path + ".call_id: required.")
		}
		output := trimSpace(it.Output)
		switch {
		case len(output) > 0 && output[0] == '"':
			out.Messages = append(out.Messages, Message{Role: "tool", ToolCallID: it.CallID, Content: output})
		case len(output) > 0 && output[0] == '[':
			var parts []ResponsesPart
			if DecodeRequest(output, &parts) != nil {
				return responsesRefusal(path + ".output: must be a string or an array of input_text parts.")
			}
			texts := make([]string, 0, len(parts))
			for _, p := range parts {
				if p.Type != "input_text" || p.Text == nil {
					return responsesRefusal(path + ".output: must be a string or an array of input_text parts.")
				}
				texts = append(texts, *p.Text)
			}
			out.Messages = append(out.Messages, Message{Role: "tool", ToolCallID: it.CallID,
				Content: AppendJSONString(nil, strings.Join(texts, "\n"))})
		default:
			return responsesRefusal(path + ".output: required; a string.")
		}
	case "reasoning":
		// Earlier reasoning is not sent back upstream: OpenAI-compatible
		// servers take no reasoning input.
	case "item_reference":
		return responsesRefusal(path + ": item_reference needs stored responses, which this gateway does not keep.")
	default:
		return responsesRefusal(path + ".type: " + strconv.Quote(it.Type) + " is not supported; use message, function_call or function_call_output.")
	}
	return nil
}

package codec

import "encoding/json"

// ChatRequest is the body of the three chat routes, decoded once with sonic.
// Fields a route ignores are still decoded so that their presence can be
// validated; raw JSON fields are forwarded upstream as the client sent them.
type ChatRequest struct {
	Model           string          `json:"model"`
	Messages        []Message       `json:"messages"`
	Stream          bool            `json:"stream"`
	StreamOptions   *StreamOptions  `json:"stream_options,omitempty"`
	Temperature     *float64        `json:"temperature,omitempty"`
	TopP            *float64        `json:"top_p,omitempty"`
	MaxTokens       *int64          `json:"max_tokens,omitempty"`
	ReasoningEffort *string         `json:"reasoning_effort,omitempty"`
	Tools           []Tool          `json:"tools,omitempty"`
	ToolChoice      json.RawMessage `json:"tool_choice,omitempty"`
	ResponseFormat  *ResponseFormat `json:"response_format,omitempty"`
	// ParallelToolCalls false asks for one tool call per reply at most;
	// it goes upstream, where the model honours it. The Anthropic and
	// Responses wires set it from their own switches.
	ParallelToolCalls *bool `json:"parallel_tool_calls,omitempty"`

	// Native-family fields; the OpenAI route refuses file_ids and ignores
	// the rest.
	Memory            *MemorySwitch `json:"memory,omitempty"`
	Rules             *bool         `json:"rules,omitempty"`
	VaultID           *string       `json:"vault_id,omitempty"`
	MentionedVaultIDs []string      `json:"mentioned_vault_ids,omitempty"`
}

// Message is one chat message. Content is kept raw: a JSON string, null, or
// an array of content parts (text and images).
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	FileIDs    []string        `json:"file_ids,omitempty"`
}

// ToolCall is a call an assistant message made. Its id is opaque: kept and
// replayed exactly as it came.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON-encoded arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is a declared function tool.
type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

// ToolFunction is a declared function: its parameters are a JSON Schema
// object, kept raw.
type ToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// StreamOptions are the OpenAI stream options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ResponseFormat is text, json_object, or json_schema with a schema.
type ResponseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *JSONSchema `json:"json_schema,omitempty"`
}

// JSONSchema is the json_schema response format.
type JSONSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// MemorySwitch is the native memory request field; nil sides take the
// credential's default.
type MemorySwitch struct {
	Recall  *bool `json:"recall"`
	Capture *bool `json:"capture"`
}

package proxy

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/bytedance/sonic"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// chatWire identifies which chat route a request came in on.
type chatWire uint8

// The three chat routes.
const (
	// chatV1 is POST /api/v1/chat.
	chatV1 chatWire = iota + 1
	// chatV2 is POST /api/v2/chat.
	chatV2
	// chatOpenAI is POST /v1/chat/completions.
	chatOpenAI
	// chatAnthropic is POST /v1/messages, Anthropic's Messages API.
	chatAnthropic
	// chatResponses is POST /v1/responses, OpenAI's Responses API.
	chatResponses
)

// native reports whether w is one of the native routes, which add memory,
// standing rules, vaults and files. Anything else, including the zero
// value, gets the OpenAI route's narrower treatment.
func (w chatWire) native() bool { return w == chatV1 || w == chatV2 }

// Bounds on the JSON schemas a request carries.
const (
	maxToolSchemaBytes     = 16 << 10
	maxToolSchemaDepth     = 12
	maxToolSchemaNodes     = 1000
	maxResponseSchemaBytes = 32 << 10
	maxResponseSchemaDepth = 16
	maxSchemaNameLen       = 64
	// maxTools bounds the tools one request declares (OpenAI's bound).
	maxTools = 128
)

// chatIntent is what validation decides: everything the pipeline needs, computed
// once.
type chatIntent struct {
	// Tier is the requested tier, pointing into the tiers validateChat was
	// given; nil when Model is auto (the router decides later).
	Tier *hotpath.Tier
	// Auto is true for model auto. The key's model allowlist is then the
	// router's to apply: it picks among the tiers the allowlist admits.
	// validateChat only refuses auto when the allowlist admits none of the
	// configured tiers.
	Auto bool
	// MaxTokens is the requested max_tokens clamped to the tier's cap, or the
	// cap when unset. With auto it is the requested value, unclamped (0 when
	// unset): the router clamps or fills it once it has picked a tier.
	MaxTokens int64
	// Effort is the requested reasoning effort, or "" when absent (the
	// tier's default applies later).
	Effort    hotpath.Effort
	EffortSet bool
	// HasTools is true when the request declares at least one tool.
	HasTools bool
	// HasFiles is true when a user message names file ids (the pin and
	// the files scope already checked).
	HasFiles bool
	// UndeclaredReplay is the gw block's undeclared_tool_replay, or nil:
	// on the native routes, when an assistant message of the history
	// carries a call of a function the request's tools do not declare.
	UndeclaredReplay []byte
	// Schema is the compiled response_format json_schema, or nil.
	Schema *compiledSchema
	// JSONObject is true for response_format json_object.
	JSONObject bool
	// MemoryRecall, MemoryCapture and Rules are the effective switches:
	// the request's explicit value, else the credential's default, and
	// always false without the key's memory (or rules) scope or on the
	// OpenAI route.
	MemoryRecall, MemoryCapture, Rules bool
}

// Refusals with a fixed message. They are shared: treat them as read-only.
var (
	errModelRequired    = invalidRequest("model: required; one of kavi, vaani, mira or auto.")
	errModelUnknown     = invalidRequest("model: must be one of kavi, vaani, mira or auto.")
	errMessagesRequired = invalidRequest("messages: required, a non-empty array of messages.")
	errFileIDsVersion   = &codec.Error{Code: codec.CodeInvalidRequest,
		Message: "file_ids: attaching files to chat messages requires the Gateway-Version pin " +
			codec.VersionChatFileIDs.String() + " or later.",
		Detail: codec.Detail{RequiredVersion: codec.VersionChatFileIDs.String()}}
	errFileIDsScope = scopeRefusal("file_ids", hotpath.FamilyFiles)
	errTooManyFiles = &codec.Error{Code: codec.CodeInvalidRequest,
		Message: "file_ids: at most " + strconv.Itoa(maxFilesPerMessage) + " files per message.",
		Detail:  codec.Detail{Bound: "files_per_message", Limit: maxFilesPerMessage, HasLimit: true}}
	// errMemoryVersion refuses memory under a pin that predates it: that
	// version's gateway would have answered and captured anyway, so the
	// request cannot be served as it asks.
	errMemoryVersion = &codec.Error{Code: codec.CodeInvalidRequest,
		Message: "memory: the memory switch requires the Gateway-Version pin " +
			codec.VersionMemoryPin.String() + " or later.",
		Detail: codec.Detail{RequiredVersion: codec.VersionMemoryPin.String()}}
	errRecallScope     = scopeRefusal("memory.recall", hotpath.FamilyMemory)
	errCaptureScope    = scopeRefusal("memory.capture", hotpath.FamilyMemory)
	errRulesScope      = scopeRefusal("rules", hotpath.FamilyRules)
	errTemperature     = invalidRequest("temperature: must be a number from 0 to 2.")
	errTopP            = invalidRequest("top_p: must be a number from 0 to 1.")
	errMaxTokens       = invalidRequest("max_tokens: must be at least 1.")
	errEffort          = invalidRequest("reasoning_effort: must be one of none, low, medium or high.")
	errToolChoice      = invalidRequest(`tool_choice: must be "none", "auto", "required" or {"type":"function","function":{"name":...}}.`)
	errToolChoiceTools = invalidRequest(`tool_choice: "required" needs at least one tool in tools.`)
	errToolChoiceName  = invalidRequest("tool_choice.function.name: names a function that is not declared in tools.")
	errFormatType      = invalidRequest("response_format.type: must be text, json_object or json_schema.")
	errFormatSchemaObj = invalidRequest("response_format.json_schema: required when type is json_schema.")
	errFormatName      = invalidRequest("response_format.json_schema.name: required, 1 to 64 characters of a-z, A-Z, 0-9, _ and -.")
	errFormatSchema    = invalidRequest("response_format.json_schema.schema: required, a JSON Schema object.")
	errTooManyTools    = &codec.Error{Code: codec.CodeInvalidRequest,
		Message: "tools: at most " + strconv.Itoa(maxTools) + " tools per request.",
		Detail:  codec.Detail{Bound: "tools", Limit: maxTools, HasLimit: true}}
)

// decodeChatBody decodes a chat request body of any wire (the chat routes,
// the token counts, stored eval requests). A large body is first read for
// its tool count: more than maxTools are refused by validateChat anyway,
// and decoding them first costs CPU and garbage in proportion to the
// count (120,000 tools: 50 ms and 23 MiB).
func decodeChatBody(body []byte, v any) *codec.Error {
	if len(body) > toolScanFrom && codec.ArrayLongerThan(body, "tools", maxTools) {
		return errTooManyTools
	}
	return codec.DecodeRequest(body, v)
}

// toolScanFrom is the body size from which decodeChatBody counts the tools
// first: below it, even a body of nothing but tools decodes in
// microseconds.
const toolScanFrom = 64 << 10

// smallToolCount is the most tools whose names are compared pairwise, which
// allocates nothing; more are checked through a map, in linear time.
const smallToolCount = 8

func invalidRequest(msg string) *codec.Error {
	return &codec.Error{Code: codec.CodeInvalidRequest, Message: msg}
}

func scopeRefusal(field string, f hotpath.Family) *codec.Error {
	return &codec.Error{Code: codec.CodeKeyScopeForbidden,
		Message: field + ": true needs the " + f.String() + " scope, which this key's allowed scopes do not include.",
		Detail:  codec.Detail{RequiredScope: f.String()}}
}

// validateChat checks everything the specification lists about a chat
// request before anything goes upstream or is billed, and returns the first
// refusal. The checks run in a fixed order: model, messages, file_ids,
// memory and rules scopes, numeric ranges, reasoning_effort, tools,
// tool_choice, response_format.
//
// tiers are the configured tiers; chatIntent.Tier points into it. p is the
// verified caller and must not be nil. version is the version serving the
// request and pinned reports whether the client pinned it.
//
// A refusal may be a shared value: treat it as read-only. A request that
// passes costs no allocation unless it carries content parts, a tool_choice
// object or a response_format json_schema (compiled here, once).
func validateChat(req *codec.ChatRequest, wire chatWire, tiers []hotpath.Tier, p *hotpath.Principal, version codec.Version, pinned bool) (chatIntent, *codec.Error) {
	var intent chatIntent
	if e := checkChat(&intent, req, wire, tiers, p, version, pinned); e != nil {
		return chatIntent{}, e
	}
	return intent, nil
}

// checkChat fills intent as it checks; on a refusal intent is half-filled
// and validateChat drops it.
func checkChat(intent *chatIntent, req *codec.ChatRequest, wire chatWire, tiers []hotpath.Tier, p *hotpath.Principal, version codec.Version, pinned bool) *codec.Error {
	native := wire.native()

	// model
	switch req.Model {
	case "":
		return errModelRequired
	case "auto":
		intent.Auto = true
		if e := checkAutoAllowed(tiers, p); e != nil {
			return e
		}
	default:
		if !hotpath.IsTierName(req.Model) {
			return errModelUnknown
		}
		for i := range tiers {
			if tiers[i].Name == req.Model {
				intent.Tier = &tiers[i]
				break
			}
		}
		if intent.Tier == nil {
			return errModelUnknown
		}
		if !p.AllowsModel(intent.Tier.Name) {
			return &codec.Error{Code: codec.CodeModelNotAllowed,
				Message: "model: this key may not use " + intent.Tier.Name + "."}
		}
	}

	// messages
	if len(req.Messages) == 0 {
		return errMessagesRequired
	}
	for i := range req.Messages {
		if e := checkMessage(i, &req.Messages[i]); e != nil {
			return e
		}
	}

	// file_ids
	for i := range req.Messages {
		m := &req.Messages[i]
		if len(m.FileIDs) == 0 {
			continue
		}
		switch {
		case !native:
			return messageRefusal(i, "file_ids", "file attachments are not accepted on /v1/chat/completions.")
		case m.Role != "user":
			return messageRefusal(i, "file_ids", "only user messages may carry file_ids.")
		case !pinned || version < codec.VersionChatFileIDs:
			return errFileIDsVersion
		case !p.Scopes.Has(hotpath.FamilyFiles):
			return errFileIDsScope
		case len(m.FileIDs) > maxFilesPerMessage:
			return errTooManyFiles
		}
		intent.HasFiles = true
	}

	// memory and standing rules: native routes only; the OpenAI route
	// ignores the fields and never recalls, captures or injects rules.
	if native {
		if req.Memory != nil && pinned && version < codec.VersionMemoryPin {
			return errMemoryVersion
		}
		if e := intentMemory(intent, req, p); e != nil {
			return e
		}
	}

	// numeric ranges
	if t := req.Temperature; t != nil && !(*t >= 0 && *t <= 2) {
		return errTemperature
	}
	if t := req.TopP; t != nil && !(*t >= 0 && *t <= 1) {
		return errTopP
	}
	if m := req.MaxTokens; m != nil {
		if *m < 1 {
			return errMaxTokens
		}
		intent.MaxTokens = *m
	}
	if intent.Tier != nil {
		intent.MaxTokens = maxTokensOn(intent.Tier, req.MaxTokens)
	}

	// reasoning_effort
	if e := req.ReasoningEffort; e != nil {
		effort, ok := hotpath.ParseEffort(*e)
		if !ok {
			return errEffort
		}
		intent.Effort, intent.EffortSet = effort, true
	}

	// tools
	if len(req.Tools) > maxTools {
		return errTooManyTools
	}
	var seen map[string]int
	if len(req.Tools) > smallToolCount {
		seen = make(map[string]int, len(req.Tools))
	}
	for i := range req.Tools {
		if e := checkTool(req.Tools, i, seen); e != nil {
			return e
		}
	}
	intent.HasTools = len(req.Tools) > 0
	if native {
		intent.UndeclaredReplay = undeclaredReplay(req, seen)
	}

	// tool_choice
	if e := checkToolChoice(req.ToolChoice, req.Tools); e != nil {
		return e
	}

	// response_format
	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
		case "json_object":
			intent.JSONObject = true
		case "json_schema":
			js := rf.JSONSchema
			if js == nil {
				return errFormatSchemaObj
			}
			if !validName(js.Name) {
				return errFormatName
			}
			raw := trimJSONSpace(js.Schema)
			if len(raw) == 0 || isJSONNull(raw) {
				return errFormatSchema
			}
			s, e := compileSchema(raw)
			if e != nil {
				return e
			}
			intent.Schema = s
		default:
			return errFormatType
		}
	}
	return nil
}

// undeclaredReplay describes the tool calls of the history that name a
// function the request's tools do not declare: the spec asks a client to
// send the same tools again when it continues a conversation that called
// them, and a model asked to go on from a call of a tool it was not given
// may answer from it or call it again. The request is served as sent; the
// answer says so in {"calls": n, "names": [...]}, the distinct names in
// the order they first appear. byName is checkTool's index of the tools
// (nil for a few). nil when every call is declared, which costs no
// allocation.
func undeclaredReplay(req *codec.ChatRequest, byName map[string]int) []byte {
	var (
		calls  int
		names  []string
		listed map[string]bool
	)
	for i := range req.Messages {
		for j := range req.Messages[i].ToolCalls {
			name := req.Messages[i].ToolCalls[j].Function.Name
			if declaresTool(req.Tools, byName, name) {
				continue
			}
			calls++
			if listed == nil {
				listed = map[string]bool{}
			}
			if !listed[name] {
				listed[name] = true
				names = append(names, name)
			}
		}
	}
	if calls == 0 {
		return nil
	}
	out := append([]byte(nil), `{"calls":`...)
	out = strconv.AppendInt(out, int64(calls), 10)
	out = append(out, `,"names":[`...)
	for i, n := range names {
		if i > 0 {
			out = append(out, ',')
		}
		out = codec.AppendJSONString(out, n)
	}
	return append(out, "]}"...)
}

// declaresTool reports whether tools declare a function called name, by
// byName (checkTool's index) when there is one.
func declaresTool(tools []codec.Tool, byName map[string]int, name string) bool {
	if byName != nil {
		_, ok := byName[name]
		return ok
	}
	for i := range tools {
		if tools[i].Function.Name == name {
			return true
		}
	}
	return false
}

// checkStructuredSupport refuses an intent that asks for structured output
// (a json_schema or json_object response format) from a tier that cannot
// constrain its decoding: supports reports whether t can. t may be nil for
// a tier not yet known by name; the message then says so generically.
func checkStructuredSupport(t *hotpath.Tier, supports bool, intent chatIntent) *codec.Error {
	if supports || (intent.Schema == nil && !intent.JSONObject) {
		return nil
	}
	name := "the serving tier"
	if t != nil {
		name = t.Name
	}
	return &codec.Error{Code: codec.CodeStructuredOutputUnsupported,
		Message: "response_format: " + name + " does not support structured output; use text or another tier."}
}

// checkAutoAllowed refuses auto when the key's allowlist admits none of the
// configured tiers, so the router would have nothing to choose from.
func checkAutoAllowed(tiers []hotpath.Tier, p *hotpath.Principal) *codec.Error {
	if len(tiers) == 0 {
		return errModelUnknown
	}
	for i := range tiers {
		if p.AllowsModel(tiers[i].Name) {
			return nil
		}
	}
	return &codec.Error{Code: codec.CodeModelNotAllowed,
		Message: "model: this key may use none of the tiers auto routes to."}
}

// intentMemory applies the memory and rules switches: an explicit true needs
// the family's scope, an explicit false needs nothing, and a missing value
// takes the credential's default (on for a signed-in credential, off for
// developer and headless keys). Without the scope the effective value is
// always false.
func intentMemory(intent *chatIntent, req *codec.ChatRequest, p *hotpath.Principal) *codec.Error {
	def := p.Kind == hotpath.KindSignedIn
	memory := p.Scopes.Has(hotpath.FamilyMemory)
	recall, capture := def, def
	if m := req.Memory; m != nil {
		if m.Recall != nil {
			if *m.Recall && !memory {
				return errRecallScope
			}
			recall = *m.Recall
		}
		if m.Capture != nil {
			if *m.Capture && !memory {
				return errCaptureScope
			}
			capture = *m.Capture
		}
	}
	rulesScope := p.Scopes.Has(hotpath.FamilyRules)
	rules := def
	if req.Rules != nil {
		if *req.Rules && !rulesScope {
			return errRulesScope
		}
		rules = *req.Rules
	}
	intent.MemoryRecall = recall && memory
	intent.MemoryCapture = capture && memory
	intent.Rules = rules && rulesScope
	return nil
}

// checkMessage checks one message's role, content and tool fields.
func checkMessage(i int, m *codec.Message) *codec.Error {
	content := trimJSONSpace(m.Content)
	switch m.Role {
	case "system", "tool":
		if !isJSONString(content) {
			return messageRefusal(i, "content", "must be a string on "+m.Role+" messages.")
		}
	case "user":
		switch {
		case isJSONString(content):
		case len(content) > 0 && content[0] == '[':
			if e := checkContentParts(i, content); e != nil {
				return e
			}
		default:
			return messageRefusal(i, "content", "must be a string or an array of content parts on user messages.")
		}
	case "assistant":
		absent := len(content) == 0 || isJSONNull(content)
		if !isJSONString(content) && !(absent && len(m.ToolCalls) > 0) {
			return messageRefusal(i, "content", "must be a string on assistant messages, or null when the message has tool_calls.")
		}
	case "developer":
		return messageRefusal(i, "role", "developer is not accepted; use system.")
	case "":
		return messageRefusal(i, "role", "required; one of system, user, assistant or tool.")
	default:
		return messageRefusal(i, "role", "must be one of system, user, assistant or tool.")
	}

	if m.Role == "tool" {
		if m.ToolCallID == "" {
			return messageRefusal(i, "tool_call_id", "required on tool messages.")
		}
	} else if m.ToolCallID != "" {
		return messageRefusal(i, "tool_call_id", "only tool messages carry a tool_call_id.")
	}
	if len(m.ToolCalls) > 0 && m.Role != "assistant" {
		return messageRefusal(i, "tool_calls", "only assistant messages carry tool_calls.")
	}
	for j := range m.ToolCalls {
		c := &m.ToolCalls[j]
		switch {
		case c.ID == "":
			return toolCallRefusal(i, j, "id", "required.")
		case c.Type != "function":
			return toolCallRefusal(i, j, "type", "must be function.")
		case c.Function.Name == "":
			return toolCallRefusal(i, j, "function.name", "required.")
		}
		// arguments are replayed unchanged; the decoder already made sure
		// they are a string.
	}
	return nil
}

// contentPart is one element of a user message's content array.
type contentPart struct {
	Type     string  `json:"type"`
	Text     *string `json:"text"`
	ImageURL *struct {
		URL *string `json:"url"`
	} `json:"image_url"`
}

func checkContentParts(i int, raw []byte) *codec.Error {
	var parts []contentPart
	if err := sonic.Unmarshal(raw, &parts); err != nil {
		return messageRefusal(i, "content", "must be a string or an array of content parts, each {type: text, text} or {type: image_url, image_url: {url}}.")
	}
	if len(parts) == 0 {
		return messageRefusal(i, "content", "an array of content parts must not be empty.")
	}
	for j := range parts {
		pt := &parts[j]
		field := "content[" + strconv.Itoa(j) + "]"
		switch pt.Type {
		case "text":
			if pt.Text == nil {
				return messageRefusal(i, field+".text", "required, a string.")
			}
		case "image_url":
			if pt.ImageURL == nil || pt.ImageURL.URL == nil {
				return messageRefusal(i, field+".image_url.url", "required, a string.")
			}
		default:
			return messageRefusal(i, field+".type", "must be text or image_url.")
		}
	}
	return nil
}

func messageRefusal(i int, field, msg string) *codec.Error {
	return invalidRequest("messages[" + strconv.Itoa(i) + "]." + field + ": " + msg)
}

func toolCallRefusal(i, j int, field, msg string) *codec.Error {
	return messageRefusal(i, "tool_calls["+strconv.Itoa(j)+"]."+field, msg)
}

// checkTool checks tools[i]: its type, its name (valid and not declared
// earlier) and the bounds of its parameters schema. seen, when not nil,
// maps the names of tools[:i] to their index.
func checkTool(tools []codec.Tool, i int, seen map[string]int) *codec.Error {
	t := &tools[i]
	if t.Type != "function" {
		return toolRefusal(i, "type: must be function.")
	}
	name := t.Function.Name
	if !validName(name) {
		return toolRefusal(i, "function.name: required, 1 to 64 characters of a-z, A-Z, 0-9, _ and -.")
	}
	if seen != nil {
		if j, dup := seen[name]; dup {
			return toolRefusal(i, "function.name: "+name+" is already declared by tools["+strconv.Itoa(j)+"].")
		}
		seen[name] = i
	} else {
		for j := 0; j < i; j++ {
			if tools[j].Function.Name == name {
				return toolRefusal(i, "function.name: "+name+" is already declared by tools["+strconv.Itoa(j)+"].")
			}
		}
	}
	raw := trimJSONSpace(t.Function.Parameters)
	if len(raw) == 0 || isJSONNull(raw) {
		return nil
	}
	if len(raw) > maxToolSchemaBytes {
		return toolSchemaRefusal(i, name, "exceeds the bound of "+strconv.Itoa(maxToolSchemaBytes)+" bytes.", "bytes", maxToolSchemaBytes)
	}
	if !json.Valid(raw) {
		return toolSchemaRefusal(i, name, "is not valid JSON.", "", 0)
	}
	if raw[0] != '{' {
		return toolSchemaRefusal(i, name, "must be a JSON Schema object.", "", 0)
	}
	switch jsonShape(raw, maxToolSchemaDepth, maxToolSchemaNodes) {
	case shapeTooDeep:
		return toolSchemaRefusal(i, name, "nesting exceeds the bound of depth "+strconv.Itoa(maxToolSchemaDepth)+".", "depth", maxToolSchemaDepth)
	case shapeTooMany:
		return toolSchemaRefusal(i, name, "exceeds the bound of "+strconv.Itoa(maxToolSchemaNodes)+" JSON values.", "nodes", maxToolSchemaNodes)
	}
	if needsLint(raw) {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return toolSchemaRefusal(i, name, "is not valid JSON.", "", 0)
		}
		if f := lintSchema(doc); f != nil {
			return toolSchemaRefusal(i, name, f.msg, f.bound, f.limit)
		}
	}
	return nil
}

func toolRefusal(i int, msg string) *codec.Error {
	return invalidRequest("tools[" + strconv.Itoa(i) + "]." + msg)
}

// toolSchemaRefusal is invalid_tool_schema naming the tool and, when bound
// is set, the bound exceeded and its limit.
func toolSchemaRefusal(i int, name, msg, bound string, limit int64) *codec.Error {
	e := &codec.Error{Code: codec.CodeInvalidToolSchema,
		Message: "tools[" + strconv.Itoa(i) + "].function.parameters of " + name + ": " + msg}
	if bound != "" {
		e.Detail = codec.Detail{Bound: bound, Limit: limit, HasLimit: true}
	}
	return e
}

// checkToolChoice accepts an absent tool_choice, "none", "auto",
// "required" (with tools), or an object naming a declared function.
func checkToolChoice(raw json.RawMessage, tools []codec.Tool) *codec.Error {
	raw = trimJSONSpace(raw)
	if len(raw) == 0 || isJSONNull(raw) {
		return nil
	}
	switch raw[0] {
	case '"':
		v := raw[1 : len(raw)-1]
		if bytes.IndexByte(v, '\\') >= 0 {
			// An escaped spelling: decode it and compare the value.
			var s string
			if sonic.Unmarshal(raw, &s) != nil {
				return errToolChoice
			}
			v = []byte(s)
		}
		switch string(v) {
		case "none", "auto":
			return nil
		case "required":
			if len(tools) == 0 {
				return errToolChoiceTools
			}
			return nil
		}
		return errToolChoice
	case '{':
		var tc struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if sonic.Unmarshal(raw, &tc) != nil || tc.Type != "function" || tc.Function == nil || tc.Function.Name == "" {
			return errToolChoice
		}
		if declaresTool(tools, nil, tc.Function.Name) {
			return nil
		}
		return errToolChoiceName
	}
	return errToolChoice
}

// validName reports whether s matches ^[a-zA-Z0-9_-]{1,64}$, the rule for
// function and json_schema names.
func validName(s string) bool {
	if len(s) == 0 || len(s) > maxSchemaNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// trimJSONSpace returns b without leading and trailing JSON whitespace.
func trimJSONSpace(b []byte) []byte {
	for len(b) > 0 && isJSONSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isJSONSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isJSONNull(b []byte) bool { return string(b) == "null" }

// isJSONString reports whether the trimmed raw value b is a JSON string.
// The decoder has already checked that b is valid JSON.
func isJSONString(b []byte) bool { return len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' }

// Results of jsonShape.
const (
	shapeOK = iota
	shapeTooDeep
	shapeTooMany
)

// jsonShape measures valid JSON b: its nesting depth (objects and arrays;
// a scalar has depth 0) and its number of values (every object, array,
// string, number, true, false and null, not counting object keys). It
// stops at the first bound exceeded and reports which.
func jsonShape(b []byte, maxDepth, maxNodes int) int {
	depth, nodes := 0, 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '{', '[':
			depth++
			nodes++
			if depth > maxDepth {
				return shapeTooDeep
			}
		case '}', ']':
			depth--
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			// A string followed by a colon is an object key, not a value.
			j := i + 1
			for j < len(b) && isJSONSpace(b[j]) {
				j++
			}
			if j < len(b) && b[j] == ':' {
				continue
			}
			nodes++
		case ' ', '\t', '\n', '\r', ',', ':':
			continue
		default:
			// A number or a literal: skip to its end.
			nodes++
			for i+1 < len(b) && !isJSONDelimiter(b[i+1]) {
				i++
			}
		}
		if nodes > maxNodes {
			return shapeTooMany
		}
	}
	return shapeOK
}

func isJSONDelimiter(c byte) bool {
	return isJSONSpace(c) || c == ',' || c == ':' || c == ']' || c == '}'
}

// maxTokensOn is the max_tokens a turn runs with on tier: the tier's cap,
// or less when the request asked for less (asked nil: not sent). An
// explicit tier's is known once the request is read; auto's once routed.
func maxTokensOn(tier *hotpath.Tier, asked *int64) int64 {
	m := int64(tier.MaxOutput)
	if asked != nil && *asked < m {
		m = *asked
	}
	return m
}

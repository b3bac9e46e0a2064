package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/bytedance/sonic"
)

// requestError is a refusal of a malformed chat request, answered 400 with
// the body OpenAI's chat completions API sends:
// {"error":{"message","type":"invalid_request_error","param","code"}}.
type requestError struct {
	msg, param, code string
}

// looseJSON decodes numbers as json.Number, so that an integer field can be
// told from a fractional one.
var looseJSON = sonic.Config{UseNumber: true}.Froze()

// validateChat checks a chat completions body the way OpenAI's API and a
// vLLM server do before they generate anything: the JSON is an object, every
// field is one the API defines, with its type, its enum and its range;
// messages carry only the fields of their role; tools are function tools
// with valid names; tool_choice is a known mode or names a declared tool and
// comes only with tools; response_format has its shape; stream_options
// comes only with stream. The first problem found is returned.
func validateChat(body []byte) *requestError {
	var root any
	if err := looseJSON.Unmarshal(body, &root); err != nil {
		return &requestError{msg: "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"}
	}
	req, ok := root.(map[string]any)
	if !ok {
		return invalidType("", root, "an object")
	}
	for _, name := range sortedNames(req) {
		if _, known := topFields[name]; !known {
			return &requestError{msg: "Unrecognized request argument supplied: " + name}
		}
	}
	v := validator{req: req}
	return v.run()
}

// topFields are the request fields of the chat completions API, each with
// the check of its value; nil means any value of a known field is taken.
var topFields = map[string]func(v *validator, val any) *requestError{
	"model":                 func(_ *validator, val any) *requestError { return wantString("model", val) },
	"messages":              nil, // checked by run, in order
	"stream":                func(_ *validator, val any) *requestError { return wantBool("stream", val) },
	"stream_options":        nil, // needs stream
	"max_tokens":            func(_ *validator, val any) *requestError { return wantInt("max_tokens", val, 1) },
	"max_completion_tokens": func(_ *validator, val any) *requestError { return wantInt("max_completion_tokens", val, 1) },
	"n":                     func(_ *validator, val any) *requestError { return wantInt("n", val, 1) },
	"seed":                  func(_ *validator, val any) *requestError { return wantInt("seed", val, math.MinInt64) },
	"temperature":           func(_ *validator, val any) *requestError { return wantNumber("temperature", val, 0, 2) },
	"top_p":                 func(_ *validator, val any) *requestError { return wantNumber("top_p", val, 0, 1) },
	"frequency_penalty":     func(_ *validator, val any) *requestError { return wantNumber("frequency_penalty", val, -2, 2) },
	"presence_penalty":      func(_ *validator, val any) *requestError { return wantNumber("presence_penalty", val, -2, 2) },
	"logprobs":              func(_ *validator, val any) *requestError { return wantBool("logprobs", val) },
	"top_logprobs":          func(_ *validator, val any) *requestError { return wantInt("top_logprobs", val, 0) },
	"parallel_tool_calls":   (*validator).parallelToolCalls,
	"store":                 func(_ *validator, val any) *requestError { return wantBool("store", val) },
	"user":                  func(_ *validator, val any) *requestError { return wantString("user", val) },
	"reasoning_effort": func(_ *validator, val any) *requestError {
		return wantEnum("reasoning_effort", val, "none", "minimal", "low", "medium", "high", "xhigh")
	},
	"service_tier": func(_ *validator, val any) *requestError {
		return wantEnum("service_tier", val, "auto", "default", "flex", "scale", "priority")
	},
	"verbosity":          func(_ *validator, val any) *requestError { return wantEnum("verbosity", val, "low", "medium", "high") },
	"stop":               nil,
	"logit_bias":         nil,
	"metadata":           nil,
	"modalities":         nil,
	"audio":              nil,
	"prediction":         nil,
	"prompt_cache_key":   func(_ *validator, val any) *requestError { return wantString("prompt_cache_key", val) },
	"safety_identifier":  func(_ *validator, val any) *requestError { return wantString("safety_identifier", val) },
	"web_search_options": nil,
	"tools":              nil, // checked by run, before tool_choice
	"tool_choice":        nil,
	"response_format":    nil,
	"functions":          nil,
	"function_call":      nil,
}

type validator struct {
	req   map[string]any
	tools []string // declared function names
}

func (v *validator) run() *requestError {
	model, ok := v.req["model"]
	if !ok {
		return missing("model")
	}
	if e := wantString("model", model); e != nil {
		return e
	}
	if e := v.messages(); e != nil {
		return e
	}
	for _, name := range sortedNames(v.req) {
		val := v.req[name]
		if check := topFields[name]; check != nil && val != nil {
			if e := check(v, val); e != nil {
				return e
			}
		}
	}
	if e := v.streamOptions(); e != nil {
		return e
	}
	if e := v.toolList(); e != nil {
		return e
	}
	if e := v.toolChoice(); e != nil {
		return e
	}
	return v.responseFormat()
}

// messages checks the conversation: a non-empty array of messages, each
// with the fields its role allows.
func (v *validator) messages() *requestError {
	raw, ok := v.req["messages"]
	if !ok {
		return missing("messages")
	}
	msgs, ok := raw.([]any)
	if !ok {
		return invalidType("messages", raw, "an array")
	}
	if len(msgs) == 0 {
		return &requestError{msg: "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
			param: "messages", code: "empty_array"}
	}
	for i, mv := range msgs {
		path := "messages[" + strconv.Itoa(i) + "]"
		m, ok := mv.(map[string]any)
		if !ok {
			return invalidType(path, mv, "an object")
		}
		if e := checkMessage(path, m); e != nil {
			return e
		}
	}
	return nil
}

// messageFields are the fields each role's message may carry.
var messageFields = map[string][]string{
	"system":    {"role", "content", "name"},
	"developer": {"role", "content", "name"},
	"user":      {"role", "content", "name"},
	"assistant": {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"},
	// name on a tool message is accepted, as vLLM and OpenAI take it.
	"tool":     {"role", "content", "tool_call_id", "name"},
	"function": {"role", "content", "name"},
}

func checkMessage(path string, m map[string]any) *requestError {
	rv, ok := m["role"]
	if !ok {
		return missing(path + ".role")
	}
	if e := wantEnum(path+".role", rv, "system", "developer", "user", "assistant", "tool", "function"); e != nil {
		return e
	}
	role := rv.(string)
	if e := onlyFields(path, m, messageFields[role]); e != nil {
		return e
	}
	if n, ok := m["name"]; ok && n != nil {
		if e := wantString(path+".name", n); e != nil {
			return e
		}
	}
	content, has := m["content"]
	switch role {
	case "assistant":
		calls, hasCalls := m["tool_calls"]
		if (!has || content == nil) && (!hasCalls || calls == nil) && m["function_call"] == nil {
			return missing(path + ".content")
		}
		if has && content != nil {
			if e := checkContent(path+".content", content, "text", "refusal"); e != nil {
				return e
			}
		}
		if hasCalls && calls != nil {
			if e := checkToolCalls(path+".tool_calls", calls); e != nil {
				return e
			}
		}
		return nil
	case "user":
		if !has {
			return missing(path + ".content")
		}
		return checkContent(path+".content", content, "text", "image_url", "input_audio", "file")
	case "tool":
		id, ok := m["tool_call_id"]
		if !ok {
			return missing(path + ".tool_call_id")
		}
		if e := wantString(path+".tool_call_id", id); e != nil {
			return e
		}
	}
	if !has {
		return missing(path + ".content")
	}
	return checkContent(path+".content", content, "text")
}

// checkContent checks a message's content: a string, or a non-empty array
// of parts of the given types.
func checkContent(path string, content any, types ...string) *requestError {
	switch c := content.(type) {
	case string:
		return nil
	case []any:
		if len(c) == 0 {
			return &requestError{msg: "Invalid '" + path + "': empty array. Expected an array with minimum length 1, but got an empty array instead.",
				param: path, code: "empty_array"}
		}
		for j, pv := range c {
			pp := path + "[" + strconv.Itoa(j) + "]"
			p, ok := pv.(map[string]any)
			if !ok {
				return invalidType(pp, pv, "an object")
			}
			tv, ok := p["type"]
			if !ok {
				return missing(pp + ".type")
			}
			if e := wantEnum(pp+".type", tv, types...); e != nil {
				return e
			}
			if e := checkPart(pp, tv.(string), p); e != nil {
				return e
			}
		}
		return nil
	}
	return invalidType(path, content, "one of a string or array of objects")
}

func checkPart(path, typ string, p map[string]any) *requestError {
	switch typ {
	case "text", "refusal":
		if e := onlyFields(path, p, []string{"type", typ}); e != nil {
			return e
		}
		t, ok := p[typ]
		if !ok {
			return missing(path + "." + typ)
		}
		return wantString(path+"."+typ, t)
	case "image_url":
		if e := onlyFields(path, p, []string{"type", "image_url"}); e != nil {
			return e
		}
		iv, ok := p["image_url"]
		if !ok {
			return missing(path + ".image_url")
		}
		img, ok := iv.(map[string]any)
		if !ok {
			return invalidType(path+".image_url", iv, "an object")
		}
		if e := onlyFields(path+".image_url", img, []string{"url", "detail"}); e != nil {
			return e
		}
		u, ok := img["url"]
		if !ok {
			return missing(path + ".image_url.url")
		}
		if e := wantString(path+".image_url.url", u); e != nil {
			return e
		}
		if d, ok := img["detail"]; ok && d != nil {
			return wantEnum(path+".image_url.detail", d, "auto", "low", "high")
		}
	}
	return nil
}

func checkToolCalls(path string, calls any) *requestError {
	list, ok := calls.([]any)
	if !ok {
		return invalidType(path, calls, "an array")
	}
	for j, cv := range list {
		cp := path + "[" + strconv.Itoa(j) + "]"
		c, ok := cv.(map[string]any)
		if !ok {
			return invalidType(cp, cv, "an object")
		}
		if e := onlyFields(cp, c, []string{"id", "type", "function"}); e != nil {
			return e
		}
		for _, f := range []string{"id", "type", "function"} {
			if _, ok := c[f]; !ok {
				return missing(cp + "." + f)
			}
		}
		if e := wantString(cp+".id", c["id"]); e != nil {
			return e
		}
		if e := wantEnum(cp+".type", c["type"], "function"); e != nil {
			return e
		}
		fv := c["function"]
		f, ok := fv.(map[string]any)
		if !ok {
			return invalidType(cp+".function", fv, "an object")
		}
		if e := onlyFields(cp+".function", f, []string{"name", "arguments"}); e != nil {
			return e
		}
		for _, k := range []string{"name", "arguments"} {
			val, ok := f[k]
			if !ok {
				return missing(cp + ".function." + k)
			}
			if e := wantString(cp+".function."+k, val); e != nil {
				return e
			}
		}
	}
	return nil
}

// streamOptions refuses stream_options without stream, as OpenAI does.
func (v *validator) streamOptions() *requestError {
	so, ok := v.req["stream_options"]
	if !ok || so == nil {
		return nil
	}
	if s, _ := v.req["stream"].(bool); !s {
		return &requestError{msg: "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
			param: "stream_options", code: "invalid_value"}
	}
	m, ok := so.(map[string]any)
	if !ok {
		return invalidType("stream_options", so, "an object")
	}
	if e := onlyFields("stream_options", m, []string{"include_usage", "include_obfuscation"}); e != nil {
		return e
	}
	for _, k := range []string{"include_usage", "include_obfuscation"} {
		if b, ok := m[k]; ok && b != nil {
			if e := wantBool("stream_options."+k, b); e != nil {
				return e
			}
		}
	}
	return nil
}

// toolList checks tools: function tools, each with a valid, unique name
// and an object of parameters.
func (v *validator) toolList() *requestError {
	raw, ok := v.req["tools"]
	if !ok || raw == nil {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		return invalidType("tools", raw, "an array")
	}
	for i, tv := range list {
		path := "tools[" + strconv.Itoa(i) + "]"
		t, ok := tv.(map[string]any)
		if !ok {
			return invalidType(path, tv, "an object")
		}
		if e := onlyFields(path, t, []string{"type", "function"}); e != nil {
			return e
		}
		typ, ok := t["type"]
		if !ok {
			return missing(path + ".type")
		}
		if e := wantEnum(path+".type", typ, "function"); e != nil {
			return e
		}
		fv, ok := t["function"]
		if !ok {
			return missing(path + ".function")
		}
		f, ok := fv.(map[string]any)
		if !ok {
			return invalidType(path+".function", fv, "an object")
		}
		if e := onlyFields(path+".function", f, []string{"name", "description", "parameters", "strict"}); e != nil {
			return e
		}
		nv, ok := f["name"]
		if !ok {
			return missing(path + ".function.name")
		}
		if e := wantName(path+".function.name", nv); e != nil {
			return e
		}
		if d, ok := f["description"]; ok && d != nil {
			if e := wantString(path+".function.description", d); e != nil {
				return e
			}
		}
		if p, ok := f["parameters"]; ok && p != nil {
			if _, ok := p.(map[string]any); !ok {
				return invalidType(path+".function.parameters", p, "an object")
			}
		}
		if s, ok := f["strict"]; ok && s != nil {
			if e := wantBool(path+".function.strict", s); e != nil {
				return e
			}
		}
		name := nv.(string)
		if slices.Contains(v.tools, name) {
			return &requestError{msg: "Invalid 'tools': duplicate function name '" + name + "'.", param: "tools", code: "invalid_value"}
		}
		v.tools = append(v.tools, name)
	}
	return nil
}

// parallelToolCalls checks parallel_tool_calls: a bool, which, like
// tool_choice, comes only with tools.
func (v *validator) parallelToolCalls(val any) *requestError {
	if e := wantBool("parallel_tool_calls", val); e != nil {
		return e
	}
	if tools, _ := v.req["tools"].([]any); len(tools) == 0 {
		return &requestError{msg: "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when 'tools' are specified.",
			param: "parallel_tool_calls", code: "invalid_value"}
	}
	return nil
}

// toolChoice checks tool_choice: none, auto, required, or a function tool
// that tools declares; any tool_choice needs tools.
func (v *validator) toolChoice() *requestError {
	raw, ok := v.req["tool_choice"]
	if !ok || raw == nil {
		return nil
	}
	if tools, _ := v.req["tools"].([]any); len(tools) == 0 {
		return &requestError{msg: "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
			param: "tool_choice", code: "invalid_value"}
	}
	switch c := raw.(type) {
	case string:
		return wantEnum("tool_choice", c, "none", "auto", "required")
	case map[string]any:
		if e := onlyFields("tool_choice", c, []string{"type", "function"}); e != nil {
			return e
		}
		typ, ok := c["type"]
		if !ok {
			return missing("tool_choice.type")
		}
		if e := wantEnum("tool_choice.type", typ, "function"); e != nil {
			return e
		}
		fv, ok := c["function"]
		if !ok {
			return missing("tool_choice.function")
		}
		f, ok := fv.(map[string]any)
		if !ok {
			return invalidType("tool_choice.function", fv, "an object")
		}
		if e := onlyFields("tool_choice.function", f, []string{"name"}); e != nil {
			return e
		}
		nv, ok := f["name"]
		if !ok {
			return missing("tool_choice.function.name")
		}
		if e := wantString("tool_choice.function.name", nv); e != nil {
			return e
		}
		if name := nv.(string); !slices.Contains(v.tools, name) {
			return &requestError{msg: "Invalid value for 'tool_choice': function '" + name + "' is not one of the functions declared in 'tools'.",
				param: "tool_choice", code: "invalid_value"}
		}
		return nil
	}
	return invalidType("tool_choice", raw, "one of a string or object")
}

// responseFormat checks response_format: text, json_object, or json_schema
// with a named schema object.
func (v *validator) responseFormat() *requestError {
	raw, ok := v.req["response_format"]
	if !ok || raw == nil {
		return nil
	}
	rf, ok := raw.(map[string]any)
	if !ok {
		return invalidType("response_format", raw, "an object")
	}
	typ, ok := rf["type"]
	if !ok {
		return missing("response_format.type")
	}
	if e := wantEnum("response_format.type", typ, "text", "json_object", "json_schema"); e != nil {
		return e
	}
	if typ != "json_schema" {
		return onlyFields("response_format", rf, []string{"type"})
	}
	if e := onlyFields("response_format", rf, []string{"type", "json_schema"}); e != nil {
		return e
	}
	jv, ok := rf["json_schema"]
	if !ok {
		return missing("response_format.json_schema")
	}
	js, ok := jv.(map[string]any)
	if !ok {
		return invalidType("response_format.json_schema", jv, "an object")
	}
	if e := onlyFields("response_format.json_schema", js, []string{"name", "description", "schema", "strict"}); e != nil {
		return e
	}
	nv, ok := js["name"]
	if !ok {
		return missing("response_format.json_schema.name")
	}
	if e := wantName("response_format.json_schema.name", nv); e != nil {
		return e
	}
	if d, ok := js["description"]; ok && d != nil {
		if e := wantString("response_format.json_schema.description", d); e != nil {
			return e
		}
	}
	if s, ok := js["schema"]; ok && s != nil {
		if _, ok := s.(map[string]any); !ok {
			return invalidType("response_format.json_schema.schema", s, "an object")
		}
	}
	if s, ok := js["strict"]; ok && s != nil {
		return wantBool("response_format.json_schema.strict", s)
	}
	return nil
}

// onlyFields refuses a field of m not in allowed.
func onlyFields(path string, m map[string]any, allowed []string) *requestError {
	for _, k := range sortedNames(m) {
		if !slices.Contains(allowed, k) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			return &requestError{msg: "Unknown parameter: '" + p + "'.", param: p, code: "unknown_parameter"}
		}
	}
	return nil
}

func sortedNames(m map[string]any) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func missing(path string) *requestError {
	return &requestError{msg: "Missing required parameter: '" + path + "'.", param: path, code: "missing_required_parameter"}
}

// typeName names a decoded JSON value's type as OpenAI's errors do.
func typeName(val any) string {
	switch x := val.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "an integer"
		}
		return "a decimal"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", val)
}

func invalidType(path string, val any, want string) *requestError {
	name := path
	if name == "" {
		name = "body"
	}
	return &requestError{msg: "Invalid type for '" + name + "': expected " + want + ", but got " + typeName(val) + " instead.",
		param: path, code: "invalid_type"}
}

func wantString(path string, val any) *requestError {
	if _, ok := val.(string); !ok {
		return invalidType(path, val, "a string")
	}
	return nil
}

func wantBool(path string, val any) *requestError {
	if _, ok := val.(bool); !ok {
		return invalidType(path, val, "a boolean")
	}
	return nil
}

func wantInt(path string, val any, least int64) *requestError {
	n, ok := val.(json.Number)
	if !ok {
		return invalidType(path, val, "an integer")
	}
	i, err := n.Int64()
	if err != nil {
		return invalidType(path, val, "an integer")
	}
	if i < least {
		return &requestError{msg: "Invalid '" + path + "': integer below minimum value. Expected a value >= " + strconv.FormatInt(least, 10) +
			", but got " + n.String() + " instead.", param: path, code: "integer_below_min_value"}
	}
	return nil
}

func wantNumber(path string, val any, least, most float64) *requestError {
	n, ok := val.(json.Number)
	if !ok {
		return invalidType(path, val, "a number")
	}
	f, err := n.Float64()
	if err != nil {
		return invalidType(path, val, "a number")
	}
	switch {
	case f < least:
		return &requestError{msg: "Invalid '" + path + "': decimal below minimum value. Expected a value >= " +
			strconv.FormatFloat(least, 'g', -1, 64) + ", but got " + n.String() + " instead.", param: path, code: "decimal_below_min_value"}
	case f > most:
		return &requestError{msg: "Invalid '" + path + "': decimal above maximum value. Expected a value <= " +
			strconv.FormatFloat(most, 'g', -1, 64) + ", but got " + n.String() + " instead.", param: path, code: "decimal_above_max_value"}
	}
	return nil
}

func wantEnum(path string, val any, values ...string) *requestError {
	s, ok := val.(string)
	if !ok {
		return invalidType(path, val, "a string")
	}
	if slices.Contains(values, s) {
		return nil
	}
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = "'" + v + "'"
	}
	list := strings.Join(quoted[:len(quoted)-1], ", ")
	if len(quoted) > 1 {
		list += ", and " + quoted[len(quoted)-1]
	} else {
		list = quoted[0]
	}
	return &requestError{msg: "Invalid value: '" + s + "'. Supported values are: " + list + ".", param: path, code: "invalid_value"}
}

// wantName checks a function or schema name: ^[a-zA-Z0-9_-]{1,64}$.
func wantName(path string, val any) *requestError {
	s, ok := val.(string)
	if !ok {
		return invalidType(path, val, "a string")
	}
	valid := len(s) > 0 && len(s) <= 64
	for i := 0; valid && i < len(s); i++ {
		c := s[i]
		valid = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	if !valid {
		return &requestError{msg: "Invalid '" + path + "': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
			param: path, code: "invalid_value"}
	}
	return nil
}

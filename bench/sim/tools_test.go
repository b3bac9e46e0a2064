package sim

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/tokens"
)

const weatherSchema = `{
  "type": "object",
  "properties": {
    "city": {"type": "string", "minLength": 2},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "when": {"type": "string", "format": "date-time"},
    "optional": {"type": "string"}
  },
  "required": ["city", "unit", "days", "when"],
  "additionalProperties": false
}`

const orderSchema = `{
  "type": "object",
  "$defs": {
    "item": {
      "type": "object",
      "properties": {
        "sku": {"type": "string", "maxLength": 4},
        "qty": {"type": "integer", "exclusiveMinimum": 0, "multipleOf": 5},
        "price": {"type": "number", "minimum": 0.5},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 2, "uniqueItems": true}
      },
      "required": ["sku", "qty", "price", "tags"]
    }
  },
  "properties": {
    "customer": {
      "type": "object",
      "properties": {
        "email": {"type": "string", "format": "email"},
        "vip": {"type": "boolean"},
        "note": {"type": ["null", "string"]}
      },
      "required": ["email", "vip", "note"]
    },
    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 3},
    "mode": {"anyOf": [{"type": "string", "const": "fast"}, {"type": "integer"}]},
    "extra": {"allOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}}, "required": ["b"]}
    ]},
    "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}]}
  },
  "required": ["customer", "items", "mode", "extra", "pair"]
}`

func tool(name, schema string) map[string]any {
	return map[string]any{"type": "function", "function": map[string]any{
		"name": name, "description": "The " + name + " tool.", "parameters": json.RawMessage(schema),
	}}
}

var toolID = regexp.MustCompile(`^tc_[0-9a-f]{16}$`)

func TestToolCall(t *testing.T) {
	h := newHarness(t, Config{})
	schemas := map[string]string{
		"get_weather": weatherSchema,
		"place_order": orderSchema,
		"no_params":   `{"type":"object","properties":{}}`,
		"no_required": `{"type":"object","properties":{"x":{"type":"string"}}}`,
	}
	var tools []any
	for _, name := range []string{"get_weather", "place_order", "no_params", "no_required"} {
		tools = append(tools, tool(name, schemas[name]))
	}
	for name, schema := range schemas {
		t.Run(name, func(t *testing.T) {
			compiled := compileSchema(t, schema)
			body := chat("Please [[sim:tool="+name+"]]", "tools", tools)
			v, _ := h.postJSON("/v1/chat/completions", body, http.StatusOK)
			choice := dig(t, v, "choices.0").(map[string]any)
			require.Equal(t, "tool_calls", choice["finish_reason"])
			msg := choice["message"].(map[string]any)
			require.Nil(t, msg["content"])
			calls := msg["tool_calls"].([]any)
			require.Len(t, calls, 1)
			call := calls[0].(map[string]any)
			require.Regexp(t, toolID, call["id"])
			require.False(t, strings.HasPrefix(call["id"].(string), "call_"))
			require.Equal(t, "function", call["type"])
			require.Equal(t, name, dig(t, call, "function.name"))
			args := dig(t, call, "function.arguments").(string)
			require.NoError(t, validate(compiled, args), "%s", args)
			require.Equal(t, 1+len(tokens.Split(args)), num(t, v, "usage.completion_tokens"))
			require.Equal(t, promptTokens(t, body), num(t, v, "usage.prompt_tokens"))

			// The stream carries the same call.
			s, _ := h.stream(chat("Please [[sim:tool="+name+"]]", "tools", tools, "stream_options", map[string]any{"include_usage": true}))
			require.True(t, s.done)
			got := assembleCalls(t, s.frames)
			require.Len(t, got, 1)
			require.Regexp(t, toolID, got[0].id)
			require.Equal(t, name, got[0].name)
			require.NoError(t, validate(compiled, got[0].arguments), "%s", got[0].arguments)
			require.Equal(t, "tool_calls", finishOf(s.frames[len(s.frames)-2]))
			require.Equal(t, len(s.frames)-3, num(t, s.frames[len(s.frames)-1], "usage.completion_tokens"))
		})
	}
}

// assembleCalls joins the tool-call fragments of a stream per index, and
// checks the fragment shapes on the way.
func assembleCalls(t *testing.T, frames []map[string]any) []toolCall {
	t.Helper()
	var calls []toolCall
	for _, f := range frames {
		d := delta(f)
		tc, ok := d["tool_calls"]
		if !ok {
			continue
		}
		require.Len(t, d, 1, "tool calls never share a delta with content")
		frags := tc.([]any)
		require.Len(t, frags, 1)
		frag := frags[0].(map[string]any)
		i := num(t, frag, "index")
		fn := frag["function"].(map[string]any)
		if id, ok := frag["id"]; ok {
			require.Equal(t, len(calls), i, "a call's first fragment comes in index order")
			require.Equal(t, "function", frag["type"])
			require.Equal(t, "", fn["arguments"])
			calls = append(calls, toolCall{id: id.(string), name: fn["name"].(string)})
			continue
		}
		require.Less(t, i, len(calls))
		require.Len(t, frag, 2, "a later fragment carries index and function only: %v", frag)
		require.Len(t, fn, 1)
		calls[i].arguments += fn["arguments"].(string)
	}
	return calls
}

func TestParallelToolCalls(t *testing.T) {
	h := newHarness(t, Config{})
	tools := []any{tool("get_weather", weatherSchema), tool("place_order", orderSchema)}
	weather, order := compileSchema(t, weatherSchema), compileSchema(t, orderSchema)

	v, _ := h.postJSON("/v1/chat/completions", chat("[[sim:tool=get_weather,place_order]]", "tools", tools), http.StatusOK)
	calls := dig(t, v, "choices.0.message.tool_calls").([]any)
	require.Len(t, calls, 2)
	require.NoError(t, validate(weather, dig(t, calls[0], "function.arguments").(string)))
	require.NoError(t, validate(order, dig(t, calls[1], "function.arguments").(string)))
	require.NotEqual(t, dig(t, calls[0], "id"), dig(t, calls[1], "id"))

	s, _ := h.stream(chat("[[sim:tool=get_weather,place_order]]", "tools", tools))
	require.True(t, s.done)
	got := assembleCalls(t, s.frames)
	require.Len(t, got, 2)
	require.Equal(t, "get_weather", got[0].name)
	require.Equal(t, "place_order", got[1].name)
	require.NoError(t, validate(weather, got[0].arguments), got[0].arguments)
	require.NoError(t, validate(order, got[1].arguments), got[1].arguments)

	// The fragments interleave: both indexes appear before either call ends.
	var order2 []int
	for _, f := range s.frames[1 : len(s.frames)-1] {
		frag := dig(t, delta(f), "tool_calls.0").(map[string]any)
		order2 = append(order2, num(t, frag, "index"))
	}
	require.Equal(t, []int{0, 1, 0, 1}, order2[:4])
}

// TestParallelToolCallsFalse: with parallel_tool_calls false a reply that
// would call several tools calls only the first, as OpenAI's models do;
// true is the default.
func TestParallelToolCallsFalse(t *testing.T) {
	h := newHarness(t, Config{})
	tools := []any{tool("get_weather", weatherSchema), tool("place_order", orderSchema)}
	const both = "[[sim:tool=get_weather,place_order]]"

	v, _ := h.postJSON("/v1/chat/completions", chat(both, "tools", tools, "parallel_tool_calls", false), http.StatusOK)
	calls := dig(t, v, "choices.0.message.tool_calls").([]any)
	require.Len(t, calls, 1)
	require.Equal(t, "get_weather", dig(t, calls[0], "function.name"))
	require.NoError(t, validate(compileSchema(t, weatherSchema), dig(t, calls[0], "function.arguments").(string)))
	require.Equal(t, "tool_calls", dig(t, v, "choices.0.finish_reason"))

	s, _ := h.stream(chat(both, "tools", tools, "parallel_tool_calls", false))
	require.True(t, s.done)
	got := assembleCalls(t, s.frames)
	require.Len(t, got, 1)
	require.Equal(t, "get_weather", got[0].name)

	v, _ = h.postJSON("/v1/chat/completions", chat(both, "tools", tools, "parallel_tool_calls", true), http.StatusOK)
	require.Len(t, dig(t, v, "choices.0.message.tool_calls").([]any), 2)

	// Every name is still checked against tools.
	h.postJSON("/v1/chat/completions", chat("[[sim:tool=get_weather,nope]]", "tools", tools, "parallel_tool_calls", false), http.StatusBadRequest)
}

func TestToolCallEdges(t *testing.T) {
	h := newHarness(t, Config{})
	tools := []any{tool("get_weather", weatherSchema), tool("no_params", `{"type":"object","properties":{}}`)}

	t.Run("undeclared", func(t *testing.T) {
		v, _ := h.postJSON("/v1/chat/completions", chat("[[sim:tool=nope]]", "tools", tools), http.StatusBadRequest)
		require.Equal(t, "invalid_request_error", dig(t, v, "error.type"))
		require.Contains(t, dig(t, v, "error.message"), `"nope"`)
	})
	t.Run("no tools at all", func(t *testing.T) {
		h.postJSON("/v1/chat/completions", chat("[[sim:tool=get_weather]]"), http.StatusBadRequest)
	})
	t.Run("after a tool result the answer is text", func(t *testing.T) {
		body := map[string]any{"model": "m", "tools": tools, "messages": []any{
			map[string]any{"role": "user", "content": "Weather? [[sim:tool=get_weather]] [[sim:tokens=4]]"},
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": "tc_0123456789abcdef", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`},
			}}},
			map[string]any{"role": "tool", "tool_call_id": "tc_0123456789abcdef", "content": "18C and sunny"},
		}}
		v, _ := h.postJSON("/v1/chat/completions", body, http.StatusOK)
		require.Equal(t, "stop", dig(t, v, "choices.0.finish_reason"))
		require.Equal(t, 4, tokens.Count(dig(t, v, "choices.0.message.content").(string)))
		require.Equal(t, promptTokens(t, body), num(t, v, "usage.prompt_tokens"))
	})
	t.Run("tool_choice names a function", func(t *testing.T) {
		v, _ := h.postJSON("/v1/chat/completions", chat("Hi", "tools", tools,
			"tool_choice", map[string]any{"type": "function", "function": map[string]any{"name": "no_params"}}), http.StatusOK)
		require.Equal(t, "no_params", dig(t, v, "choices.0.message.tool_calls.0.function.name"))
		require.Equal(t, "{}", dig(t, v, "choices.0.message.tool_calls.0.function.arguments"))
	})
	t.Run("tool_choice required", func(t *testing.T) {
		v, _ := h.postJSON("/v1/chat/completions", chat("Hi", "tools", tools, "tool_choice", "required"), http.StatusOK)
		require.Equal(t, "get_weather", dig(t, v, "choices.0.message.tool_calls.0.function.name"))
	})
	t.Run("tool_choice auto answers text", func(t *testing.T) {
		v, _ := h.postJSON("/v1/chat/completions", chat("Hi", "tools", tools, "tool_choice", "auto"), http.StatusOK)
		require.NotContains(t, dig(t, v, "choices.0.message"), "tool_calls")
	})
	t.Run("cut by max_tokens", func(t *testing.T) {
		v, _ := h.postJSON("/v1/chat/completions", chat("[[sim:tool=get_weather]]", "tools", tools, "max_tokens", 5), http.StatusOK)
		require.Equal(t, "length", dig(t, v, "choices.0.finish_reason"))
		require.Equal(t, 5, num(t, v, "usage.completion_tokens"))
		args := dig(t, v, "choices.0.message.tool_calls.0.function.arguments").(string)
		require.False(t, json.Valid([]byte(args)), "%s", args)
	})
	t.Run("bad parameters", func(t *testing.T) {
		bad := map[string]any{"type": "function", "function": map[string]any{"name": "x", "parameters": "not a schema"}}
		v, _ := h.postJSON("/v1/chat/completions", chat("[[sim:tool=x]]", "tools", []any{bad}), http.StatusBadRequest)
		require.Equal(t, "tools[0].function.parameters", dig(t, v, "error.param"))
	})
}

func TestJSONContent(t *testing.T) {
	h := newHarness(t, Config{})
	format := map[string]any{"type": "json_schema", "json_schema": map[string]any{
		"name": "order", "strict": true, "schema": json.RawMessage(orderSchema),
	}}
	compiled := compileSchema(t, orderSchema)
	for _, tc := range []struct {
		name, text string
		valid      bool
	}{
		{"directive", "[[sim:json]]", true},
		{"implied by response_format", "Give me an order", true},
		{"invalid", "[[sim:json_invalid]]", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := h.postJSON("/v1/chat/completions", chat(tc.text, "response_format", format), http.StatusOK)
			content := dig(t, v, "choices.0.message.content").(string)
			require.True(t, json.Valid([]byte(content)), "%s", content)
			if tc.valid {
				require.NoError(t, validate(compiled, content), "%s", content)
			} else {
				require.Error(t, validate(compiled, content), "%s", content)
			}
			require.Equal(t, tokens.Count(content), num(t, v, "usage.completion_tokens"))

			s, _ := h.stream(chat(tc.text, "response_format", format))
			require.True(t, s.done)
			var streamed string
			for _, f := range s.frames[1 : len(s.frames)-1] {
				streamed += delta(f)["content"].(string)
			}
			require.Equal(t, tc.valid, validate(compiled, streamed) == nil, "%s", streamed)
		})
	}
	t.Run("json_object", func(t *testing.T) {
		obj := map[string]any{"type": "json_object"}
		v, _ := h.postJSON("/v1/chat/completions", chat("[[sim:json]]", "response_format", obj), http.StatusOK)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(dig(t, v, "choices.0.message.content").(string)), &m))
		v, _ = h.postJSON("/v1/chat/completions", chat("Hi", "response_format", obj), http.StatusOK)
		require.NoError(t, json.Unmarshal([]byte(dig(t, v, "choices.0.message.content").(string)), &m))
		v, _ = h.postJSON("/v1/chat/completions", chat("[[sim:json_invalid]]", "response_format", obj), http.StatusOK)
		require.False(t, json.Valid([]byte(dig(t, v, "choices.0.message.content").(string))))
	})
	t.Run("schema without required", func(t *testing.T) {
		schema := `{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string"}}}`
		f := map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": json.RawMessage(schema)}}
		v, _ := h.postJSON("/v1/chat/completions", chat("[[sim:json_invalid]]", "response_format", f), http.StatusOK)
		require.Error(t, validate(compileSchema(t, schema), dig(t, v, "choices.0.message.content").(string)))
	})
}

func TestSchemaInstances(t *testing.T) {
	for _, schema := range []string{
		weatherSchema,
		orderSchema,
		`{"type":"string","minLength":10,"maxLength":12}`,
		`{"type":"integer","minimum":-5,"maximum":-3}`,
		`{"type":"number","exclusiveMaximum":-1.5}`,
		`{"type":"array","items":{"type":"integer"},"minItems":3,"uniqueItems":true}`,
		`{"type":"array","maxItems":0}`,
		`{"enum":[3,"x"]}`,
		`{"const":{"b":1,"a":[true]}}`,
		`{"oneOf":[{"type":"string","format":"uuid"},{"type":"integer"}]}`,
		`{"type":"object","properties":{"d":{"type":"string","format":"date"},"u":{"type":"string","format":"uri"}},"required":["d","u","free"],"additionalProperties":{"type":"integer"}}`,
		`{"$ref":"#/definitions/x","definitions":{"x":{"type":"object","properties":{"self":{"$ref":"#/definitions/x"}},"required":["k"]}}}`,
		// A tree: its only finite instances end in empty child lists.
		`{"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["name","children"],"additionalProperties":false}}}`,
		`{"type":"null"}`,
		`{}`,
	} {
		t.Run(schema, func(t *testing.T) {
			root, err := decodeSchema([]byte(schema))
			require.NoError(t, err)
			g := schemaGen{root: root}
			valid := string(g.appendValid(nil))
			require.NoError(t, validate(compileSchema(t, schema), valid), "%s", valid)
			invalid := string(g.appendInvalid(nil))
			require.True(t, json.Valid([]byte(invalid)), "%s", invalid)
			if schema != `{}` {
				require.Error(t, validate(compileSchema(t, schema), invalid), "%s", invalid)
			}
		})
	}
}

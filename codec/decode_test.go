package codec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJSONPathAt(t *testing.T) {
	f := func(doc string, at string, want string) {
		t.Helper()
		off := len(doc)
		if at != "" {
			off = indexOf(doc, at)
		}
		require.Equal(t, want, JSONPathAt([]byte(doc), off), doc)
	}
	f(`{"model":5}`, "5", "model")
	f(`{"messages":[{"role":"user"},{"role":"user","content":"a\x"}]}`, `\x`, "messages[1].content")
	f(`{"a":{"b":[1,2,{"c":`, "", "a.b[2].c")
	f(`{"a":1,`, "", "")
	f(`[1,2`, "", "[1]")
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestDecodeRequest(t *testing.T) {
	f := func(body, want string) {
		t.Helper()
		var r ChatRequest
		e := DecodeRequest([]byte(body), &r)
		if want == "" {
			require.Nil(t, e, body)
			return
		}
		require.NotNil(t, e, body)
		require.Equal(t, CodeInvalidRequest, e.Code)
		require.Contains(t, e.Message, want, body)
	}
	f(`{"model":"kavi","messages":[{"role":"user","content":"hi"}]}`, "")
	f(`{"max_tokens":"100"}`, "max_tokens: must be an integer, got a string.")
	f(`{"stream":"true"}`, "stream: must be a boolean, got a string.")
	f(`{"model":5}`, "model: must be a string, got a number.")
	f(`{"messages":[{"role":"user"},{"role":7}]}`, "messages[1].role: must be a string, got a number.")
	f(`{"messages":{}}`, "messages: must be an array, got an object.")
	f(`{"messages":[{"role":"user","content":"\x41"}]}`, "messages[0].content: is not a valid JSON string")
	f(`{"messages":[{"role":"user","content":"\u12G4"}]}`, "messages[0].content: is not a valid JSON string")
	f("{\"messages\":[{\"role\":\"user\",\"content\":\"a\x01b\"}]}", "messages[0].content: is not a valid JSON string")
	f("{\"messages\":[{\"role\":\"user\",\"content\":\"line\nbreak\"}]}", "messages[0].content: is not a valid JSON string")
	f("{\"messages\":[{\"role\":\"user\",\"content\":\"bad \xff\"}]}", "messages[0].content: is not valid UTF-8")
	f(`{"tools":[{"type":"function","function":{"name":"x","parameters":{"a":"\q"}}}]}`, "tools[0].function.parameters.a: is not a valid JSON string")
	f(`[1]`, "The request body must be a JSON object.")
	f(`{"model":`, "not valid JSON")

	var r ChatRequest
	require.Nil(t, DecodeRequest([]byte(`{"MODEL":"kavi","Stream":true}`), &r))
	require.Empty(t, r.Model, "keys match case-sensitively")
	require.False(t, r.Stream)
}

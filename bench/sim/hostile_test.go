package sim

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/hotpath/cputest"
)

// TestHostileSchemasBounded: no schema makes the in-process simulator build
// a large instance or walk for long. Before the bounds, minLength 1e9 built
// a 1 GB string (13 GiB of RSS through the gateway).
func TestHostileSchemasBounded(t *testing.T) {
	nested := `{"type":"array","minItems":64,"items":` + strings.Repeat(`{"type":"array","minItems":64,"items":`, 20) +
		`{"type":"string","minLength":4096}` + strings.Repeat(`}`, 21)
	var required strings.Builder
	required.WriteString(`{"type":"object","required":[`)
	for i := range 100_000 {
		if i > 0 {
			required.WriteByte(',')
		}
		required.WriteString(`"p`)
		required.WriteString(strings.Repeat("x", i%7))
		required.WriteString(`"`)
	}
	required.WriteString(`]}`)
	fanout := `{"allOf":[{"$ref":"#"},{"$ref":"#"},{"$ref":"#"},{"$ref":"#"}],"type":"object","required":["a"],"properties":{"a":{"$ref":"#"}}}`
	cases := []struct{ name, schema string }{
		{"minLength 1e9", `{"type":"object","required":["a"],"properties":{"a":{"type":"string","minLength":1000000000}}}`},
		{"minLength 1e308", `{"type":"string","minLength":1e308}`},
		{"minItems 1e308", `{"type":"array","minItems":1e308,"items":{"type":"string","minLength":100000}}`},
		{"nested arrays", nested},
		{"self ref", `{"$ref":"#"}`},
		{"required self ref", `{"type":"object","required":["a"],"properties":{"a":{"$ref":"#"}}}`},
		{"allOf fan-out", fanout},
		{"100k required", required.String()},
		{"huge bounds", `{"type":"integer","minimum":1e308,"multipleOf":1e-300}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := cputest.Used(t)
			args, err := toolArguments(json.RawMessage(tc.schema))
			require.NoError(t, err)
			rf := &responseFormat{Type: "json_schema"}
			rf.JSONSchema = &struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
			}{Name: "x", Schema: json.RawMessage(tc.schema)}
			valid, err := jsonContent(rf, false, 1)
			require.NoError(t, err)
			invalid, err := jsonContent(rf, true, 1)
			require.NoError(t, err)
			used := cputest.Used(t) - start
			runtime.ReadMemStats(&after)
			for _, out := range []string{args, valid, invalid} {
				require.LessOrEqual(t, len(out), maxSchemaOutput+maxSchemaString+maxSchemaDepth*maxSchemaItems*8, "instance size")
			}
			require.Less(t, used, 2*time.Second, "CPU")
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(256<<20), "bytes allocated")
		})
	}
}

// TestDirectiveBounds: directives cannot ask for replies past maxTokens.
func TestDirectiveBounds(t *testing.T) {
	_, err := parseDirectives("[[sim:tokens=1000000]]")
	require.Error(t, err)
	_, err = parseDirectives("[[sim:reasoning=1000000000]]")
	require.Error(t, err)
	d, err := parseDirectives("[[sim:tokens=131072]]")
	require.NoError(t, err)
	require.Equal(t, maxTokens, d.tokens)
}

// TestPromptOverWindowRefused: the simulator's own count stops at its
// window and refuses the rest as a provider does, after little work.
func TestPromptOverWindowRefused(t *testing.T) {
	h := newHarness(t, Config{})
	word := strings.Repeat("a", 4<<20)
	start := cputest.Used(t)
	v, _ := h.postJSON("/v1/chat/completions", chat(word), 400)
	require.Equal(t, "context_length_exceeded", dig(t, v, "error.code"))
	require.Less(t, cputest.Used(t)-start, 3*time.Second)
}

package frameorder

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func namedSSE(events ...string) []byte {
	var b strings.Builder
	for i := 0; i+1 < len(events); i += 2 {
		b.WriteString("event: " + events[i] + "\ndata: " + events[i+1] + "\n\n")
	}
	return []byte(b.String())
}

const (
	anStartEv = `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"mira","content":[],"stop_reason":null,"usage":{"input_tokens":0,"output_tokens":0}}}`
	anText0   = `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`
	anDelta0  = `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`
	anStop0   = `{"type":"content_block_stop","index":0}`
	anMsgD    = `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1}}`
	anMsgStop = `{"type":"message_stop"}`
	anPing    = `{"type":"ping"}`
)

// Each broken Anthropic stream is caught, and names what broke.
func TestAnthropicGrammar(t *testing.T) {
	ok := namedSSE("message_start", anStartEv, "content_block_start", anText0, "ping", anPing, "content_block_delta", anDelta0,
		"content_block_stop", anStop0, "message_delta", anMsgD, "message_stop", anMsgStop)
	out := CheckStream(Anthropic, ok)
	require.Empty(t, out.Violation)
	require.True(t, out.Complete)
	require.Equal(t, 1, out.Content)

	bad := []struct {
		name, want string
		body       []byte
	}{
		{"no start", "first event is not message_start", namedSSE("content_block_start", anText0)},
		{"delta with no block", "no block open", namedSSE("message_start", anStartEv, "content_block_delta", anDelta0)},
		{"wrong index", "index is not the next block's", namedSSE("message_start", anStartEv, "content_block_start",
			strings.Replace(anText0, `"index":0`, `"index":1`, 1))},
		{"message_delta with a block open", "block is open", namedSSE("message_start", anStartEv, "content_block_start", anText0,
			"message_delta", anMsgD)},
		{"thinking delta in a text block", "thinking_delta outside", namedSSE("message_start", anStartEv, "content_block_start", anText0,
			"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"x"}}`)},
		{"truncated", "silent truncation", namedSSE("message_start", anStartEv, "content_block_start", anText0, "content_block_delta", anDelta0)},
		{"type is not the name", "type is not the event's name", namedSSE("message_start", `{"type":"ping"}`)},
		{"after stop", "after the terminal event", append(ok, namedSSE("ping", anPing)...)},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			require.Contains(t, CheckStream(Anthropic, c.body).Violation, c.want)
		})
	}
	failed := CheckStream(Anthropic, namedSSE("message_start", anStartEv, "error", `{"type":"error","error":{"type":"overloaded_error","message":"x"}}`))
	require.Empty(t, failed.Violation)
	require.True(t, failed.Failed)
	require.Equal(t, "overloaded_error", failed.ErrorCode)
}

func rsEv(name string, seq int, rest string) (string, string) {
	return name, `{"type":"` + name + `","sequence_number":` + itoa(seq) + rest + `}`
}

func itoa(n int) string { return strconv.Itoa(n) }

// Each broken Responses stream is caught, and names what broke.
func TestResponsesGrammar(t *testing.T) {
	resp := func(status string) string {
		return `,"response":{"id":"resp_1","object":"response","status":"` + status + `","output":[],"usage":{"input_tokens":1}}`
	}
	ev := func(name string, seq int, rest string) []string { n, d := rsEv(name, seq, rest); return []string{n, d} }
	var all []string
	for _, e := range [][]string{
		ev("response.created", 0, resp("in_progress")),
		ev("response.in_progress", 1, resp("in_progress")),
		ev("response.output_item.added", 2, `,"output_index":0,"item":{"type":"message","id":"m","content":[]}`),
		ev("response.content_part.added", 3, `,"output_index":0,"item_id":"m","content_index":0,"part":{"type":"output_text","text":""}`),
		ev("response.output_text.delta", 4, `,"output_index":0,"item_id":"m","content_index":0,"delta":"hi"`),
		ev("response.output_text.done", 5, `,"output_index":0,"item_id":"m","content_index":0,"text":"hi"`),
		ev("response.content_part.done", 6, `,"output_index":0,"item_id":"m","content_index":0,"part":{"type":"output_text","text":"hi"}`),
		ev("response.output_item.done", 7, `,"output_index":0,"item":{"type":"message","id":"m","content":[]}`),
		ev("response.completed", 8, resp("completed")),
	} {
		all = append(all, e...)
	}
	out := CheckStream(Responses, namedSSE(all...))
	require.Empty(t, out.Violation)
	require.True(t, out.Complete)
	require.Equal(t, 1, out.Content)

	skipSeq := append(append([]string{}, all[:8]...), ev("response.output_text.delta", 5, `,"output_index":0,"item_id":"m","content_index":0,"delta":"hi"`)...)
	require.Contains(t, CheckStream(Responses, namedSSE(skipSeq...)).Violation, "sequence_number")
	noDone := append(append([]string{}, all[:10]...), ev("response.completed", 5, resp("completed"))...)
	require.Contains(t, CheckStream(Responses, namedSSE(noDone...)).Violation, "item open")
	require.Contains(t, CheckStream(Responses, namedSSE(all[:10]...)).Violation, "silent truncation")
	wrongStatus := append(append([]string{}, all[:4]...), ev("response.completed", 2, resp("failed"))...)
	require.Contains(t, CheckStream(Responses, namedSSE(wrongStatus...)).Violation, "status")
}

//go:build !race

package codec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The Anthropic and Responses frame writers allocate nothing once their
// buffers have grown.
func TestWireFrameWritersZeroAllocs(t *testing.T) {
	h := &Head{ID: []byte("msg_0123456789abcdef0123456789abcdef"), Created: 1700000000, Model: "mira"}
	rh := &ResponseHead{ID: []byte("resp_0123456789abcdef0123456789abcdef"), CreatedAt: 1700000000, Model: "mira", MaxOutput: 256}
	b := &Bill{Tier: "mira", InputTokens: 40, OutputTokens: 9, CacheReadTokens: 4}
	text := []byte(`"a \"quoted\" word"`)
	id, name, args := []byte(`"call_1"`), []byte(`"get_weather"`), []byte(`"{\"city\":"`)
	frags := []byte(`[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"c"}},{"index":1,"function":{"arguments":"ity\"}"}}]`)
	dst := make([]byte, 0, 64<<10)
	var o ResponseOutput
	o.Buf, o.Items = make([]byte, 0, 4096), make([]ResponseItem, 0, 8)
	var it ToolFragments
	var f ToolFragment
	var seq int64
	tests := []struct {
		name string
		fn   func()
	}{
		{"anthropic frames", func() {
			d := AppendAnthropicMessageStart(dst[:0], h)
			d = AppendAnthropicThinkingStart(d, 0)
			d = AppendAnthropicThinkingDelta(d, 0, text)
			d = AppendAnthropicBlockStop(d, 0)
			d = AppendAnthropicTextStart(d, 1)
			d = AppendAnthropicTextDelta(d, 1, text)
			d = AppendAnthropicToolStart(d, 2, id, name)
			d = AppendAnthropicJSONDelta(d, 2, args)
			d = AppendAnthropicPing(d)
			d = AppendAnthropicMessageDelta(d, "tool_calls", b)
			d = AppendAnthropicMessageStop(d)
			_ = AppendAnthropicStreamError(d, ErrInternal, []byte("req-1"))
		}},
		{"responses frames", func() {
			o.Reset()
			seq = 0
			end := ResponseEnd{Status: "in_progress"}
			d := AppendResponseStateEvent(dst[:0], "response.created", seq, rh, nil, &end)
			o.AddMessage()
			d = AppendResponseItemAdded(d, &seq, rh, &o, 0)
			d = AppendResponseTextDelta(d, seq, rh, 0, false, text)
			o.AppendText(text)
			d = AppendResponseItemDone(d, &seq, rh, &o, 0)
			o.AddCall(id, name)
			d = AppendResponseItemAdded(d, &seq, rh, &o, 1)
			d = AppendResponseTextDelta(d, seq, rh, 1, true, args)
			o.AppendText(args)
			d = AppendResponseItemDone(d, &seq, rh, &o, 1)
			end = ResponseEnd{Status: "completed", Bill: b, ReasoningTokens: 3}
			_ = AppendResponseStateEvent(d, "response.completed", seq, rh, &o, &end)
		}},
		{"tool fragments", func() {
			it.Reset(frags)
			for it.Next(&f) {
			}
			if it.Err() != nil {
				t.Fatal(it.Err())
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn()
			require.Zero(t, testing.AllocsPerRun(100, tc.fn))
		})
	}
}

package codec

import "testing"

// BenchmarkAnthropicTextDelta is one text_delta frame of a stream.
func BenchmarkAnthropicTextDelta(b *testing.B) {
	text := []byte(`" quoted\n word"`)
	dst := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendAnthropicTextDelta(dst[:0], 3, text)
	}
	b.SetBytes(int64(len(dst)))
}

// BenchmarkResponsesTextDelta is one response.output_text.delta frame,
// with the text kept for the terminal event.
func BenchmarkResponsesTextDelta(b *testing.B) {
	h := &ResponseHead{ID: []byte("resp_0123456789abcdef0123456789abcdef"), Model: "mira"}
	text := []byte(`" quoted\n word"`)
	dst := make([]byte, 0, 512)
	var o ResponseOutput
	o.AddMessage()
	b.ReportAllocs()
	for b.Loop() {
		if len(o.Buf) > 1<<20 {
			o.Reset()
			o.AddMessage()
		}
		dst = AppendResponseTextDelta(dst[:0], 7, h, 0, false, text)
		o.AppendText(text)
	}
	b.SetBytes(int64(len(dst)))
}

// BenchmarkToolFragments walks one upstream tool_calls delta.
func BenchmarkToolFragments(b *testing.B) {
	raw := []byte(`[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"c"}}]`)
	var it ToolFragments
	var f ToolFragment
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		it.Reset(raw)
		for it.Next(&f) {
		}
	}
}

//go:build !race

package codec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSSEScannerZeroAllocs checks that a scanner whose buffers have grown
// scans a whole stream, in socket-sized reads, without allocating.
func TestSSEScannerZeroAllocs(t *testing.T) {
	multi := []byte("event: delta\r\nid: 41\r\ndata: {\"a\":\r\ndata: 1}\r\n: ping\r\n\r\n")
	streams := []struct {
		name  string
		reads [][]byte
	}{
		{"openai 1400-byte reads", splitEvery(openAIStream(256), 1400)},
		{"openai 7-byte reads", splitEvery(openAIStream(32), 7)},
		{"multi-line CRLF events", splitEvery(append(append(multi, multi...), multi...), 5)},
	}
	for _, st := range streams {
		t.Run(st.name, func(t *testing.T) {
			s := NewSSEScanner(0)
			n := 0
			scan := func() {
				s.Reset()
				for _, p := range st.reads {
					s.Feed(p)
					for {
						_, ok, err := s.Next()
						if err != nil || !ok {
							break
						}
						n++
					}
				}
				s.Finish()
			}
			scan() // grow the buffers
			require.Positive(t, n)
			require.Zero(t, testing.AllocsPerRun(20, scan))
		})
	}
}

func TestChunkZeroAllocs(t *testing.T) {
	var c Chunk
	var cc Completion
	chunks := [][]byte{
		[]byte(openAIContentChunk), []byte(openAIToolCallStart), []byte(openAIUsageChunk),
		[]byte(openAIErrorFrame), []byte(deepSeekFinalChunk), []byte(llamaCppFinalChunk),
	}
	bad := []byte(openAIContentChunk + "x")
	body := []byte(openAICompletionBody)
	raw := []byte(`"a \"quoted\" \u00e9 string with enough bytes for the word loop"`)
	tests := []struct {
		name string
		fn   func()
	}{
		{"ParseChunk", func() {
			for _, in := range chunks {
				_ = ParseChunk(in, &c)
			}
		}},
		{"ParseChunk malformed", func() { _ = ParseChunk(bad, &c) }},
		{"ParseCompletion", func() { _ = ParseCompletion(body, &cc) }},
		{"ValidJSONString", func() { _ = ValidJSONString(raw) }},
		{"skipValue", func() { _, _ = skipValue(body, 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Zero(t, testing.AllocsPerRun(100, tt.fn))
		})
	}
}

func TestFrameWritersAllocateNothing(t *testing.T) {
	h, bill := testHead(), testBill()
	r := &Routing{Tier: "mira", Mode: "explicit", Effort: "none"}
	gw := AppendGW(nil, []byte("req-1"), r)
	content, tools := []byte(`" token"`), []byte(`[{"index":0,"function":{"arguments":"x"}}]`)
	a := &Answer{Content: content, Finish: "stop"}
	dst := make([]byte, 0, 8<<10)
	allocs := testing.AllocsPerRun(500, func() {
		dst = AppendChunkRole(dst[:0], h, gw)
		dst = AppendChunkContent(dst[:0], h, content)
		dst = AppendChunkToolCalls(dst[:0], h, tools)
		dst = AppendChunkFinish(dst[:0], h, "stop")
		dst = AppendChunkUsage(dst[:0], h, bill, gw)
		dst = AppendDone(dst[:0])
		dst = AppendChunkError(dst[:0], ErrUpstreamTimeout)
		dst = AppendV2Start(dst[:0], h, []byte("req-1"), r)
		dst = AppendV2Reasoning(dst[:0], content)
		dst = AppendV2Content(dst[:0], content)
		dst = AppendV2ToolCalls(dst[:0], tools)
		dst = AppendV2Finish(dst[:0], "stop", bill)
		dst = AppendV2Error(dst[:0], ErrUpstreamTimeout, []byte("req-1"))
		dst = AppendV1Completion(dst[:0], h, a, bill, gw)
		dst = AppendV2Completion(dst[:0], h, a, bill, []byte("req-1"), r)
		dst = AppendOpenAICompletion(dst[:0], h, a, bill)
		dst = AppendGW(dst[:0], []byte("req-1"), r)
	})
	require.Zero(t, allocs)
}

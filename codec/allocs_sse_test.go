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

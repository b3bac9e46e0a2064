package codec

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sseEv is an SSEEvent copied out of the scanner's buffers.
type sseEv struct {
	Event, Data, ID string
}

func ev(event, data, id string) sseEv { return sseEv{event, data, id} }

// scanPieces feeds the pieces in turn, draining Next after each, then
// drains Finish. It stops at the first error.
func scanPieces(s *SSEScanner, pieces ...[]byte) ([]sseEv, error) {
	var out []sseEv
	drain := func(next func() (SSEEvent, bool, error)) error {
		for {
			e, ok, err := next()
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			out = append(out, sseEv{string(e.Event), string(e.Data), string(e.ID)})
		}
	}
	for _, p := range pieces {
		s.Feed(p)
		if err := drain(s.Next); err != nil {
			return out, err
		}
	}
	return out, drain(s.Finish)
}

// scanWhole scans in as one piece.
func scanWhole(maxEvent int, in []byte) ([]sseEv, error) {
	return scanPieces(NewSSEScanner(maxEvent), in)
}

// scanBytewise scans in one byte at a time.
func scanBytewise(maxEvent int, in []byte) ([]sseEv, error) {
	pieces := make([][]byte, len(in))
	for i := range in {
		pieces[i] = in[i : i+1]
	}
	return scanPieces(NewSSEScanner(maxEvent), pieces...)
}

// checkChunking asserts the chunking invariant for in: whole, one byte at a
// time, and split at every position into two pieces (and, for short inputs,
// every pair of positions into three) all give the same events and error.
// It returns the events of the whole scan.
func checkChunking(t *testing.T, maxEvent int, in []byte) []sseEv {
	t.Helper()
	want, wantErr := scanWhole(maxEvent, in)
	got, err := scanBytewise(maxEvent, in)
	require.Equal(t, wantErr, err, "one byte at a time")
	require.Equal(t, want, got, "one byte at a time")
	s := NewSSEScanner(maxEvent) // reused through Reset
	for i := 0; i <= len(in); i++ {
		s.Reset()
		got, err := scanPieces(s, in[:i], in[i:])
		require.Equal(t, wantErr, err, "split at %d", i)
		require.Equal(t, want, got, "split at %d", i)
	}
	if len(in) <= 200 {
		for i := 0; i <= len(in); i++ {
			for j := i; j <= len(in); j++ {
				s.Reset()
				got, err := scanPieces(s, in[:i], in[i:j], in[j:])
				require.Equal(t, wantErr, err, "split at %d and %d", i, j)
				require.Equal(t, want, got, "split at %d and %d", i, j)
			}
		}
	}
	return want
}

func TestSSEScannerRules(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []sseEv
	}{
		{"empty stream", "", nil},
		{"one event", "data: hello\n\n", []sseEv{ev("", "hello", "")}},
		{"no space after colon", "data:hello\n\n", []sseEv{ev("", "hello", "")}},
		{"only one space removed", "data:  two\n\n", []sseEv{ev("", " two", "")}},
		{"tab kept", "data:\tx\n\n", []sseEv{ev("", "\tx", "")}},
		{"colon in value", "data: a:b: c\n\n", []sseEv{ev("", "a:b: c", "")}},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []sseEv{ev("", "a", ""), ev("", "b", "")}},
		{"CR", "data: a\r\rdata: b\r\r", []sseEv{ev("", "a", ""), ev("", "b", "")}},
		{"mixed endings", "data: a\r\ndata: b\rdata: c\n\r\n", []sseEv{ev("", "a\nb\nc", "")}},
		{"LF CR is two line ends", "data: a\n\rdata: b\n\n", []sseEv{ev("", "a", ""), ev("", "b", "")}},
		{"CR CR LF", "data: a\r\r\ndata: b\n\n", []sseEv{ev("", "a", ""), ev("", "b", "")}},
		{"multi-line data", "data: a\ndata: b\ndata: c\n\n", []sseEv{ev("", "a\nb\nc", "")}},
		{"empty data lines", "data\ndata\n\n", []sseEv{ev("", "\n", "")}},
		{"lone data line has empty data", "data\n\n", []sseEv{ev("", "", "")}},
		{"data colon only", "data:\n\n", []sseEv{ev("", "", "")}},
		{"data with trailing empty line", "data: a\ndata:\n\n", []sseEv{ev("", "a\n", "")}},
		{"no data no dispatch", "event: x\n\n", nil},
		{"event type reset after blank", "event: x\n\ndata: y\n\n", []sseEv{ev("", "y", "")}},
		{"event type", "event: delta\ndata: {}\n\n", []sseEv{ev("delta", "{}", "")}},
		{"last event type wins", "event: a\nevent: b\ndata: x\n\n", []sseEv{ev("b", "x", "")}},
		{"event type not carried", "event: a\ndata: 1\n\ndata: 2\n\n", []sseEv{ev("a", "1", ""), ev("", "2", "")}},
		{"empty event type", "event:\ndata: x\n\n", []sseEv{ev("", "x", "")}},
		{"comment", ": keep-alive\n\ndata: x\n\n", []sseEv{ev("", "x", "")}},
		{"comment inside event", "data: a\n: note\ndata: b\n\n", []sseEv{ev("", "a\nb", "")}},
		{"bare colon comment", ":\ndata: x\n\n", []sseEv{ev("", "x", "")}},
		{"id", "id: 7\ndata: x\n\n", []sseEv{ev("", "x", "7")}},
		{"id persists", "id: 7\ndata: x\n\ndata: y\n\n", []sseEv{ev("", "x", "7"), ev("", "y", "7")}},
		{"empty id clears", "id: 7\ndata: x\n\nid\ndata: y\n\n", []sseEv{ev("", "x", "7"), ev("", "y", "")}},
		{"id with NUL ignored", "id: 7\ndata: x\n\nid: 8\x009\ndata: y\n\n", []sseEv{ev("", "x", "7"), ev("", "y", "7")}},
		{"id set without dispatch", "id: 5\n\ndata: x\n\n", []sseEv{ev("", "x", "5")}},
		{"retry ignored", "retry: 1000\ndata: x\n\n", []sseEv{ev("", "x", "")}},
		{"unknown field ignored", "foo: bar\ndata: x\n\n", []sseEv{ev("", "x", "")}},
		{"field names are case-sensitive", "Data: x\nDATA: y\n\n", nil},
		{"field name with space", "data : x\n\n", nil},
		{"leading space is not a comment", " : x\ndata: y\n\n", []sseEv{ev("", "y", "")}},
		{"BOM skipped", "\ufeffdata: x\n\n", []sseEv{ev("", "x", "")}},
		{"BOM only once", "\ufeff\ufeffdata: x\n\n", nil},
		{"BOM only at start", "data: a\n\n\ufeffdata: b\n\n", []sseEv{ev("", "a", "")}},
		{"partial BOM is bytes", "\xef\xbbdata: x\n\n", nil},
		{"incomplete event discarded", "data: a\n\ndata: b\n", []sseEv{ev("", "a", "")}},
		{"incomplete line discarded", "data: a\n\ndata: b", []sseEv{ev("", "a", "")}},
		{"trailing CR ends event", "data: a\r\r", []sseEv{ev("", "a", "")}},
		{"blank lines between", "\n\n\r\n\rdata: x\n\n\n\n", []sseEv{ev("", "x", "")}},
		{"invalid UTF-8 kept", "data: \xff\xfe\n\n", []sseEv{ev("", "\xff\xfe", "")}},
		{"NUL in data kept", "data: a\x00b\n\n", []sseEv{ev("", "a\x00b", "")}},
		{"done sentinel", "data: {\"x\":1}\n\ndata: [DONE]\n\n", []sseEv{ev("", `{"x":1}`, ""), ev("", "[DONE]", "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkChunking(t, 0, []byte(tt.in))
			require.Equal(t, tt.want, got)
		})
	}
}

// TestSSEScannerCRLFAcrossFeeds splits CRLF pairs between Feed calls: the LF
// must not be read as an empty line.
func TestSSEScannerCRLFAcrossFeeds(t *testing.T) {
	s := NewSSEScanner(0)
	got, err := scanPieces(s, []byte("data: a\r"), []byte("\ndata: b\r"), []byte("\n\r"), []byte("\n"))
	require.NoError(t, err)
	require.Equal(t, []sseEv{ev("", "a\nb", "")}, got)

	// The event is dispatched at the CR, before its LF arrives.
	s.Reset()
	s.Feed([]byte("data: c\r\n\r"))
	e, ok, err := s.Next()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "c", string(e.Data))
	s.Feed([]byte("\ndata: d\n\n"))
	e, ok, err = s.Next()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "d", string(e.Data))
	_, ok, err = s.Next()
	require.NoError(t, err)
	require.False(t, ok)
}

func TestSSEScannerNextNeedsMore(t *testing.T) {
	var s SSEScanner // the zero value is ready to use
	_, ok, err := s.Next()
	require.NoError(t, err)
	require.False(t, ok)
	s.Feed([]byte("data: {\"a\""))
	_, ok, err = s.Next()
	require.NoError(t, err)
	require.False(t, ok)
	s.Feed([]byte(":1}\n"))
	_, ok, err = s.Next()
	require.NoError(t, err)
	require.False(t, ok)
	s.Feed([]byte("\n"))
	e, ok, err := s.Next()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, `{"a":1}`, string(e.Data))
	require.Nil(t, e.Event)
	require.Nil(t, e.ID)
	_, ok, err = s.Finish()
	require.NoError(t, err)
	require.False(t, ok)
}

// TestSSEScannerEventValidUntilNext checks that an event returned by Next
// stays intact while later events are read from the same fed bytes.
func TestSSEScannerEventValidUntilNext(t *testing.T) {
	s := NewSSEScanner(0)
	s.Feed([]byte("event: a\ndata: 1\n\ndata: 2\ndata: 3\n\ndata: 4\n\n"))
	var got []SSEEvent
	for {
		e, ok, err := s.Next()
		require.NoError(t, err)
		if !ok {
			break
		}
		got = append(got, e)
	}
	require.Len(t, got, 3)
	require.Equal(t, "a", string(got[0].Event))
	require.Equal(t, "1", string(got[0].Data))
	require.Equal(t, "2\n3", string(got[1].Data))
	require.Equal(t, "4", string(got[2].Data))
}

func TestSSEScannerFinish(t *testing.T) {
	t.Run("returns remaining complete events", func(t *testing.T) {
		s := NewSSEScanner(0)
		s.Feed([]byte("data: 1\n\ndata: 2\n\ndata: 3"))
		var got []string
		for {
			e, ok, err := s.Finish()
			require.NoError(t, err)
			if !ok {
				break
			}
			got = append(got, string(e.Data))
		}
		require.Equal(t, []string{"1", "2"}, got)
		_, ok, err := s.Finish()
		require.NoError(t, err)
		require.False(t, ok)
		_, ok, err = s.Next()
		require.NoError(t, err)
		require.False(t, ok)
	})
	t.Run("discards an event without its blank line", func(t *testing.T) {
		for _, in := range []string{"data: x\n", "data: x\r\n", "data: x\r", "data: x", "event: e\ndata: x\nid: 1\n"} {
			got, err := scanWhole(0, []byte(in))
			require.NoError(t, err, "%q", in)
			require.Empty(t, got, "%q", in)
		}
	})
}

func TestSSEScannerEventTooLarge(t *testing.T) {
	const max = 16
	tests := []struct {
		name string
		in   string
		want []sseEv // before the error, if any
		err  bool
	}{
		// "data: " is 6 bytes; the event counts up to the end of its last
		// line's content.
		{"at the cap", "data: 0123456789\n\n", []sseEv{ev("", "0123456789", "")}, false},
		{"over the cap", "data: 01234567890\n\n", nil, true},
		{"over the cap across lines", "data: 012\ndata: 5\n\n", nil, true},
		{"at the cap across lines", "data: 01\ndata: 5\n\n", []sseEv{ev("", "01\n5", "")}, false},
		{"CRLF inside counts two", "data: 01\r\ndata: 5\n\n", nil, true},
		{"CRLF inside at the cap", "data: 0\r\ndata: 5\r\n\r\n", []sseEv{ev("", "0\n5", "")}, false},
		{"events before the large one", "data: a\n\ndata: 01234567890\n\ndata: b\n\n", []sseEv{ev("", "a", "")}, true},
		{"long comment outside an event", ": 0123456789abcdef\ndata: x\n\n", nil, true},
		{"comment at the cap", ": 0123456789abcd\ndata: x\n\n", []sseEv{ev("", "x", "")}, false},
		{"comment counts inside an event", "data: x\n: 0123456789\n\n", nil, true},
		{"unterminated line over the cap", "data: a\n\ndata: 01234567890", []sseEv{ev("", "a", "")}, true},
		{"blank lines are not counted", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\ndata: x\n\n", []sseEv{ev("", "x", "")}, false},
		{"many small events", strings.Repeat("data: 0123456789\n\n", 20), repeatEv(ev("", "0123456789", ""), 20), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkChunking(t, max, []byte(tt.in))
			require.Equal(t, tt.want, got)
			_, err := scanWhole(max, []byte(tt.in))
			if tt.err {
				require.ErrorIs(t, err, ErrEventTooLarge)
			} else {
				require.NoError(t, err)
			}
		})
	}

	t.Run("stays failed until Reset", func(t *testing.T) {
		s := NewSSEScanner(max)
		s.Feed([]byte("data: 0123456789abcdef"))
		_, ok, err := s.Next()
		require.ErrorIs(t, err, ErrEventTooLarge)
		require.False(t, ok)
		s.Feed([]byte("\n\ndata: x\n\n"))
		_, _, err = s.Next()
		require.ErrorIs(t, err, ErrEventTooLarge)
		_, _, err = s.Finish()
		require.ErrorIs(t, err, ErrEventTooLarge)
		s.Reset()
		got, err := scanPieces(s, []byte("data: x\n\n"))
		require.NoError(t, err)
		require.Equal(t, []sseEv{ev("", "x", "")}, got)
	})
	t.Run("default cap", func(t *testing.T) {
		big := "data: " + strings.Repeat("x", DefaultMaxSSEEvent-6) + "\n\n"
		got, err := scanWhole(0, []byte(big))
		require.NoError(t, err)
		require.Len(t, got, 1)
		_, err = scanWhole(-1, []byte("data: x"+big[6:]))
		require.ErrorIs(t, err, ErrEventTooLarge)
	})
}

func repeatEv(e sseEv, n int) []sseEv {
	out := make([]sseEv, n)
	for i := range out {
		out[i] = e
	}
	return out
}

func TestSSEScannerReset(t *testing.T) {
	s := NewSSEScanner(8 << 20)
	s.Feed([]byte("id: 3\nevent: e\ndata: partial"))
	_, ok, err := s.Next()
	require.NoError(t, err)
	require.False(t, ok)
	s.Reset()
	got, err := scanPieces(s, []byte("\ufeffdata: x\n\n"))
	require.NoError(t, err)
	require.Equal(t, []sseEv{ev("", "x", "")}, got, "no state survives Reset, and the BOM is skipped again")

	s.Reset()
	require.NotNil(t, s.buf, "small buffers are kept")
	c := cap(s.buf)
	s.Feed([]byte("data: y\n\n"))
	require.Equal(t, c, cap(s.buf))

	s.Reset()
	s.Feed(bytes.Repeat([]byte("d"), sseBufCeiling+1))
	s.data = make([]byte, 0, sseBufCeiling+1)
	s.Reset()
	require.Nil(t, s.buf, "buffers past the ceiling are dropped")
	require.Nil(t, s.data)
	require.Equal(t, 8<<20, s.maxEvent)
}

// TestSSEScannerGolden scans a realistic upstream stream with keep-alives,
// an error event and the [DONE] sentinel.
func TestSSEScannerGolden(t *testing.T) {
	in := "\ufeff: connected\r\n\r\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\n\r\n" +
		": ping\r\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\\n\"}}]}\r\n\r\n" +
		"event: error\r\n" +
		"id: evt-1\r\n" +
		"data: {\"error\":{\"message\":\"overloaded\",\r\n" +
		"data:  \"type\":\"server_error\"}}\r\n\r\n" +
		"retry: 3000\r\n\r\n" +
		"data: [DONE]\r\n\r\n"
	want := []sseEv{
		ev("", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, ""),
		ev("", `{"choices":[{"index":0,"delta":{"content":"Hi\n"}}]}`, ""),
		ev("error", "{\"error\":{\"message\":\"overloaded\",\n \"type\":\"server_error\"}}", "evt-1"),
		ev("", "[DONE]", "evt-1"),
	}
	require.Equal(t, want, checkChunking(t, 0, []byte(in)))
	// The same stream with LF and with CR line ends.
	require.Equal(t, want, checkChunking(t, 0, []byte(strings.ReplaceAll(in, "\r\n", "\n"))))
	require.Equal(t, want, checkChunking(t, 0, []byte(strings.ReplaceAll(in, "\r\n", "\r"))))
}

func TestSSEScannerOpenAIStream(t *testing.T) {
	in := openAIStream(256)
	got, err := scanWhole(0, in)
	require.NoError(t, err)
	require.Len(t, got, 256)
	require.Equal(t, "[DONE]", got[255].Data)
	for i := range 255 {
		var c Chunk
		require.NoError(t, ParseChunk([]byte(got[i].Data), &c), "event %d", i)
	}
	got2, err := scanPieces(NewSSEScanner(0), splitEvery(in, 1400)...)
	require.NoError(t, err)
	require.Equal(t, got, got2)
	got3, err := scanBytewise(0, in)
	require.NoError(t, err)
	require.Equal(t, got, got3)
}

// openAIStream returns a realistic /v1/chat/completions upstream body of n
// events: a role chunk, content chunks, a finish chunk, a usage-only chunk
// and [DONE].
func openAIStream(n int) []byte {
	words := []string{"The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".",
		" Here", "'s", " some", " `code`", ":\n\n", "```go\n", "fmt.Println(\"hi\")", "\n```", " über", " 🎉"}
	const head = `{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":[{"index":0,"delta":`
	var b []byte
	b = append(b, "data: "+head+`{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n"...)
	for i := 1; i < n-3; i++ {
		b = append(b, "data: "+head+`{"content":`...)
		b = AppendJSONString(b, words[i%len(words)])
		b = append(b, `},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n"...)
	}
	b = append(b, "data: "+head+`{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`+"\n\n"...)
	b = append(b, `data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":`+strconv.Itoa(n-4)+`,"total_tokens":`+strconv.Itoa(n+15)+`,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`+"\n\n"...)
	return append(b, "data: [DONE]\n\n"...)
}

// splitEvery cuts b into pieces of n bytes, the last one shorter.
func splitEvery(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

func FuzzSSEScanner(f *testing.F) {
	for _, s := range []string{
		"data: a\r\n\r\ndata: b\r\n\r\n",                         // CRLF
		"data: a\r\ndata: b\rdata: c\n\r\n\n\r\r\n",              // mixed endings
		"data: a\rdata: b\r\r",                                   // lone CR
		"data: x\r",                                              // CR at the end
		": comment\n:\n\ndata: x\n: inside\n\n",                  // comments
		"data: a\ndata:\ndata: c\n\n",                            // multi-line data
		"data: a\n\ndata: incomplete\n",                          // incomplete trailing event
		"data: " + strings.Repeat("x", 600) + "\n\n",             // very large event
		"data:x\n\ndata:\n\n",                                    // data: without space
		"\ufeffdata: bom\n\n",                                    // BOM
		"\xef\xbb",                                               // partial BOM
		"event: e\nid: 1\nretry: 5\nfoo\ndata\n\nid: \x00\n\n",   // every field
		"data: {\"choices\":[]}\n\ndata: [DONE]\n\n",             // OpenAI tail
		": " + strings.Repeat("c", 300) + "\n\ndata: ok\n\n",     // long comment
		"\n\r\n\r\r\n\n" + "data: " + strings.Repeat("y", 40),    // blank lines and a tail
		"id: a\r\ndata: x\r\n\r\nid\r\ndata: y\r\n\r\n",          // id reset
		"data: 1\n\n\ndata: 2\r\n\r\n\rdata: 3\r\r\ndata: 4\n\n", // CR CR LF
	} {
		f.Add([]byte(s), uint16(len(s)/2), uint16(64))
		f.Add([]byte(s), uint16(1), uint16(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, split, max uint16) {
		maxEvent := int(max) // 0 selects the default
		want, wantErr := scanWhole(maxEvent, in)
		limit := maxEvent
		if limit == 0 {
			limit = DefaultMaxSSEEvent
		}
		for _, e := range want {
			require.LessOrEqual(t, len(e.Data), limit)
			require.LessOrEqual(t, len(e.Event), limit)
			require.LessOrEqual(t, len(e.ID), limit)
		}
		got, err := scanBytewise(maxEvent, in)
		require.Equal(t, wantErr, err, "one byte at a time")
		require.Equal(t, want, got, "one byte at a time")
		i := int(split) % (len(in) + 1)
		got, err = scanPieces(NewSSEScanner(maxEvent), in[:i], in[i:])
		require.Equal(t, wantErr, err, "split at %d", i)
		require.Equal(t, want, got, "split at %d", i)
	})
}

func BenchmarkSSEScanner(b *testing.B) {
	in := openAIStream(256)
	reads := splitEvery(in, 1400)
	s := NewSSEScanner(0)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	events := 0
	for b.Loop() {
		s.Reset()
		for _, p := range reads {
			s.Feed(p)
			for {
				_, ok, err := s.Next()
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					break
				}
				events++
			}
		}
		if _, ok, _ := s.Finish(); ok {
			b.Fatal("unexpected event at Finish")
		}
	}
	if events%256 != 0 {
		b.Fatal(fmt.Sprint("events: ", events))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

// BenchmarkSSEScannerLargeEvent scans one event of almost 1 MiB arriving in
// 1400-byte reads: the cost must stay linear in its size.
func BenchmarkSSEScannerLargeEvent(b *testing.B) {
	in := []byte("data: " + strings.Repeat("x", DefaultMaxSSEEvent-6) + "\n\n")
	reads := splitEvery(in, 1400)
	s := NewSSEScanner(0)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		s.Reset()
		n := 0
		for _, p := range reads {
			s.Feed(p)
			if _, ok, err := s.Next(); err != nil {
				b.Fatal(err)
			} else if ok {
				n++
			}
		}
		if n != 1 {
			b.Fatal("want one event")
		}
	}
}

// Reading straight into the scanner's buffer gives the events Feed gives,
// however the reads are sized.
func TestSSEScannerSpaceCommit(t *testing.T) {
	stream := []byte("data: {\"a\":1}\r\n\r\n: comment\n\nevent: x\ndata: one\ndata: two\n\ndata: tail\r\n\r\n")
	var want []string
	sc := NewSSEScanner(0)
	sc.Feed(stream)
	for {
		ev, ok, err := sc.Next()
		require.NoError(t, err)
		if !ok {
			break
		}
		want = append(want, string(ev.Event)+"|"+string(ev.Data))
	}
	for _, step := range []int{1, 2, 3, 7, 64} {
		sc := NewSSEScanner(0)
		var got []string
		for rest := stream; len(rest) > 0; {
			space := sc.Space(step)
			n := copy(space[:min(step, len(space))], rest)
			sc.Commit(n)
			rest = rest[n:]
			for {
				ev, ok, err := sc.Next()
				require.NoError(t, err)
				if !ok {
					break
				}
				got = append(got, string(ev.Event)+"|"+string(ev.Data))
			}
		}
		require.Equal(t, want, got, "reads of %d bytes", step)
	}
}

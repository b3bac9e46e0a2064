package frameorder

import (
	"strconv"
	"strings"
	"testing"

	"github.com/edgegw/gateway/codec"
)

// longStream returns a complete 256-frame stream on w: the primer or
// start, content deltas, and the wire's closing frames.
func longStream(w Wire) []byte {
	var b strings.Builder
	frame := func(data string) { b.WriteString("data: " + data + "\n\n") }
	closing := 3 // finish, usage, [DONE]
	switch w {
	case V1:
		frame(primer1)
	case V2:
		b.WriteString(ev("start", v2StartData))
		closing = 1 // finish
	default:
		frame(primer)
		if w == OpenAI {
			closing = 2 // finish, [DONE]
		}
	}
	for i := 1; i < 256-closing; i++ {
		word := `"w` + strconv.Itoa(i) + ` "`
		if w == V2 {
			b.WriteString(ev("delta", `{"content":`+word+`}`))
		} else {
			frame(strings.Replace(hello, `"Hello"`, word, 1))
		}
	}
	switch w {
	case V2:
		b.WriteString(ev("finish", v2Finish))
	case OpenAI:
		frame(finish)
		frame(done)
	default:
		frame(finish)
		frame(usage)
		frame(done)
	}
	return []byte(b.String())
}

func TestLongStream(t *testing.T) {
	for _, w := range []Wire{V1, V2, OpenAI, OpenAIUsage} {
		out := CheckStream(w, longStream(w))
		if !out.OK() || out.Frames != 256 {
			t.Fatalf("%s: %+v", w, out)
		}
	}
}

// BenchmarkChecker checks a 256-frame stream per iteration, scanner
// included, the way the load generator does on every stream.
func BenchmarkChecker(b *testing.B) {
	for _, w := range []Wire{V1, V2, OpenAI, OpenAIUsage} {
		b.Run(w.String(), func(b *testing.B) {
			body := longStream(w)
			var c Checker
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if out := c.Check(w, body); !out.OK() {
					b.Fatal(out.Violation)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/frame")
		})
	}
}

// BenchmarkEvent is the per-frame cost alone: one content chunk checked.
func BenchmarkEvent(b *testing.B) {
	var c Checker
	c.Reset(OpenAI)
	c.Event(codec.SSEEvent{Data: []byte(primer)})
	ev := codec.SSEEvent{Data: []byte(hello)}
	b.ReportAllocs()
	b.SetBytes(int64(len(hello)))
	for b.Loop() {
		c.Event(ev)
	}
	if c.out.Violation != "" {
		b.Fatal(c.out.Violation)
	}
}

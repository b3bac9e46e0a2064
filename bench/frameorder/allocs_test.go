//go:build !race

package frameorder

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
)

// TestAllocs: once a Checker has seen a stream, checking another costs no
// allocation, whether fed whole or in pieces through a scanner, and whether
// the stream completes or fails with a registered code.
func TestAllocs(t *testing.T) {
	type stream struct {
		name string
		wire Wire
		body []byte
	}
	streams := []stream{}
	for _, w := range []Wire{V1, V2, OpenAI, OpenAIUsage} {
		streams = append(streams, stream{"long " + w.String(), w, longStream(w)})
	}
	for _, tr := range readGolden(t) {
		if tr.status == "OK" {
			streams = append(streams, stream{tr.name, tr.wire, tr.body})
		}
	}
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			var c Checker
			want := c.Check(s.wire, s.body)
			require.Empty(t, want.Violation)
			allocs := testing.AllocsPerRun(50, func() {
				if c.Check(s.wire, s.body) != want {
					t.Fatal("outcome changed")
				}
			})
			require.Zero(t, allocs, "Check")

			sc := codec.NewSSEScanner(0)
			allocs = testing.AllocsPerRun(50, func() {
				sc.Reset()
				c.Reset(s.wire)
				for i := 0; i < len(s.body); i += 61 {
					sc.Feed(s.body[i:min(i+61, len(s.body))])
					for {
						ev, ok, err := sc.Next()
						if err != nil || !ok {
							break
						}
						c.Event(ev)
					}
				}
				for {
					ev, ok, err := sc.Finish()
					if err != nil || !ok {
						break
					}
					c.Event(ev)
				}
				if c.End() != want {
					t.Fatal("outcome changed")
				}
			})
			require.Zero(t, allocs, "Feed, Next, Event, End")
		})
	}
}

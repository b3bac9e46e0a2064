package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A stream reports the longest pause between two writes of tokens to its
// client, once, when it ends: what a client sees as a stall.
func TestStreamReportsItsLongestGap(t *testing.T) {
	f := newChatFixture(t)
	r := f.post(t, "/v1/chat/completions", streamBody("hi [[sim:tokens=4]] [[sim:itl_ms=60]]"))
	require.Equal(t, 200, r.status, "%s", r.body)
	var sum string
	require.Eventually(t, func() bool {
		var b strings.Builder
		f.set.WritePrometheus(&b)
		for _, line := range strings.Split(b.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "gateway_chat_stream_max_gap_seconds_sum "); ok {
				sum = v
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond)
	gap, err := strconv.ParseFloat(sum, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, gap, 0.05)
	require.Less(t, gap, 1.0)
}

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The access log line of a request carries its trace id: the client's
// when it sent a traceparent, so the gateway's line is found from the
// client's trace.
func TestAccessLogCarriesTheTraceID(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "trace@example.com")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := ta.call(t, "POST", "/v1/chat/completions", tn.key,
		map[string]any{"model": "mira", "messages": []map[string]string{{"role": "user", "content": "hi"}}},
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-01", "X-Request-Id", "trace-req-1")
	require.Equal(t, 200, r.status, "%s", r.raw)
	require.Eventually(t, func() bool { return strings.Contains(ta.logs.String(), `"request_id":"trace-req-1"`) }, 5*time.Second, 10*time.Millisecond)
	for _, line := range strings.Split(ta.logs.String(), "\n") {
		if !strings.Contains(line, `"request_id":"trace-req-1"`) || !strings.Contains(line, `"msg":"request"`) {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		require.Equal(t, traceID, m["trace_id"])
		return
	}
	t.Fatal("no access log line for the request")
}

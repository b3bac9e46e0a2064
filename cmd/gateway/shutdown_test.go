package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A client that connected and never wrote does not hold the shutdown: it
// has nothing to answer, and the server would wait for it until the read
// timeout and then report requests in flight that do not exist.
func TestShutdownDoesNotWaitForConnectionsThatSentNothing(t *testing.T) {
	ta := startTestApp(t, func(c *serveConfig) { c.ReadTimeout, c.ShutdownTimeout = 30*time.Second, 2*time.Second })
	var silent []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ta.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		silent = append(silent, c)
	}
	time.Sleep(50 * time.Millisecond) // accepted
	ta.shutdown()
	require.NotContains(t, ta.logs.String(), "requests still in flight at shutdown")
	for _, c := range silent {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
		n, err := c.Read(make([]byte, 1))
		require.Zero(t, n)
		require.Error(t, err)
		require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "closed without a word")
	}
}

// Requests and streams still running when --shutdown-timeout passes are
// cut: each answers server_shutting_down (a stream with its wire's failure
// ending, its HTTP body well-formed) and each leaves its ledger row. The
// embedded simulator ends them anyway when it shuts down; this runs one of
// its own, as a real upstream would be.
func TestShutdownCutsWhatOutlivesItsTimeout(t *testing.T) {
	cfgPath := simnetConfig(t, `
tiers:
  kavi:  {provider: simnet, upstream_model: sim-large, reasons: true}
  vaani: {provider: simnet, upstream_model: sim-medium, reasons: true}
  mira:  {provider: simnet, upstream_model: sim-small, reasons: false}
`)
	ta := startTestApp(t, func(c *serveConfig) { c.ConfigPath, c.ShutdownTimeout = cfgPath, time.Second })
	tn := newTenant(t, ta.dbURL, "cut@example.com")

	type answer struct {
		status int
		close  bool
		body   string
		err    error
	}
	send := func(path string, stream bool, content string) <-chan answer {
		out := make(chan answer, 1)
		b, err := json.Marshal(map[string]any{"model": "mira", "stream": stream,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		require.NoError(t, err)
		c, err := net.Dial("tcp", ta.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "+tn.key+
			"\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+string(b))
		require.NoError(t, err)
		go func() {
			r, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				out <- answer{err: err}
				return
			}
			body, err := io.ReadAll(r.Body) // a body cut without its last chunk fails here
			out <- answer{status: r.StatusCode, close: r.Close, body: string(body), err: err}
		}()
		return out
	}
	long := "[[sim:tokens=400]] [[sim:itl_ms=50]]"
	openai := send("/v1/chat/completions", true, "openai "+long)
	v2 := send("/api/v2/chat", true, "v2 "+long)
	plain := send("/api/v1/chat", false, "plain [[sim:fault=hang]]")
	require.Eventually(t, func() bool {
		page := ta.metricsPage(t)
		return strings.Contains(page, "\ngateway_chat_open_streams 2\n") && strings.Contains(page, "\ngateway_chat_in_flight 3\n")
	}, 5*time.Second, 10*time.Millisecond, "all three under way")

	ta.shutdown()
	tail := func(s string) string { return s[max(len(s)-300, 0):] }
	a := <-openai
	require.NoError(t, a.err)
	require.Equal(t, 200, a.status)
	require.True(t, strings.Contains(a.body, `"code":"server_shutting_down"`) && !strings.Contains(a.body, "[DONE]"),
		"the OpenAI stream ends with an error frame: %s", tail(a.body))
	a = <-v2
	require.NoError(t, a.err)
	require.True(t, strings.Contains(a.body, "event: error") && strings.Contains(a.body, `"code":"server_shutting_down"`),
		"the v2 stream ends with an error event: %s", tail(a.body))
	a = <-plain
	require.NoError(t, a.err)
	require.Equal(t, 503, a.status)
	require.Contains(t, a.body, `"code":"server_shutting_down"`)
	require.True(t, a.close, "the answer closes its connection: shutdown does not wait for it")
	require.NotContains(t, ta.logs.String(), "requests still running after the upstream calls were cut")

	conn, err := pgx.Connect(context.Background(), ta.dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var rows int
	require.NoError(t, conn.QueryRow(context.Background(), `select count(*) from request_log
		where key_id = $1 and error_code = 'server_shutting_down'`, tn.keyID).Scan(&rows))
	require.Equal(t, 3, rows, "each cut request has its row")
}

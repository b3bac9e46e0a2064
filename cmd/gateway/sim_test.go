package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSimRefusesInvalidFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--sim-addr", "no-port"},
		{"--sim-ttft", "-1s"},
		{"--sim-itl", "soon"},
		{"--sim-seed", "-3"},
		{"--nope"},
		{"extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var errOut strings.Builder
			code := serveSim(context.Background(), args, io.Discard, &errOut)
			require.Equal(t, 2, code, errOut.String())
			require.Contains(t, errOut.String(), "gateway sim")
		})
	}
	t.Run("through runSim", func(t *testing.T) {
		var errOut strings.Builder
		require.Equal(t, 2, runSim([]string{"--sim-addr", "no-port"}, io.Discard, &errOut))
		require.Contains(t, errOut.String(), "addr")
	})
	t.Run("help", func(t *testing.T) {
		var errOut strings.Builder
		require.Equal(t, 0, serveSim(context.Background(), []string{"--help"}, io.Discard, &errOut))
		for _, env := range []string{"GATEWAY_SIM_ADDR", "GATEWAY_SIM_TTFT", "GATEWAY_SIM_ITL", "GATEWAY_SIM_SEED"} {
			require.Contains(t, errOut.String(), env)
		}
	})
}

func TestSimServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- serveSim(ctx, []string{"--sim-addr", "127.0.0.1:0", "--sim-seed", "5"}, io.Discard, pw)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	require.True(t, lines.Scan())
	var ready struct{ Msg, Addr string }
	require.NoError(t, json.Unmarshal(lines.Bytes(), &ready), lines.Text())
	require.Equal(t, "simulator listening", ready.Msg)
	require.NotEmpty(t, ready.Addr)
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	resp, err := http.Post("http://"+ready.Addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"Hi [[sim:tokens=3]]"}]}`))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"completion_tokens":3`)

	cancel()
	select {
	case c := <-code:
		require.Equal(t, 0, c)
	case <-time.After(15 * time.Second):
		t.Fatal("the simulator did not stop")
	}
}

// Streams whose clients left while the embedded simulator was still
// silent leave no dead connection in its pool: a connection closed in
// memory reads as a clean end of the body, and was pooled as one. The
// requests after them were answered 503 model_unavailable.
func TestLeftQuietStreamsLeaveNoDeadSimulatorConnection(t *testing.T) {
	ta := startTestApp(t)
	tn := newTenant(t, ta.dbURL, "leaver@example.com")
	stream := func(content string) string {
		b, err := json.Marshal(map[string]any{"model": "mira", "stream": true,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		require.NoError(t, err)
		return "POST /api/v1/chat HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tn.key +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n" + string(b)
	}
	var leavers sync.WaitGroup
	for i := range 8 {
		leavers.Go(func() {
			c, err := net.Dial("tcp", ta.Addr())
			if !assert.NoError(t, err) {
				return
			}
			defer c.Close()
			_, err = io.WriteString(c, stream("leave "+strconv.Itoa(i)+" [[sim:tokens=50]] [[sim:ttft_ms=1500]]"))
			assert.NoError(t, err)
			r, err := http.ReadResponse(bufio.NewReader(c), nil)
			if assert.NoError(t, err) {
				assert.Equal(t, http.StatusOK, r.StatusCode)
			}
		}) // and leaves before the first token
	}
	leavers.Wait()
	require.Eventually(t, func() bool { return strings.Contains(ta.metricsPage(t), "\ngateway_chat_open_streams 0\n") },
		5*time.Second, 10*time.Millisecond, "the departures were seen")
	for i := range 20 {
		r := ta.call(t, "POST", "/api/v1/chat", tn.key, map[string]any{"model": "mira", "stream": true,
			"messages": []map[string]string{{"role": "user", "content": "after " + strconv.Itoa(i) + " [[sim:tokens=3]]"}}})
		require.Equal(t, http.StatusOK, r.status, "request %d: %s", i, r.raw)
	}
}

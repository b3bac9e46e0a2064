package sim

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestErrorDirectives(t *testing.T) {
	h := newHarness(t, Config{})
	for _, tc := range []struct {
		name, text string
		status     int
		typ, code  string
		param      any
		retryAfter string
	}{
		{name: "status 502", text: "[[sim:status=502]]", status: 502, typ: "server_error", code: "server_error"},
		{name: "status 503", text: "[[sim:status=503]]", status: 503, typ: "server_error", code: "overloaded"},
		{name: "status 401", text: "[[sim:status=401]]", status: 401, typ: "authentication_error", code: "invalid_api_key"},
		{name: "status 400", text: "[[sim:status=400]]", status: 400, typ: "invalid_request_error", code: "invalid_request"},
		{name: "rate limited", text: "[[sim:fault=rate_limited]]", status: 429, typ: "requests", code: "rate_limit_exceeded", retryAfter: "1"},
		{name: "rate limited bare", text: "[[sim:fault=rate_limited_bare]]", status: 429, typ: "requests", code: "rate_limit_exceeded"},
		{name: "context length", text: "[[sim:fault=context_length]]", status: 400, typ: "invalid_request_error", code: "context_length_exceeded", param: "messages"},
		{name: "content filter", text: "[[sim:fault=content_filter]]", status: 400, typ: "invalid_request_error", code: "content_filter", param: "prompt"},
		{name: "status beats faults", text: "[[sim:fault=rate_limited]] [[sim:status=500]]", status: 500, typ: "server_error", code: "server_error"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				resp := h.post("/v1/chat/completions", chat(tc.text, "stream", stream))
				raw := readAll(t, resp)
				require.Equal(t, tc.status, resp.StatusCode, "%s", raw)
				require.Equal(t, tc.retryAfter, resp.Header.Get("Retry-After"))
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				v := decode(t, raw)
				require.Len(t, v, 1)
				e := v["error"].(map[string]any)
				require.Len(t, e, 4, "message, type, param, code: %v", e)
				require.NotEmpty(t, e["message"])
				require.Equal(t, tc.typ, e["type"])
				require.Equal(t, tc.code, e["code"])
				require.Equal(t, tc.param, e["param"])
				if tc.code == "context_length_exceeded" {
					require.True(t, strings.HasPrefix(e["message"].(string), "This model's maximum context length is "))
				}
			})
		}
	}
}

func TestFailFirst(t *testing.T) {
	h := newHarness(t, Config{})
	body := `{"model":"m","messages":[{"role":"user","content":"Hi [[sim:fail_first=2]]"}]}`
	for range 2 {
		v, _ := h.postJSON("/v1/chat/completions", body, http.StatusServiceUnavailable)
		require.Equal(t, "overloaded", dig(t, v, "error.code"))
	}
	first, _ := h.postJSON("/v1/chat/completions", body, http.StatusOK)
	again, _ := h.postJSON("/v1/chat/completions", body, http.StatusOK)
	require.Equal(t, first, again)
	// Another body has attempts of its own.
	other := strings.Replace(body, "Hi", "Hello", 1)
	h.postJSON("/v1/chat/completions", other, http.StatusServiceUnavailable)
}

func TestFaultReset(t *testing.T) {
	h := newHarness(t, Config{})
	for _, stream := range []bool{false, true} {
		resp, err := h.do(context.Background(), "/v1/chat/completions", chat("[[sim:fault=reset]]", "stream", stream))
		require.Error(t, err)
		require.Nil(t, resp)
	}
	// The server is still fine.
	h.postJSON("/v1/chat/completions", chat("Hi"), http.StatusOK)
}

func TestFaultResetTCP(t *testing.T) {
	s, ln, err := Listen("127.0.0.1:0", Config{})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}

	resp, err := client.Post(url, "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"[[sim:fault=reset]]"}]}`))
	require.Error(t, err)
	require.Nil(t, resp)

	resp, err = client.Post(url, "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"Hi"}]}`))
	require.NoError(t, err)
	readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestFaultHang(t *testing.T) {
	h := newHarness(t, Config{})
	for _, stream := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		start := time.Now()
		resp, err := h.do(ctx, "/v1/chat/completions", chat("[[sim:fault=hang]]", "stream", stream))
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Nil(t, resp)
		require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	}
}

func TestFaultHangEndsOnShutdown(t *testing.T) {
	s, ln, err := Listen("127.0.0.1:0", Config{})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"[[sim:fault=hang]]"}]}`))
		if err == nil {
			resp.Body.Close()
			err = errors.New("hang answered")
		}
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the request arrive; the assertion does not depend on it
	done := make(chan struct{})
	go func() { s.Shutdown(); close(done) }()
	select {
	case err := <-errc:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a hanging request outlived shutdown")
	}
	<-done
}

func TestFaultStall(t *testing.T) {
	h := newHarness(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	resp, err := h.do(ctx, "/v1/chat/completions", chat("[[sim:fault=stall_after=3]]", "stream", true))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := readSSE(t, resp.Body)
	require.ErrorIs(t, s.err, context.DeadlineExceeded)
	require.Len(t, s.frames, 4, "the role frame and three tokens")
	require.False(t, s.done)
	for _, f := range s.frames[1:] {
		require.Contains(t, delta(f), "content")
	}

	// Not streaming: the head, then nothing.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	resp, err = h.do(ctx2, "/v1/chat/completions", chat("[[sim:fault=stall_after=3]]"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestFaultDropAfter(t *testing.T) {
	h := newHarness(t, Config{})
	resp := h.post("/v1/chat/completions", chat("[[sim:drop_after=5]] [[sim:tokens=20]]", "stream", true))
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	s := readSSE(t, resp.Body)
	require.ErrorIs(t, s.err, io.ErrUnexpectedEOF, "an unterminated chunked body")
	require.False(t, s.done)
	require.Len(t, s.frames, 6, "the role frame and five tokens")

	// Past the end of the reply: every token, then the drop.
	resp2 := h.post("/v1/chat/completions", chat("[[sim:drop_after=50]] [[sim:tokens=4]]", "stream", true))
	defer resp2.Body.Close()
	s = readSSE(t, resp2.Body)
	require.Error(t, s.err)
	require.Len(t, s.frames, 5)

	resp3 := h.post("/v1/chat/completions", chat("[[sim:drop_after=0]]"))
	defer resp3.Body.Close()
	_, err := io.ReadAll(resp3.Body)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestFaultMalformed(t *testing.T) {
	h := newHarness(t, Config{})
	resp := h.post("/v1/chat/completions", chat("[[sim:fault=malformed_after=2]]", "stream", true))
	s := readSSE(t, resp.Body)
	resp.Body.Close()
	require.Len(t, s.frames, 3)
	require.Error(t, s.err)
	require.False(t, s.done)
	require.True(t, strings.HasPrefix(s.raw[len(s.raw)-1], "{"), "a data frame that starts like JSON")

	resp = h.post("/v1/chat/completions", chat("[[sim:fault=malformed_after=2]]"))
	raw := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Error(t, decodeErr(raw))
}

func TestFaultNoDone(t *testing.T) {
	h := newHarness(t, Config{})
	s, _ := h.stream(chat("[[sim:fault=no_done]] [[sim:tokens=3]]", "stream_options", map[string]any{"include_usage": true}))
	require.NoError(t, s.err)
	require.False(t, s.done)
	require.Len(t, s.frames, 6, "role, three tokens, finish, usage")
	require.Equal(t, "stop", finishOf(s.frames[4]))
	require.Equal(t, 3, num(t, s.frames[5], "usage.completion_tokens"))

	v, _ := h.postJSON("/v1/chat/completions", chat("[[sim:fault=no_done]] [[sim:tokens=3]]"), http.StatusOK)
	require.Equal(t, "stop", dig(t, v, "choices.0.finish_reason"))
}

func TestClientLeavesStream(t *testing.T) {
	h := newHarness(t, Config{})
	resp := h.post("/v1/chat/completions", chat("[[sim:tokens=100000]] [[sim:itl_ms=5]]", "stream", true))
	br := bufio.NewReader(resp.Body)
	_, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Positive(t, h.srv.srv.GetOpenConnectionsCount())
	require.NoError(t, resp.Body.Close())
	// The stream, which had minutes to run, stops at its next token.
	require.Eventually(t, func() bool { return h.srv.srv.GetOpenConnectionsCount() == 0 }, 10*time.Second, 10*time.Millisecond)
}

func TestBadRequests(t *testing.T) {
	h := newHarness(t, Config{})
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"not json", "/v1/chat/completions", `{"model":`, 400, ""},
		{"no model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400, "missing_required_parameter"},
		{"no messages", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "empty_array"},
		{"bad max_tokens", "/v1/chat/completions", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, 400, "integer_below_min_value"},
		{"bad content", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":5}]}`, 400, "invalid_type"},
		{"unknown directive", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"[[sim:nope=1]]"}]}`, 400, "invalid_request"},
		{"bad directive value", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"[[sim:tokens=many]]"}]}`, 400, "invalid_request"},
		{"bad status", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"[[sim:status=200]]"}]}`, 400, "invalid_request"},
		{"bad fault", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"[[sim:fault=explode]]"}]}`, 400, "invalid_request"},
		{"unknown path", "/v1/nothing", `{}`, 404, "not_found"},
		{"embeddings without input", "/v1/embeddings", `{"model":"e"}`, 400, "invalid_request"},
		{"rerank without documents", "/rerank", `{"model":"r","query":"q","documents":[]}`, 400, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := h.postJSON(tc.path, tc.body, tc.status)
			if tc.code == "" {
				require.Nil(t, dig(t, v, "error.code"))
			} else {
				require.Equal(t, tc.code, dig(t, v, "error.code"))
			}
			require.NotEmpty(t, dig(t, v, "error.message"))
		})
	}
	t.Run("wrong method", func(t *testing.T) {
		resp, err := h.client.Get(base + "/v1/chat/completions")
		require.NoError(t, err)
		readAll(t, resp)
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
		require.Equal(t, "POST", resp.Header.Get("Allow"))
	})
	t.Run("models and health", func(t *testing.T) {
		for _, path := range []string{"/v1/models", "/health"} {
			resp, err := h.client.Get(base + path)
			require.NoError(t, err)
			decode(t, readAll(t, resp))
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
	})
	t.Run("incomplete marker is text", func(t *testing.T) {
		h.postJSON("/v1/chat/completions", chat("[[sim:tokens=3"), http.StatusOK)
	})
}

func TestDirectivesOnlyInLastUserMessage(t *testing.T) {
	h := newHarness(t, Config{})
	body := map[string]any{"model": "m", "messages": []any{
		map[string]any{"role": "system", "content": "[[sim:status=500]]"},
		map[string]any{"role": "user", "content": "[[sim:status=500]]"},
		map[string]any{"role": "assistant", "content": "ok"},
		map[string]any{"role": "user", "content": "[[sim:tokens=2]]"},
	}}
	v, _ := h.postJSON("/v1/chat/completions", body, http.StatusOK)
	require.Equal(t, 2, num(t, v, "usage.completion_tokens"))
	require.Equal(t, promptTokens(t, body), num(t, v, "usage.prompt_tokens"))
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, (&Config{}).Validate())
	require.Error(t, (&Config{TTFT: -1}).Validate())
	require.Error(t, (&Config{ITL: -1}).Validate())
	_, _, err := Listen("not an address", Config{})
	require.Error(t, err)
}

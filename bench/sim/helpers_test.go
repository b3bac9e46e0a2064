package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp/fasthttputil"
)

// harness is a simulator served on an in-memory listener, with a client.
type harness struct {
	t      *testing.T
	srv    *Server
	client *http.Client
}

const base = "http://sim"

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	s := New(cfg)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	tr := &http.Transport{
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return ln.Dial() },
		DisableKeepAlives: false,
	}
	h := &harness{t: t, srv: s, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		s.Shutdown()
		require.NoError(t, <-served)
	})
	return h
}

// post sends body (a string or a value to encode) and returns the response.
func (h *harness) post(path string, body any) *http.Response {
	h.t.Helper()
	resp, err := h.do(context.Background(), path, body)
	require.NoError(h.t, err)
	return resp
}

func (h *harness) do(ctx context.Context, path string, body any) (*http.Response, error) {
	b, ok := body.(string)
	if !ok {
		raw, err := json.Marshal(body)
		require.NoError(h.t, err)
		b = string(raw)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(b))
	require.NoError(h.t, err)
	req.Header.Set("Content-Type", "application/json")
	return h.client.Do(req)
}

// readAll reads a response body and closes it.
func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

// postJSON posts body, requires status, and decodes the JSON answer.
func (h *harness) postJSON(path string, body any, status int) (map[string]any, []byte) {
	h.t.Helper()
	resp := h.post(path, body)
	raw := readAll(h.t, resp)
	require.Equal(h.t, status, resp.StatusCode, "%s", raw)
	require.Equal(h.t, "application/json", resp.Header.Get("Content-Type"))
	var v map[string]any
	require.NoError(h.t, json.Unmarshal(raw, &v), "%s", raw)
	return v, raw
}

// sse is a parsed event stream.
type sse struct {
	frames []map[string]any // the JSON data frames, in order
	raw    []string         // every data payload, [DONE] included
	done   bool             // ended with data: [DONE]
	err    error            // a read error before the end of the body
}

// readSSE reads every data frame of r until the body ends or fails.
func readSSE(t *testing.T, r io.Reader) sse {
	t.Helper()
	var s sse
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err != io.EOF {
				s.err = err
			} else if line != "" {
				s.err = io.ErrUnexpectedEOF
			}
			return s
		}
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "line %q is not a data line", line)
		s.raw = append(s.raw, payload)
		require.False(t, s.done, "a frame after [DONE]")
		if payload == "[DONE]" {
			s.done = true
			continue
		}
		var f map[string]any
		if err := json.Unmarshal([]byte(payload), &f); err != nil {
			s.err = err
			return s
		}
		s.frames = append(s.frames, f)
	}
}

// stream posts a streaming request and reads the whole stream.
func (h *harness) stream(body map[string]any) (sse, *http.Response) {
	h.t.Helper()
	body["stream"] = true
	resp := h.post("/v1/chat/completions", body)
	defer resp.Body.Close()
	require.Equal(h.t, http.StatusOK, resp.StatusCode)
	require.Equal(h.t, "text/event-stream", resp.Header.Get("Content-Type"))
	return readSSE(h.t, resp.Body), resp
}

// chat is a chat request body with one user message.
func chat(text string, extra ...any) map[string]any {
	body := map[string]any{
		"model":    "sim-model",
		"messages": []any{map[string]any{"role": "user", "content": text}},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	return body
}

// delta returns choices[0].delta of a chunk, or nil for the usage chunk.
func delta(f map[string]any) map[string]any {
	choices := f["choices"].([]any)
	if len(choices) == 0 {
		return nil
	}
	return choices[0].(map[string]any)["delta"].(map[string]any)
}

func finishOf(f map[string]any) any {
	return f["choices"].([]any)[0].(map[string]any)["finish_reason"]
}

// num reads a JSON number at a dotted path.
func num(t *testing.T, v map[string]any, path string) int {
	t.Helper()
	x := dig(t, v, path)
	f, ok := x.(float64)
	require.True(t, ok, "%s is %T", path, x)
	return int(f)
}

func dig(t *testing.T, v any, path string) any {
	t.Helper()
	for _, p := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			v, ok = c[p]
			require.True(t, ok, "no %s in %v", p, c)
		case []any:
			i := int(p[0] - '0')
			require.Less(t, i, len(c))
			v = c[i]
		default:
			t.Fatalf("cannot descend into %T at %s", v, p)
		}
	}
	return v
}

// compileSchema compiles a JSON schema for validation.
func compileSchema(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("mem://schema.json", doc))
	s, err := c.Compile("mem://schema.json")
	require.NoError(t, err)
	return s
}

func validate(s *jsonschema.Schema, instance string) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(instance)))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

func decode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(raw, &v), "%s", raw)
	return v
}

func decodeErr(raw []byte) error {
	var v map[string]any
	return json.Unmarshal(raw, &v)
}

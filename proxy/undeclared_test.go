package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
)

// replayBody continues a conversation whose assistant called send_mail
// twice and get_weather once, declaring only the tools named in declared.
func replayBody(stream bool, declared ...string) string {
	var tools []string
	for _, name := range declared {
		tools = append(tools, `{"type":"function","function":{"name":"`+name+`","parameters":{"type":"object"}}}`)
	}
	call := func(id, name string) string {
		return `{"id":"` + id + `","type":"function","function":{"name":"` + name + `","arguments":"{}"}}`
	}
	body := `{"model":"mira","stream":` + fmt.Sprint(stream) + `,"messages":[` +
		`{"role":"user","content":"Mail Ada the weather"},` +
		`{"role":"assistant","content":null,"tool_calls":[` + call("a", "get_weather") + `,` + call("b", "send_mail") + `]},` +
		`{"role":"tool","tool_call_id":"a","content":"sunny"},` +
		`{"role":"tool","tool_call_id":"b","content":"sent"},` +
		`{"role":"assistant","content":null,"tool_calls":[` + call("c", "send_mail") + `]},` +
		`{"role":"tool","tool_call_id":"c","content":"sent again"},` +
		`{"role":"user","content":"Thanks [[sim:tokens=3]]"}]`
	if len(tools) > 0 {
		body += `,"tools":[` + strings.Join(tools, ",") + `]`
	}
	return body + `}`
}

// A history that replays calls of tools the request no longer declares is
// served as sent, and the native answers say so in
// undeclared_tool_replay; the OpenAI route has no gw block to say it in.
func TestUndeclaredToolReplayIsSignalled(t *testing.T) {
	f := newChatFixture(t)
	const signal = `"undeclared_tool_replay":{"calls":2,"names":["send_mail"]}`
	for _, tc := range []struct {
		path   string
		stream bool
	}{
		{"/api/v1/chat", false},
		{"/api/v1/chat", true},
		{"/api/v2/chat", false},
		{"/api/v2/chat", true},
	} {
		name := fmt.Sprintf("%s stream %v", tc.path, tc.stream)
		r := f.post(t, tc.path, replayBody(tc.stream, "get_weather"))
		require.Equal(t, http.StatusOK, r.status, "%s: %s", name, r.body)
		require.Equal(t, 1, strings.Count(string(r.body), signal), "%s: %s", name, r.body)

		r = f.post(t, tc.path, replayBody(tc.stream, "get_weather", "send_mail"))
		require.Equal(t, http.StatusOK, r.status, "%s: %s", name, r.body)
		require.NotContains(t, string(r.body), "undeclared_tool_replay", "%s: every replayed call is declared", name)
	}

	r := f.post(t, "/api/v1/chat", replayBody(false))
	require.Contains(t, string(r.body), `"undeclared_tool_replay":{"calls":3,"names":["get_weather","send_mail"]}`,
		"with no tools at all, every replayed call is undeclared, names in order of first appearance")

	r = f.post(t, "/v1/chat/completions", replayBody(false, "get_weather"))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.NotContains(t, string(r.body), "undeclared_tool_replay")
}

// A hostile history of many calls with distinct names, against many
// declared tools, is described in one pass: counted and listed once each.
func TestUndeclaredReplayOfManyNames(t *testing.T) {
	req := codec.ChatRequest{}
	for i := range 100 {
		req.Tools = append(req.Tools, codec.Tool{Type: "function", Function: codec.ToolFunction{Name: fmt.Sprintf("t%d", i)}})
	}
	const n = 20000
	m := codec.Message{Role: "assistant"}
	for i := range n {
		// Every name twice, and every tenth a declared one.
		name := fmt.Sprintf("u%d", i/2)
		if i%10 == 0 {
			name = fmt.Sprintf("t%d", i%100)
		}
		m.ToolCalls = append(m.ToolCalls, codec.ToolCall{ID: fmt.Sprint(i), Type: "function",
			Function: codec.FunctionCall{Name: name, Arguments: "{}"}})
	}
	req.Messages = []codec.Message{m}
	out := undeclaredReplay(&req, nil)
	require.True(t, strings.HasPrefix(string(out), fmt.Sprintf(`{"calls":%d,"names":["u0",`, n-n/10)), "%.80s", out)
	require.Equal(t, n/2, strings.Count(string(out), `"u`), "each undeclared name listed once")

	req.Messages = []codec.Message{{Role: "user"}}
	require.Nil(t, undeclaredReplay(&req, nil))
	require.Zero(t, testing.AllocsPerRun(100, func() { undeclaredReplay(&req, nil) }))
	req.Messages = []codec.Message{{Role: "assistant", ToolCalls: []codec.ToolCall{{Function: codec.FunctionCall{Name: "t7"}}}}}
	req.Tools = req.Tools[:8]
	require.Zero(t, testing.AllocsPerRun(100, func() { undeclaredReplay(&req, nil) }), "declared calls among a few tools cost nothing")
}

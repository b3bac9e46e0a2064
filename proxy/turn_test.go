package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// Complete runs a turn through the same pipeline as POST /api/v1/chat: the
// same reply, the same bill, and one ledger row under the caller's route
// and request id.
func TestCompleteIsTheChatPipeline(t *testing.T) {
	sink := &recordingSink{}
	f := newChatFixture(t, func(o *fixtureOptions) { o.usage = sink })
	p := &hotpath.Principal{KeyID: "key-1", UserID: "user-1", OrgID: "org-1", Kind: hotpath.KindDeveloper}
	body := `{"model":"mira","messages":[{"role":"user","content":"Hi [[sim:reply=Hello there]]"}]}`

	res := f.chat.Complete(p, []byte(body), "eval-abc-1", "eval_case")
	require.Nil(t, res.Err)
	require.Equal(t, "Hello there", res.Content)
	require.Equal(t, "stop", res.Finish)
	require.Equal(t, "mira", res.Tier)
	require.True(t, res.Billed)
	require.Positive(t, res.InputTokens)
	require.Positive(t, res.OutputTokens)
	require.Positive(t, res.CostPico)

	r := f.post(t, "/api/v1/chat", body)
	require.Equal(t, 200, r.status, "%s", r.body)
	rows := sink.all()
	require.Len(t, rows, 2)
	eval, chat := rows[0], rows[1]
	require.Equal(t, "eval-abc-1", eval.RequestID)
	require.Equal(t, "eval_case", eval.Route)
	require.Equal(t, "chat_v1", chat.Route)
	require.Equal(t, 200, eval.Status)
	require.Equal(t, "key-1", eval.KeyID)
	require.Equal(t, chat.CostPico, eval.CostPico, "billed as the chat route bills")
	require.Equal(t, chat.InputTokens, eval.InputTokens)
	require.Equal(t, res.CostPico, eval.CostPico)
}

// A tool call comes back as the OpenAI tool_calls array, and refusals keep
// the pipeline's codes: validation, streaming, structured output.
func TestCompleteOutcomes(t *testing.T) {
	sink := &recordingSink{}
	f := newChatFixture(t, func(o *fixtureOptions) { o.usage = sink })
	p := &hotpath.Principal{KeyID: "key-1", UserID: "user-1", OrgID: "org-1", Kind: hotpath.KindDeveloper}

	tool := `{"model":"kavi","messages":[{"role":"user","content":"[[sim:tool=get_weather]]"}],"tools":[{"type":"function",` +
		`"function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}`
	res := f.chat.Complete(p, []byte(tool), "t-1", "eval_case")
	require.Nil(t, res.Err)
	require.Equal(t, "tool_calls", res.Finish)
	require.Contains(t, string(res.ToolCalls), `"name":"get_weather"`)

	for _, tc := range []struct {
		name, body string
		code       codec.Code
	}{
		{"unknown model", `{"model":"gpt","messages":[{"role":"user","content":"x"}]}`, codec.CodeInvalidRequest},
		{"stream", `{"model":"mira","stream":true,"messages":[{"role":"user","content":"x"}]}`, codec.CodeInvalidRequest},
		{"schema unsatisfied", `{"model":"mira","messages":[{"role":"user","content":"[[sim:json_invalid]]"}],` +
			`"response_format":{"type":"json_schema","json_schema":{"name":"v","schema":{"type":"object","properties":` +
			`{"pass":{"type":"boolean"}},"required":["pass"]}}}}`, codec.CodeStructuredOutputUnsatisfied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "t-" + strings.ReplaceAll(tc.name, " ", "-")
			res := f.chat.Complete(p, []byte(tc.body), id, "eval_case")
			require.NotNil(t, res.Err)
			require.Equal(t, tc.code, res.Err.Code)
			rows := sink.all()
			last := rows[len(rows)-1]
			require.Equal(t, id, last.RequestID)
			require.Equal(t, tc.code.String(), last.ErrorCode)
			require.Equal(t, tc.code.Status(), last.Status)
		})
	}
	require.Nil(t, f.chat.Check(p, []byte(tool), codec.CurrentVersion, false))
	require.Equal(t, codec.CodeInvalidRequest, f.chat.Check(p, []byte(`{"model":"auto","messages":[]}`), codec.CurrentVersion, false).Code)
	// file_ids need the pin, as on the chat route.
	files := []byte(`{"model":"auto","messages":[{"role":"user","content":"see","file_ids":["f1"]}]}`)
	require.Equal(t, codec.CodeInvalidRequest, f.chat.Check(p, files, codec.CurrentVersion, false).Code)
	require.Nil(t, f.chat.Check(p, files, codec.VersionChatFileIDs, true))
	require.Equal(t, []string{"kavi", "vaani", "mira", "auto"}, f.chat.Models())

	s, cerr := CompileSchema([]byte(`{"type":"object","required":["a"]}`))
	require.Nil(t, cerr)
	require.Nil(t, s.Check([]byte(`{"a":1}`)))
	require.Equal(t, codec.CodeStructuredOutputUnsatisfied, s.Check([]byte(`{}`)).Code)
	_, cerr = CompileSchema([]byte(`{"type":7}`))
	require.Equal(t, codec.CodeInvalidSchema, cerr.Code)
}

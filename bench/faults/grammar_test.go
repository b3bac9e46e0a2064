package faults

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/frameorder"
)

// TestGatewayGrammar streams reply shapes beyond the scorecard's through
// every stream wire of the gateway and checks each against the Events
// grammar.
//
// Not here: a reply with no content at all (kavi spending max_tokens on
// reasoning, or [[sim:tokens=0]]) ends on /api/v2/chat with finish and no
// delta event, where the grammar asks for one or more; frameorder reports
// it as "finish without any delta".
func TestGatewayGrammar(t *testing.T) {
	st := newStack(t)
	weather := `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
	clock := `{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]}}}`
	for _, tc := range []struct {
		name, body string
		failed     string // the error code of a stream that fails; "" when it completes
	}{
		{"long", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=300]]"}]}`, ""},
		{"auto", `{"model":"auto","messages":[{"role":"user","content":"x [[sim:tokens=3]]"}]}`, ""},
		{"reasoning", `{"model":"vaani","messages":[{"role":"user","content":"x [[sim:reasoning=2]] [[sim:tokens=2]]"}]}`, ""},
		{"reasoning then tools", `{"model":"kavi","tools":[` + weather + `],"messages":[{"role":"user","content":"x [[sim:reasoning=3]] [[sim:tool=get_weather]]"}]}`, ""},
		{"parallel tools", `{"model":"kavi","tools":[` + weather + `,` + clock + `],"messages":[{"role":"user","content":"x [[sim:tool=get_weather,get_time]]"}]}`, ""},
		{"tool cut by max_tokens", `{"model":"vaani","max_tokens":2,"tools":[` + weather + `],"messages":[{"role":"user","content":"x [[sim:tool=get_weather]]"}]}`, ""},
		{"json object", `{"model":"mira","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"x [[sim:json]]"}]}`, ""},
		{"forced finish", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=2]] [[sim:finish=content_filter]]"}]}`, ""},
		{"dropped before a token", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=3]] [[sim:drop_after=0]]"}]}`, "upstream_overloaded"},
		{"dropped after the last token", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=3]] [[sim:drop_after=3]]"}]}`, "upstream_overloaded"},
		{"malformed first chunk", `{"model":"mira","messages":[{"role":"user","content":"x [[sim:tokens=3]] [[sim:fault=malformed_after=0]]"}]}`, "upstream_error"},
	} {
		for _, w := range []frameorder.Wire{frameorder.V1, frameorder.V2, frameorder.OpenAI, frameorder.OpenAIUsage} {
			t.Run(tc.name+"/"+w.String(), func(t *testing.T) {
				body := strings.Replace(tc.body, "{", `{"stream":true,`, 1)
				if w == frameorder.OpenAIUsage {
					body = strings.Replace(body, "{", `{"stream_options":{"include_usage":true},`, 1)
				}
				req, err := http.NewRequest(http.MethodPost, base+w.Path(), strings.NewReader(body))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+st.key)
				resp, err := st.client.Do(req)
				require.NoError(t, err)
				raw, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)

				out := frameorder.CheckStream(w, raw)
				require.Empty(t, out.Violation, "%s", raw)
				if tc.failed == "" {
					require.True(t, out.Complete, "%+v", out)
					return
				}
				require.True(t, out.Failed, "%+v", out)
				if w != frameorder.V1 {
					require.Equal(t, tc.failed, out.ErrorCode)
				}
			})
		}
	}
}

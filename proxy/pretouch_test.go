//go:build !race

package proxy

import (
	"testing"

	"github.com/bytedance/sonic/encoder"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/codec/codectest"
)

// TestPretouchCompilesTheRequestCodecs checks that after Pretouch the first
// request body of every chat wire, the specialised routes' body, the
// content parts and the body sent upstream are decoded or encoded without
// compiling a codec.
func TestPretouchCompilesTheRequestCodecs(t *testing.T) {
	codectest.RunFresh(t, func(t *testing.T) {
		require.NoError(t, Pretouch())
		first := func(name string, f func()) { codectest.FirstUse(t, name, codectest.Compiled, f) }
		first("chat completions body", func() {
			var r codec.ChatRequest
			require.Nil(t, decodeChatBody([]byte(`{"model":"mira","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true,`+
				`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`), &r))
		})
		first("Anthropic messages body", func() {
			var r codec.MessagesRequest
			require.Nil(t, decodeChatBody([]byte(`{"model":"mira","max_tokens":16,"system":"be brief",`+
				`"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`), &r))
			var blocks []codec.AnthropicBlock
			require.Nil(t, codec.DecodeRequest([]byte(`[{"type":"text","text":"hi"}]`), &blocks))
		})
		first("Responses body", func() {
			var r codec.ResponsesRequest
			require.Nil(t, decodeChatBody([]byte(`{"model":"mira","input":"hi","instructions":"be brief"}`), &r))
			var items []codec.ResponsesItem
			require.Nil(t, codec.DecodeRequest([]byte(`[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]`), &items))
			var parts []codec.ResponsesPart
			require.Nil(t, codec.DecodeRequest([]byte(`[{"type":"input_text","text":"hi"}]`), &parts))
		})
		first("content parts", func() {
			require.Nil(t, checkContentParts(0, []byte(`[{"type":"text","text":"hi"}]`)))
		})
		first("embeddings, rerank and moderation body", func() {
			var r auxRequest
			require.Nil(t, codec.DecodeRequest([]byte(`{"model":"gw-rerank","query":"q","documents":["a","b"],"top_n":1}`), &r))
		})
		first("upstream body", func() {
			// As buildUpstreamRequest encodes it.
			ur := upstreamRequest{Model: "sim-mira", Messages: []codec.Message{{Role: "user", Content: []byte(`"hi"`)}}, MaxTokens: 16}
			var body []byte
			require.NoError(t, encoder.EncodeInto(&body, &ur, 0))
		})
	})
}

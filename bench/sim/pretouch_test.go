//go:build !race

package sim

import (
	"testing"

	"github.com/bytedance/sonic"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec/codectest"
)

// TestPretouchCompilesTheRequestDecoders checks that after Pretouch the
// simulator decodes its first chat, content-part, embeddings and rerank
// bodies without compiling a codec (4–12 allocations measured, against
// thousands for a compilation).
func TestPretouchCompilesTheRequestDecoders(t *testing.T) {
	codectest.RunFresh(t, func(t *testing.T) {
		require.NoError(t, Pretouch())
		first := func(name, body string, v any) {
			codectest.FirstUse(t, name, codectest.Compiled, func() { require.NoError(t, sonic.Unmarshal([]byte(body), v)) })
		}
		first("chat body", `{"model":"sim-mira","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true,`+
			`"stream_options":{"include_usage":true},"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`, &chatRequest{})
		first("content parts", `[{"type":"text","text":"hi"}]`, &[]contentPart{})
		first("embeddings body", `{"model":"sim-embed","input":["a","b"],"dimensions":8}`, &embeddingsRequest{})
		first("rerank body", `{"model":"sim-rerank","query":"q","documents":["a","b"],"top_n":1}`, &rerankRequest{})
	})
}

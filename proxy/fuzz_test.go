package proxy

import (
	"runtime"
	"testing"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// FuzzChatRequest runs the whole chat request decoder and validator over
// arbitrary bodies. Its oracle is more than "no panic": a refusal is always
// a 4xx with a message, and the bytes allocated stay linear in the body
// (at most allocPerByte per byte plus a fixed allowance), so no input makes
// validation quadratic or amplifies memory.
func FuzzChatRequest(f *testing.F) {
	seeds := []string{
		`{"model":"kavi","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"auto","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"max_tokens":5}`,
		`{"model":"kavi","messages":[{"role":"user","content":"\x41"}]}`,
		`{"model":"kavi","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}}}]}`,
		`{"model":"kavi","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","minItems":1e308}}}}`,
		`{"model":"kavi","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}]}`,
		`{"max_tokens":"100","stream":"true","model":5}`,
		`{"MODEL":"kavi"}`,
	}
	tiers := hotpath.DefaultTiers()
	p := &hotpath.Principal{Kind: hotpath.KindDeveloper}
	for _, seed := range seeds {
		f.Add([]byte(seed))
		// The first decode of a type compiles its decoder: not the input's cost.
		var req codec.ChatRequest
		if codec.DecodeRequest([]byte(seed), &req) == nil {
			_, _ = validateChat(&req, chatV1, tiers, p, codec.CurrentVersion, true)
		}
	}
	const allocPerByte, allowance = 256, 4 << 20
	f.Fuzz(func(t *testing.T, body []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var req codec.ChatRequest
		var cerr *codec.Error
		if cerr = codec.DecodeRequest(body, &req); cerr == nil {
			_, cerr = validateChat(&req, chatV1, tiers, p, codec.CurrentVersion, true)
		}
		runtime.ReadMemStats(&after)
		if cerr != nil {
			if s := cerr.Code.Status(); s < 400 || s >= 500 || cerr.Message == "" {
				t.Fatalf("refusal %s (%d) %q is not a client error with a message", cerr.Code, s, cerr.Message)
			}
		}
		if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(allocPerByte*len(body)+allowance); got > bound {
			t.Fatalf("%d bytes allocated for a %d-byte body, over %d", got, len(body), bound)
		}
	})
}

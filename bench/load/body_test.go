package load

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/bench/frameorder"
)

func TestBuildVariants(t *testing.T) {
	sc := &Scenario{
		Wires:           map[Wire]float64{WireV1: 1, WireV2: 1, WireOpenAI: 1, WireUpstream: 1},
		Tiers:           map[string]float64{"kavi": 1, "mira": 3},
		Stream:          true,
		IncludeUsage:    true,
		PromptWords:     20,
		ReplyTokens:     7,
		TTFTms:          11,
		ITLms:           3,
		ReasoningTokens: 2,
		Tools:           true,
		Faults:          map[string]float64{"": 9, "status=503": 1},
	}
	require.NoError(t, sc.Validate())
	tg, err := parseTarget("http://127.0.0.1:8080/base/")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", tg.addr)
	vs, err := buildVariants(sc, tg, "")
	require.NoError(t, err)
	require.Len(t, vs, 4*2*2)
	require.Equal(t, 1.0, vs[len(vs)-1].weight)

	paths := map[Wire]string{
		WireV1: "/api/v1/chat", WireV2: "/api/v2/chat", WireOpenAI: "/v1/chat/completions", WireUpstream: "/v1/chat/completions",
	}
	checks := map[Wire]frameorder.Wire{WireV1: frameorder.V1, WireV2: frameorder.V2, WireOpenAI: frameorder.OpenAIUsage, WireUpstream: frameorder.Upstream}
	for _, v := range vs {
		require.Equal(t, "http://127.0.0.1:8080/base"+paths[v.wire], v.uri)
		require.Equal(t, checks[v.wire], v.check)
		var body struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		require.NoError(t, json.Unmarshal(v.body, &body), "%s", v.body)
		if v.wire == WireUpstream {
			require.Equal(t, "sim-"+v.tier, body.Model)
		} else {
			require.Equal(t, v.tier, body.Model)
		}
		require.True(t, body.Stream)
		require.Equal(t, v.wire == WireOpenAI || v.wire == WireUpstream, body.StreamOptions != nil)
		require.Len(t, body.Tools, 1)
		require.Equal(t, ToolName, body.Tools[0].Function.Name)
		require.Len(t, body.Messages, 1)
		content := body.Messages[0].Content
		for _, d := range []string{"[[sim:tokens=7]]", "[[sim:ttft_ms=11]]", "[[sim:itl_ms=3]]", "[[sim:reasoning=2]]", "[[sim:tool=get_weather]]"} {
			require.Contains(t, content, d)
		}
		if v.fault != "" {
			require.Contains(t, content, "[[sim:status=503]]")
		} else {
			require.NotContains(t, content, "status")
		}
	}

	// A target's wire replaces the scenario's.
	vs, err = buildVariants(sc, tg, WireUpstream)
	require.NoError(t, err)
	require.Len(t, vs, 2*2)
	for _, v := range vs {
		require.Equal(t, WireUpstream, v.wire)
	}
}

func TestBodyWithoutExtras(t *testing.T) {
	sc := &Scenario{PromptWords: 0, ReplyTokens: 16}
	require.NoError(t, sc.Validate())
	vs, err := buildVariants(sc, target{origin: "http://127.0.0.1:1"}, "")
	require.NoError(t, err)
	require.Len(t, vs, 1)
	require.JSONEq(t, `{"model":"mira","messages":[{"role":"user","content":"[[sim:tokens=16]]"}]}`, string(vs[0].body))
	require.Zero(t, vs[0].check, "non-streams are not checked")
}

func TestPickIsDeterministicAndWeighted(t *testing.T) {
	sc := &Scenario{Wires: map[Wire]float64{WireV1: 1, WireV2: 1, WireOpenAI: 2}}
	require.NoError(t, sc.Validate())
	vs, err := buildVariants(sc, target{origin: "http://127.0.0.1:1"}, "")
	require.NoError(t, err)
	counts := map[Wire]int{}
	const n = 40000
	for i := range uint64(n) {
		v := pick(vs, 7, i)
		require.Same(t, v, pick(vs, 7, i))
		counts[v.wire]++
	}
	require.InDelta(t, n/4, counts[WireV1], n/50)
	require.InDelta(t, n/4, counts[WireV2], n/50)
	require.InDelta(t, n/2, counts[WireOpenAI], n/50)
}

func TestParseTarget(t *testing.T) {
	for _, bad := range []string{"ftp://127.0.0.1", "http://", "127.0.0.1:80", "http://127.0.0.1/?q=1"} {
		_, err := parseTarget(bad)
		require.Error(t, err, bad)
	}
	tg, err := parseTarget("https://localhost")
	require.NoError(t, err)
	require.True(t, tg.tls)
	require.Equal(t, "localhost:443", tg.addr)
}

// A target's model, path and header replace the wire's and the
// scenario's, for a gateway that names and routes them its own way.
func TestTargetOverrides(t *testing.T) {
	sc := &Scenario{
		Tiers: map[string]float64{"kavi": 1, "mira": 1},
		Model: "scenario-{tier}", Path: "/scenario/chat", AuthHeader: "x-scenario: s1",
	}
	require.NoError(t, sc.Validate())
	tg, err := parseTarget("http://127.0.0.1:1/openai")
	require.NoError(t, err)
	tg.model, tg.path = "openai/sim-{tier}", "/chat/completions"
	vs, err := buildVariants(sc, tg, WireUpstream)
	require.NoError(t, err)
	require.Len(t, vs, 2)
	for _, v := range vs {
		require.Equal(t, "http://127.0.0.1:1/openai/chat/completions", v.uri)
		var body struct{ Model string }
		require.NoError(t, json.Unmarshal(v.body, &body))
		require.Equal(t, "openai/sim-"+v.tier, body.Model)
	}

	for _, tc := range []struct {
		name       string
		t          Target
		wantURI    string
		wantModel  string
		wantHeader [2]string
	}{
		{"the scenario's", Target{Name: "a", BaseURL: "http://127.0.0.1:1"},
			"http://127.0.0.1:1/scenario/chat", "scenario-kavi", [2]string{"x-scenario", "s1"}},
		{"a key beats the scenario's header", Target{Name: "b", BaseURL: "http://127.0.0.1:1", Key: "k2"},
			"http://127.0.0.1:1/scenario/chat", "scenario-kavi", [2]string{"Authorization", "Bearer k2"}},
		{"the target's own", Target{Name: "c", BaseURL: "http://127.0.0.1:1/v", Key: "k2",
			Model: "fixed", Path: "/x", AuthHeader: "Authorization:  Bearer k3 "},
			"http://127.0.0.1:1/v/x", "fixed", [2]string{"Authorization", "Bearer k3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := newRunner(t.Context(), sc, tc.t, Options{})
			require.NoError(t, err)
			defer r.close()
			require.Equal(t, tc.wantURI, r.variants[0].uri)
			require.Equal(t, "kavi", r.variants[0].tier)
			var body struct{ Model string }
			require.NoError(t, json.Unmarshal(r.variants[0].body, &body))
			require.Equal(t, tc.wantModel, body.Model)
			require.Equal(t, tc.wantHeader, [2]string{string(r.auth.name), string(r.auth.value)})
		})
	}

	for _, bad := range []Target{
		{Name: "p", BaseURL: "http://127.0.0.1:1", Path: "x"},
		{Name: "h", BaseURL: "http://127.0.0.1:1", AuthHeader: "k1"},
		{Name: "m", BaseURL: "http://127.0.0.1:1", Model: "a\rb"},
	} {
		_, err := newRunner(t.Context(), sc, bad, Options{})
		require.ErrorContains(t, err, "cannot run target "+bad.Name)
	}
}
